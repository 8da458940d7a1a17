"""The one way tests wait for something another thread or process does: poll a condition
until it holds or a deadline passes. Never a fixed sleep."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_until(condition: Callable[[], T | None], timeout: float = 20.0, interval: float = 0.05,
               what: str = "condition") -> T:
    """Calls `condition` until it returns something truthy and returns that.

    Fails with the last value seen after `timeout` seconds. The timeout only bounds a failing
    test; a passing one returns as soon as the condition holds.
    """
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"{what} not met within {timeout}s; last value: {value!r}")
        time.sleep(interval)


def first_200(get: Callable[[str, float], tuple[int, str]], exited: Callable[[], str | None],
              started: float, path: str, budget_s: float, timeout_s: float) -> float:
    """Seconds from `started` (time.monotonic) until `get(path, timeout_s)` first answered
    200, as a kubelet HTTP probe counts them; fails with what `exited` says once it says
    something (the server is gone), or once `budget_s` is spent."""
    def answered() -> float | None:
        account = exited()
        if account is not None:
            raise AssertionError(account)
        try:
            if get(path, timeout_s)[0] == 200:
                return time.monotonic() - started
        except OSError:
            pass
        return None

    remaining = budget_s - (time.monotonic() - started)
    return wait_until(answered, timeout=max(remaining, 0.0), interval=0.05,
                      what=f"{path} answering 200 within {budget_s}s")

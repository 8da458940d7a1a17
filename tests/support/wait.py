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

"""A clock tests move by hand, injected wherever the code under test reads time."""

from __future__ import annotations

import threading


class FakeClock:
    """Seconds that change only when the test says so.

    Thread-safe: code under test may read it from its own threads (an event wait watching the
    time advance) while the test moves it.
    """

    def __init__(self, start: float = 1000.0) -> None:
        self._now = start
        self._lock = threading.Lock()

    def __call__(self) -> float:
        return self.now

    @property
    def now(self) -> float:
        with self._lock:
            return self._now

    @now.setter
    def now(self, value: float) -> None:
        with self._lock:
            self._now = value

    def advance(self, seconds: float) -> None:
        with self._lock:
            self._now += seconds

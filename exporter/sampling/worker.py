"""A one-thread executor whose thread never holds the process open.

concurrent.futures joins its worker threads at exit, so one NVML call stuck in the driver
would keep a SIGTERMed exporter alive indefinitely. This worker is a daemon thread instead.
"""

from __future__ import annotations

import concurrent.futures
import queue
import threading
from collections.abc import Callable
from typing import Any, ParamSpec, TypeVar

P = ParamSpec("P")
T = TypeVar("T")

LOOP_SWITCH_INTERVAL_S = 0.0001
"""The interpreter's switch interval while serving (CPython's default is 5 ms). A worker
thread running Python (a poll over the simulated library, a render) keeps the interpreter
lock until another thread has waited this long for it, and the event loop needs the lock
back after each system call a scrape makes (three or four): with 5 ms, a scrape arriving
during a poll could wait 15 ms or more, and each wait is at most about this. A forced switch
costs a few microseconds, paid only while a worker and the loop both want the lock
(benchmarks/bench_serve.py measures both)."""

_Job = tuple["concurrent.futures.Future[Any]", Callable[..., Any], tuple[Any, ...], dict[str, Any]]


class DaemonExecutor(concurrent.futures.Executor):
    """An executor with one daemon thread, so a call stuck in the driver cannot keep the process
    from exiting."""

    def __init__(self, name: str) -> None:
        self._jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def submit(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs
               ) -> concurrent.futures.Future[T]:
        """Queue the call on the worker thread and return the future of its result."""
        future: concurrent.futures.Future[T] = concurrent.futures.Future()
        self._jobs.put((future, fn, args, kwargs))
        return future

    def _run(self) -> None:
        while (job := self._jobs.get()) is not None:
            future, fn, args, kwargs = job
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(fn(*args, **kwargs))
            except BaseException as exc:
                future.set_exception(exc)

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """Stop the worker after the queued calls (or cancel those not started), waiting for it when
        asked."""
        if cancel_futures:  # jobs not started yet are cancelled; a running one finishes
            while True:
                try:
                    job = self._jobs.get_nowait()
                except queue.Empty:
                    break
                if job is not None:
                    job[0].cancel()
        self._jobs.put(None)
        if wait:
            self._thread.join()

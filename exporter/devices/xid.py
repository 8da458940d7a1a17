"""XID events: a thread blocked in nvmlEventSetWait_v2, and a ledger that outlives it.

The ledger keeps the last code, a sliding window of recent events and monotonic totals per
entity, so a GPU loss or a re-enumeration (which replaces the thread and its event set)
loses no history.
"""

from __future__ import annotations

import collections
import ctypes
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from exporter.devices.errors import describe, is_nvml_error, nvml_code
from exporter.devices.model import EntityKey, XidCount, XidTotal
from exporter.devices.nvml_api import (
    NVML_ERROR_TIMEOUT,
    NVML_EVENT_TYPE_XID_CRITICAL_ERROR,
    NVML_VALUE_NOT_AVAILABLE_UINT,
    UNSUPPORTED_CODES,
    Handle,
    NvmlLib,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class XidEvent:
    """One XID event: the entity it happened on, its code, and when it was seen."""

    key: EntityKey
    xid: int
    at: float


class XidLedger:
    """Thread-safe record of XID events; read by the poll, written by the watcher."""

    def __init__(self, window_s: float, clock: Callable[[], float] = time.time) -> None:
        self.window_s = window_s
        self._clock = clock
        self._lock = threading.Lock()
        self._recent: collections.deque[XidEvent] = collections.deque()
        self._last: dict[EntityKey, int] = {}
        self._totals: dict[tuple[EntityKey, int], tuple[int, float]] = {}

    def record(self, key: EntityKey, xid: int) -> None:
        """Record an XID event on this entity now."""
        now = self._clock()
        with self._lock:
            self._recent.append(XidEvent(key, xid, now))
            self._last[key] = xid
            count, _ = self._totals.get((key, xid), (0, now))
            self._totals[(key, xid)] = (count + 1, now)

    def last_codes(self) -> dict[EntityKey, int]:
        """Return the latest XID code seen on each entity."""
        with self._lock:
            return dict(self._last)

    def window(self) -> tuple[XidCount, ...]:
        """Return how many events of each code each entity had within the window, dropping older
        events."""
        cutoff = self._clock() - self.window_s
        with self._lock:
            while self._recent and self._recent[0].at < cutoff:
                self._recent.popleft()
            counts = collections.Counter((e.key, e.xid) for e in self._recent)
        return tuple(XidCount(k, x, n) for (k, x), n in sorted(counts.items()))

    def totals(self) -> tuple[XidTotal, ...]:
        """Return each entity's count of events per code since start, with when the latest came."""
        with self._lock:
            items = sorted(self._totals.items())
        return tuple(XidTotal(k, x, n, at) for (k, x), (n, at) in items)


def _address(handle: Handle) -> int | None:
    """Return the pointer value behind a pynvml handle, which identifies the device even though
    each call returns a new ctypes object."""
    try:
        value = ctypes.cast(handle, ctypes.c_void_p).value
    except (TypeError, ctypes.ArgumentError):
        return None
    return int(value) if value is not None else None


class XidWatcher:
    """Registers every GPU on one event set and feeds the ledger until stopped."""

    WAIT_MS = 500
    """Bounds how long stop() waits; a TIMEOUT result is the normal idle case."""

    def __init__(
        self,
        lib: NvmlLib,
        ledger: XidLedger,
        gpus: dict[int, Handle],
        uuid_to_index: dict[str, int],
        instance_ids: set[EntityKey],
    ) -> None:
        self._lib = lib
        self._ledger = ledger
        self._gpus = gpus
        self._uuid_to_index = uuid_to_index
        self._instances = instance_ids
        self._address_to_index = {
            a: i for i, h in gpus.items() if (a := _address(h)) is not None
        }
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._event_set: object | None = None
        self.registered: set[int] = set()
        """GPU indices whose XID events this watcher receives."""

    def start(self) -> None:
        """Register every GPU for XID events and start the thread that waits for them; a GPU that
        refuses is left out and logged."""
        self._event_set = self._lib.nvmlEventSetCreate()
        for index, handle in self._gpus.items():
            try:
                self._lib.nvmlDeviceRegisterEvents(
                    handle, NVML_EVENT_TYPE_XID_CRITICAL_ERROR, self._event_set
                )
                self.registered.add(index)
            except Exception as exc:
                if not is_nvml_error(exc):
                    raise
                level = logging.DEBUG if nvml_code(exc) in UNSUPPORTED_CODES else logging.WARNING
                log.log(level, "XID events unavailable on GPU %d: %s", index, describe(exc))
        self._thread = threading.Thread(target=self._run, name="xid-watcher", daemon=True)
        self._thread.start()

    def _key_of(self, device: Handle, gi: int) -> EntityKey | None:
        # By handle address first: asking the UUID of a GPU that just fell off the bus fails
        # with GPU_IS_LOST, and that XID (79) is the one that must not be dropped.
        address = _address(device)
        index = self._address_to_index.get(address) if address is not None else None
        if index is None:
            index = self._uuid_to_index.get(self._uuid(device))
        if index is None:
            return None
        if gi != NVML_VALUE_NOT_AVAILABLE_UINT and (index, gi) in self._instances:
            return (index, gi)
        return (index, -1)

    def _uuid(self, device: Handle) -> str:
        uuid = self._lib.nvmlDeviceGetUUID(device)
        return uuid.decode() if isinstance(uuid, bytes) else uuid

    def _run(self) -> None:
        try:
            self._loop()
        finally:
            self._free_event_set()

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                event = self._lib.nvmlEventSetWait_v2(self._event_set, self.WAIT_MS)
                key = self._key_of(event.device, int(event.gpuInstanceId))
            except Exception as exc:
                if is_nvml_error(exc) and nvml_code(exc) == NVML_ERROR_TIMEOUT:
                    continue
                log.warning("XID event wait failed: %s", describe(exc) if is_nvml_error(exc)
                            else repr(exc))
                self._stop.wait(1.0)
                continue
            if key is None:
                log.warning("XID %d from an unknown device", int(event.eventData))
                continue
            log.warning("XID %d on GPU %d (instance %d)", int(event.eventData), key[0], key[1])
            self._ledger.record(key, int(event.eventData))

    def stop(self, wait: bool = True) -> None:
        """Ask the thread to end; it frees its event set on the way out. `wait=False`
        returns at once (the thread ends within one wait timeout)."""
        self._stop.set()
        if wait and self._thread is not None:
            self._thread.join(timeout=self.WAIT_MS / 1000 * 4)

    def _free_event_set(self) -> None:
        if self._event_set is not None:
            try:
                self._lib.nvmlEventSetFree(self._event_set)
            except Exception as exc:
                log.debug("freeing the event set failed: %r", exc)
            self._event_set = None

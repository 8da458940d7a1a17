"""XID events: event sets, registration, and waits that block until an XID is due."""

from __future__ import annotations

import ctypes
import time
from typing import Any

import pynvml

from exporter.simulated.node.core import (
    NOT_AVAILABLE,
    EventSetEntry,
    Handle,
    SimCore,
    address_of,
    fail,
)
from exporter.simulated.node.fault_specs import XidFault

_XID_EVENT = pynvml.nvmlEventTypeXidCriticalError
_WAIT_SLICE_S = 0.05
"""Event waits re-read the (possibly injected) clock at least this often."""


class EventCalls(SimCore):
    """The simulated node's XID event calls; a wait blocks on a condition until an XID is due."""

    def nvmlEventSetCreate(self) -> Any:
        """Create an empty event set and return its handle, as pynvml does."""
        with self._lock:
            self._begin("nvmlEventSetCreate")
            address = self._new_address()
            self._event_sets[address] = EventSetEntry({}, set())
            return ctypes.cast(ctypes.c_void_p(address), pynvml.c_nvmlEventSet_t)

    def _event_set(self, event_set: Any) -> EventSetEntry:
        found = self._event_sets.get(address_of(event_set) or 0)
        if found is None:
            fail(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return found

    def nvmlDeviceRegisterEvents(self, handle: Handle, event_types: int, event_set: Any) -> None:
        """Register the GPU for XID events on the event set; any other event type answers
        NOT_SUPPORTED."""
        with self._lock:
            t = self._begin("nvmlDeviceRegisterEvents")
            found = self._event_set(event_set)
            gpu = self._physical(handle, t)
            if event_types & ~_XID_EVENT or not event_types:
                fail(pynvml.NVML_ERROR_NOT_SUPPORTED)
            found.registered.setdefault(gpu.index, t)

    def _due_event(self, found: EventSetEntry, t: float) -> tuple[int, XidFault] | None:
        due = [
            (position, xid) for position, xid in enumerate(self._xids)
            if position not in found.delivered
            and xid.gpu in found.registered
            and found.registered[xid.gpu] <= xid.at <= t
        ]
        return min(due, key=lambda d: (d[1].at, d[0])) if due else None

    def nvmlEventSetWait_v2(self, event_set: Any, timeout_ms: int) -> Any:
        """Block until a registered GPU's XID is due, or raise TIMEOUT after timeout_ms.

        XIDs timed before their GPU was registered on this set are lost, as with NVML."""
        deadline = time.monotonic() + max(0, timeout_ms) / 1000.0
        with self._lock:
            self._begin("nvmlEventSetWait_v2")
            while True:
                found = self._event_set(event_set)
                t = self.now()
                if not self._initialised(t):
                    fail(pynvml.NVML_ERROR_UNINITIALIZED)
                due = self._due_event(found, t)
                if due is not None:
                    position, xid = due
                    found.delivered.add(position)
                    data = pynvml.c_nvmlEventData_t()
                    data.device = self._device_handle(self._gpus[xid.gpu].address)
                    data.eventType = _XID_EVENT
                    data.eventData = xid.code
                    data.gpuInstanceId = (NOT_AVAILABLE if xid.gpu_instance is None
                                          else xid.gpu_instance)
                    data.computeInstanceId = NOT_AVAILABLE
                    return data
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    fail(pynvml.NVML_ERROR_TIMEOUT)
                self._cond.wait(min(remaining, _WAIT_SLICE_S))

    def nvmlEventSetFree(self, event_set: Any) -> None:
        """Free the event set; an unknown one answers INVALID_ARGUMENT."""
        with self._lock:
            self._begin("nvmlEventSetFree")
            self._free(self._event_sets, event_set)
            self._cond.notify_all()


"""The NVML device backend: life cycle and enumeration, around one poll's reads.

This module owns NVML's init (retried with back-off), the device walk and its layout diffing,
lost GPUs and the XID watcher; `reading.DeviceReader` owns the read plans and the reads. Runs
entirely in the sampler's poll thread (plus the XID watcher's own thread). Over real GPUs
`lib` is the pynvml module; on the simulated node it is `SimNvml`, so both share this code.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import time
from collections.abc import Callable, Sequence

from exporter.devices.accounting import CallErrors
from exporter.devices.clock_events import (
    CLOCK_EVENTS_COUNT_FIELD,
    CLOCK_EVENTS_TOTAL_FIELD,
    ClockEventCounter,
)
from exporter.devices.config import DEFAULT_DEVICE_SETTINGS, DeviceSettings
from exporter.devices.enumerate import Enumeration, enumerate_devices
from exporter.devices.errors import BackendUnavailable, describe, is_nvml_error, nvml_code
from exporter.devices.health import HealthTracker
from exporter.devices.model import Entity, EntityKey, Inventory, Readings
from exporter.devices.nvml_api import (
    LIBRARY_GONE_CODES,
    NVML_ERROR_LIBRARY_NOT_FOUND,
    NvmlLib,
    error_name,
)
from exporter.devices.reading import DeviceReader, Values
from exporter.devices.xid import XidLedger, XidWatcher
from exporter.fields.catalog import FieldSpec, Reader
from exporter.fields.health_rules import READ_SPECS as HEALTH_READS
from exporter.fields.health_rules import HealthIncident
from exporter.selfmetrics import GPU_LOST, NVML_ERRORS, NVML_UP
from exporter.series import Family

log = logging.getLogger(__name__)

REENUMERATE_EVERY_S = 60.0
"""MIG Manager can rebuild instances without toggling MIG mode; a slow periodic walk
catches that without re-fetching handles every cycle."""
BACKOFF_S = (1.0, 2.0, 5.0, 10.0, 30.0)


@dataclasses.dataclass(slots=True)
class _Retry:
    """Growing pauses between attempts at something that keeps failing."""

    failures: int = 0
    next_at: float = 0.0

    def failed(self, now: float) -> None:
        self.next_at = now + BACKOFF_S[min(self.failures, len(BACKOFF_S) - 1)]
        self.failures += 1

    def succeeded(self) -> None:
        self.failures = 0


def _layout(enum: Enumeration) -> object:
    """Return what must stay the same for the read plans and GPM sample pairs to remain valid."""
    return tuple(
        (g.gpu, g.uuid, enum.handles.mig_enabled.get(g.gpu, False),
         tuple((i.gpu_instance_id, tuple(m.uuid for m in i.mig_devices))
               for i in enum.inventory.instances if i.gpu == g.gpu))
        for g in enum.inventory.gpus
    )


class NvmlBackend:
    """The device backend that reads real GPUs through NVML: it initialises NVML, enumerates the
    devices and reads each poll's values."""

    def __init__(
        self,
        lib: NvmlLib,
        fields: Sequence[FieldSpec],
        settings: DeviceSettings = DEFAULT_DEVICE_SETTINGS,
        *,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
        fault_reads: bool = False,
    ) -> None:
        self._lib = lib
        self._fault_reads = fault_reads
        """Read the health watches' inputs and XID events whatever the collectors enable: the
        faults are derived from them (`exporter.sampling.fault_tracker`)."""
        self._devices = settings.selection
        self._clock = clock
        self.ledger = XidLedger(settings.xid_count_window_s, wall_clock)
        self._errors = CallErrors()
        self.call_errors = self._errors.counts
        """Failed NVML calls since start, by function and return code name."""
        self._reader = DeviceReader(lib, self._errors, clock,
                                    counterparts=settings.prof_counterparts)
        self.clock_events = ClockEventCounter(settings.clock_events_count_window_s, wall_clock)
        self.health = HealthTracker(clock)
        self._initialised = False
        self._init_retry = _Retry()
        self.last_init_error: str | None = None
        self._enum: Enumeration | None = None
        self._layout: object = None
        self._fields_changed = False
        """Set by a reload: plan the same devices again for the new fields."""
        """The layout the plans were made for; None: plan again at the next walk."""
        self._enumerated_at = 0.0
        self._needs_enumeration = True
        self._lost_retry = _Retry()
        """Paces walks looking for a lost GPU (`next_at`: not before then)."""
        self._watcher: XidWatcher | None = None
        self._known: dict[EntityKey, Entity] = {}
        self.gpus_lost_total = 0
        self._fields: tuple[FieldSpec, ...] = ()
        self._fields_changed = False
        """Set by a reload: the next walk plans for the new fields."""
        self._wants_xid = False
        self._last_xid_names: tuple[str, ...] = ()
        """The names the collectors file gives the last-XID field (any of its DCGM names)."""
        self._wants_clock_events = False
        self._wants_clock_totals = False
        self._wants_health = False
        self._reads_health = False
        self.set_fields(tuple(fields))

    def set_fields(self, fields: tuple[FieldSpec, ...]) -> None:
        """Switch to another field set (a reload); takes effect from the next poll.

        That poll walks the devices and plans for the new fields. When it finds the layout
        the old plans were made for, the GPM sample pairs, the XID watcher and what answered
        "not supported" carry over: a series that stays configured misses no poll (GPM
        values need two samples, so starting afresh would blank every DCGM_FI_PROF_* series
        for one poll).
        """
        self._wants_health = any(s.reader is Reader.HEALTH for s in fields)
        self._reads_health = self._wants_health or self._fault_reads
        # The health watches' reads ride in the plan under hidden names (see devices.health).
        self._fields = fields + (HEALTH_READS if self._reads_health else ())
        # DCGM's health watches look at every XID since start, so they need the watcher too.
        self._wants_xid = self._reads_health or any(
            s.reader is Reader.XID_EVENTS for s in fields)
        # The last XID code, under every name the collectors give the field
        # (DCGM_FI_DEV_XID_ERRORS, its alias, the 1.x `dcgm_xid_errors`).
        self._last_xid_names = tuple(s.name for s in fields
                                     if s.reader is Reader.XID_EVENTS and s.part is None)
        self._wants_clock_events = any(s.name == CLOCK_EVENTS_COUNT_FIELD for s in fields)
        self._wants_clock_totals = any(s.name == CLOCK_EVENTS_TOTAL_FIELD for s in fields)
        self._fields_changed = True
        self._needs_enumeration = True

    # --- life cycle -------------------------------------------------------------------

    @property
    def up(self) -> bool:
        """Return whether NVML is initialised and the devices have been enumerated."""
        return self._initialised and self._enum is not None

    @property
    def inventory(self) -> Inventory:
        """Return the devices found by the latest enumeration (empty before the first one)."""
        return self._enum.inventory if self._enum else Inventory()

    def start(self) -> None:
        """Initialise NVML for the first time. Raise BackendUnavailable only when there is no
        NVML at all; a driver that is not loaded yet is retried by later polls."""
        try:
            self._try_init()
        except BackendUnavailable:
            raise
        except Exception as exc:
            log.error("NVML is not usable yet, will retry: %s", self.last_init_error or exc)

    def _try_init(self) -> None:
        try:
            self._lib.nvmlInit()
        except Exception as exc:
            if not is_nvml_error(exc):
                raise
            self.last_init_error = describe(exc)
            self._errors.count("nvmlInit", nvml_code(exc))
            if nvml_code(exc) == NVML_ERROR_LIBRARY_NOT_FOUND:
                raise BackendUnavailable(
                    "NVML (libnvidia-ml.so.1) is not installed on this machine: no NVIDIA "
                    "driver is present or the container was not started with the NVIDIA "
                    "runtime. Use --backend sim to run on the built-in simulated node."
                ) from exc
            self._init_retry.failed(self._clock())
            raise
        self._initialised = True
        self._init_retry.succeeded()
        self.last_init_error = None
        self._needs_enumeration = True
        log.info("NVML initialised")

    def close(self) -> None:
        """Stop the XID watcher, drop the handles and shut NVML down."""
        self._stop_watcher(wait=True)
        self._reader.clear()
        self._layout = None
        if self._initialised:
            try:
                self._lib.nvmlShutdown()
            except Exception as exc:
                log.debug("nvmlShutdown failed: %r", exc)
            self._initialised = False

    def _stop_watcher(self, wait: bool) -> None:
        if self._watcher is not None:
            self._watcher.stop(wait=wait)
            self._watcher = None

    # --- enumeration ------------------------------------------------------------------

    def _walk_due(self) -> bool:
        now = self._clock()
        return (self._needs_enumeration and now >= self._lost_retry.next_at) \
            or self._enum is None or now - self._enumerated_at >= REENUMERATE_EVERY_S

    def _enumerate(self) -> None:
        present = {g.gpu for g in self.inventory.gpus}
        enum = enumerate_devices(self._lib, self._devices, self._on_lost)
        # A GPU that falls off the bus just before a walk (a reload's, say) is found lost here,
        # not by a read: it is counted all the same.
        self.gpus_lost_total += len(enum.lost & present)
        layout = _layout(enum)
        unchanged = layout == self._layout
        self._enum = enum
        self._enumerated_at = self._clock()
        self._needs_enumeration = bool(enum.lost)
        if enum.lost:
            # A lost GPU is looked for again with growing pauses, never every cycle.
            self._lost_retry.failed(self._enumerated_at)
        else:
            self._lost_retry.succeeded()
        if unchanged and not self._fields_changed:
            # The periodic walk found the same devices: keep the plans (and the unsupported
            # calls they dropped), the GPM sample pairs and the XID watcher; only the label
            # fields are read again.
            self._reader.read_labels()
            return
        fields_only = unchanged
        self._layout = layout
        self._fields_changed = False
        inv = enum.inventory
        self._known.update((e.key, e) for e in (*inv.gpus, *inv.instances))
        self._reader.replan(enum, self._fields, self._devices, same_devices=fields_only)
        if fields_only:
            # The watcher's handles still name the same GPUs: restart it only if XID
            # fields came or went.
            if self._wants_xid != (self._watcher is not None):
                self._restart_watcher(enum)
            return
        log.info("enumerated %d GPUs, %d MIG GPU instances", len(inv.gpus), len(inv.instances))
        if not unchanged or (self._watcher is None) == self._wants_xid:
            self._restart_watcher(enum)

    def _enumeration_failed(self, exc: Exception) -> None:
        self._errors.count("enumerate", nvml_code(exc))
        log.error("device enumeration failed: %s", describe(exc))
        self._enum = None
        self._reader.clear()
        self._layout = None  # Nothing is planned now, so the next walk plans afresh.
        self._needs_enumeration = True

    def _restart_watcher(self, enum: Enumeration) -> None:
        # Never join the old thread here: it may sit in a 500 ms event wait, and this runs
        # inside a poll. It frees its event set when it ends.
        self._stop_watcher(wait=False)
        if not self._wants_xid:
            return
        self._watcher = XidWatcher(
            self._lib, self.ledger, dict(enum.handles.gpu),
            {g.uuid: g.gpu for g in enum.inventory.gpus},
            {i.key for i in enum.inventory.instances},
        )
        self._watcher.start()

    def _drop_lost(self, index: int) -> None:
        """Take a GPU that answered GPU_IS_LOST out of the inventory at once (the reader
        has stopped reading it)."""
        assert self._enum is not None
        self.gpus_lost_total += 1
        self._on_lost(index)
        inv = self._enum.inventory
        inventory = dataclasses.replace(
            inv,
            gpus=tuple(g for g in inv.gpus if g.gpu != index),
            instances=tuple(i for i in inv.instances if i.gpu != index),
        )
        self._enum = dataclasses.replace(self._enum, inventory=inventory,
                                         lost=self._enum.lost | {index})
        # Its plans are gone: should it answer at the next walk, that walk plans it again.
        self._layout = None
        self._needs_enumeration = True
        self._lost_retry.next_at = self._clock() + BACKOFF_S[0]

    def _drop_library(self, code: int) -> None:
        """Drop the library after the driver went away under it (unloaded or reloaded), since
        every call answers UNINITIALIZED or DRIVER_NOT_LOADED from then on. What this poll read
        is not served; the backend is down and starts over from nvmlInit, retried with back-off."""
        self._reader.library_gone = None
        log.error("NVML answers %s: the driver was unloaded or reloaded; initialising again",
                  error_name(code))
        self.last_init_error = f"{error_name(code)} (the driver went away while in use)"
        self._stop_watcher(wait=False)
        self._reader.clear()
        self._enum = None
        self._layout = None
        self._needs_enumeration = True
        self._initialised = False
        # Balance our nvmlInit, in case the library still counts it.
        with contextlib.suppress(Exception):
            self._lib.nvmlShutdown()

    def _on_lost(self, index: int) -> None:
        log.warning("GPU %d is lost (GPU_IS_LOST); it is left out until it answers again", index)

    # --- one poll ---------------------------------------------------------------------

    def poll(self) -> Readings:
        """Read every enabled field once. Never raises for NVML errors."""
        if not self._initialised:
            if self._clock() < self._init_retry.next_at:
                return Readings()
            try:
                self._try_init()
            except Exception:
                return Readings()
        try:
            if self._walk_due():
                self._enumerate()
        except Exception as exc:
            if not is_nvml_error(exc):
                raise
            self._enumeration_failed(exc)
            if nvml_code(exc) in LIBRARY_GONE_CODES:
                self._drop_library(nvml_code(exc))
            return Readings()
        values, lost = self._reader.read()
        if self._reader.library_gone is not None:
            self._drop_library(self._reader.library_gone)
            return Readings()
        for index in lost:
            self._drop_lost(index)
        if self._reader.layout_changed:
            self._reader.layout_changed = False
            self._needs_enumeration = True
        if self._wants_xid:
            self._add_xid_last_codes(values)
        self.clock_events.record(values)
        self.health.record(values)
        return Readings(
            values=values,
            xid_window=self.ledger.window() if self._wants_xid else (),
            xid_totals=self.ledger.totals() if self._wants_xid else (),
            gpm_support=dict(self._reader.gpm_support),
            links=self._reader.links,
            peers=self._reader.peers,
            labels=self._reader.labels,
            xid_window_s=self.ledger.window_s,
            known=dict(self._known),
            clock_events=self.clock_events.window(
                {g.key for g in self.inventory.gpus} if self._wants_clock_events else ()),
            clock_events_window_s=self.clock_events.window_s,
            clock_event_totals=self.clock_events.totals() if self._wants_clock_totals else (),
            health=self._health() if self._wants_health else {},
            health_codes=self._health_codes() if self._reads_health else {},
        )

    def _health_codes(self) -> dict[int, frozenset[str]]:
        """Return the failing health codes of every GPU present, leaving out the XID rules (those
        are the faults' to report)."""
        mig_on = dict(self._enum.handles.mig_enabled) if self._enum else {}
        return self.health.conditions((g.gpu for g in self.inventory.gpus), mig_on)

    def _health(self) -> dict[int, tuple[HealthIncident, ...]]:
        """Return every GPU's health watches; an XID filed on a MIG instance counts for its GPU."""
        xids: dict[int, set[int]] = {}
        for total in self.ledger.totals():
            xids.setdefault(total.entity_key[0], set()).add(total.xid)
        mig_on = dict(self._enum.handles.mig_enabled) if self._enum else {}
        return self.health.status((g.gpu for g in self.inventory.gpus),
                                  {gpu: frozenset(codes) for gpu, codes in xids.items()},
                                  mig_on)

    def _add_xid_last_codes(self, values: Values) -> None:
        if not self._last_xid_names or self._watcher is None:
            return
        last = self.ledger.last_codes()
        registered = self._watcher.registered
        for key, entity_values in values.items():
            # No event yet is a true "last XID = 0", but only where events can arrive.
            if key[0] in registered:
                for name in self._last_xid_names:
                    entity_values[name] = float(last.get(key, 0))
        present = {g.gpu for g in self.inventory.gpus}
        for key, code in last.items():
            # A GPU that fell off the bus keeps its last XID (typically 79) on display.
            if key[0] not in present:
                for name in self._last_xid_names:
                    values.setdefault(key, {})[name] = float(code)

    # --- self-metrics -----------------------------------------------------------------

    def families(self) -> list[Family]:
        """Return the backend's own metric families: whether NVML is up, failed calls, and GPUs
        lost."""
        errors = (NVML_ERRORS.sample(float(n), function=fn, code=code)
                  for (fn, code), n in sorted(self.call_errors.items()))
        return [
            NVML_UP.single(1.0 if self.up else 0.0),
            NVML_ERRORS.family(errors),
            GPU_LOST.single(float(self.gpus_lost_total)),
        ]

"""The NVML device backend: life cycle, enumeration, one poll, and error accounting.

Runs entirely in the sampler's worker thread (plus the XID watcher's own thread). Over real
GPUs `lib` is the pynvml module; on the simulated node it is `SimNvml`, so both share this
code path.
"""

from __future__ import annotations

import collections
import dataclasses
import logging
import time
from collections.abc import Callable, Sequence

from exporter.devices.clock_events import ClockEventCounter
from exporter.devices.enumerate import Enumeration, enumerate_devices
from exporter.devices.errors import BackendUnavailable, describe, is_nvml_error, nvml_code
from exporter.devices.filter import ALL_DEVICES, DeviceFilter
from exporter.devices.gpm import GpmReader
from exporter.devices.model import Entity, Inventory, Readings
from exporter.devices.nvml_api import (
    NVML_DEVICE_MIG_ENABLE,
    NVML_ERROR_GPU_IS_LOST,
    NVML_ERROR_INVALID_ARGUMENT,
    NVML_ERROR_LIBRARY_NOT_FOUND,
    NVML_ERROR_NOT_FOUND,
    UNSUPPORTED_CODES,
    Handle,
    NvmlLib,
    error_name,
)
from exporter.devices.plan import EntityPlan, build_plan, read_field_values
from exporter.devices.xid import XidLedger, XidWatcher
from exporter.fields.catalog import (
    FI_NVLINK_THROUGHPUT_DATA_RX,
    FI_NVLINK_THROUGHPUT_DATA_TX,
    FieldSpec,
    Reader,
    Scope,
)
from exporter.selfmetrics import GPU_LOST, NVML_ERRORS, NVML_UP
from exporter.series import Family

log = logging.getLogger(__name__)

REENUMERATE_EVERY_S = 60.0
"""MIG Manager can rebuild instances without toggling MIG mode; a slow periodic walk
catches that without re-fetching handles every cycle."""
BACKOFF_S = (1.0, 2.0, 5.0, 10.0, 30.0)

_GPU_SCOPES = {Scope.GPU, Scope.GPU_NO_MIG, Scope.INSTANCE}
_MIG_PARENT_SCOPES = {Scope.GPU}


class _GpuLost(Exception):
    pass


@dataclasses.dataclass(slots=True)
class _GpuWork:
    """One GPU's poll work: its plan and those of its MIG GPU instances."""

    entity: Entity
    handle: Handle
    mig_on: bool
    plan: EntityPlan | None
    instances: list[tuple[Entity, EntityPlan]]


def _layout(enum: Enumeration) -> object:
    """What must stay the same for plans and GPM pairs to remain valid."""
    return tuple(
        (g.gpu, g.uuid, enum.handles.mig_enabled.get(g.gpu, False),
         tuple((i.gpu_instance_id, tuple(m.uuid for m in i.mig_devices))
               for i in enum.inventory.instances if i.gpu == g.gpu))
        for g in enum.inventory.gpus
    )


def _backoff(attempt: int) -> float:
    return BACKOFF_S[min(attempt, len(BACKOFF_S) - 1)]


class NvmlBackend:
    def __init__(
        self,
        lib: NvmlLib,
        fields: Sequence[FieldSpec],
        *,
        devices: DeviceFilter = ALL_DEVICES,
        xid_window_s: float = 300.0,
        clock_events_window_s: float = 300.0,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self._lib = lib
        self._devices = devices
        self._clock = clock
        self.ledger = XidLedger(xid_window_s, wall_clock)
        self.clock_events = ClockEventCounter(clock_events_window_s, wall_clock)
        self._gpm = GpmReader(lib, clock)
        self._initialised = False
        self._enum: Enumeration | None = None
        self._work: list[_GpuWork] = []
        self._enumerated_at = 0.0
        self._watcher: XidWatcher | None = None
        self._layout: object = None
        self._replan = True
        self._logged_unsupported: set[tuple[str, str]] = set()
        self._gpm_support: dict[int, bool] = {}
        self._init_failures = 0
        self._next_init_at = 0.0
        self._needs_enumeration = True
        self._enumerate_after = 0.0
        self._lost_retries = 0
        self._known: dict[tuple[int, int], Entity] = {}
        self.last_init_error: str | None = None
        self.call_errors: collections.Counter[tuple[str, str]] = collections.Counter()
        self.gpus_lost_total = 0
        self._fields: tuple[FieldSpec, ...] = ()
        self._wants_xid = False
        self.set_fields(tuple(fields))

    def set_fields(self, fields: tuple[FieldSpec, ...]) -> None:
        """Switch to another field set (a reload); takes effect from the next poll."""
        self._fields = fields
        self._wants_xid = any(s.reader is Reader.XID_EVENTS for s in fields)
        self._wants_last_xid = any(s.name == "DCGM_FI_DEV_XID_ERRORS" for s in fields)
        self._needs_enumeration = True  # plans and the XID watcher follow the fields
        self._replan = True

    # --- life cycle -------------------------------------------------------------------

    @property
    def up(self) -> bool:
        return self._initialised and self._enum is not None

    @property
    def inventory(self) -> Inventory:
        return self._enum.inventory if self._enum else Inventory()

    def start(self) -> None:
        """First initialisation. Raises BackendUnavailable only when there is no NVML at
        all; a driver that is not loaded yet is retried by later polls."""
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
            self._count_error("nvmlInit", nvml_code(exc))
            if nvml_code(exc) == NVML_ERROR_LIBRARY_NOT_FOUND:
                raise BackendUnavailable(
                    "NVML (libnvidia-ml.so.1) is not installed on this machine: no NVIDIA "
                    "driver is present or the container was not started with the NVIDIA "
                    "runtime. Use --backend sim to run on the built-in simulated node."
                ) from exc
            self._next_init_at = self._clock() + _backoff(self._init_failures)
            self._init_failures += 1
            raise
        self._initialised = True
        self._init_failures = 0
        self.last_init_error = None
        self._needs_enumeration = True
        log.info("NVML initialised")

    def close(self) -> None:
        self._stop_watcher(wait=True)
        self._gpm.forget()
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

    def _enumerate(self) -> None:
        enum = enumerate_devices(self._lib, self._devices, self._on_lost)
        layout = _layout(enum)
        unchanged = layout == self._layout and not self._replan
        self._enum = enum
        self._enumerated_at = self._clock()
        self._needs_enumeration = bool(enum.lost)
        if enum.lost:
            # A lost GPU is looked for again with growing pauses, never every cycle.
            self._enumerate_after = self._enumerated_at + _backoff(self._lost_retries)
            self._lost_retries += 1
        else:
            self._lost_retries = 0
        if unchanged:
            # The periodic walk found the same devices: keep the plans (and the unsupported
            # calls they dropped), the GPM sample pairs and the XID watcher.
            return
        self._layout = layout
        self._replan = False
        # Handles may now mean other devices: forget everything tied to the old ones.
        self._gpm.forget()
        self._gpm_support.clear()
        inv = enum.inventory
        self._known.update((e.key, e) for e in (*inv.gpus, *inv.instances))
        self._work = self._plan(enum)
        log.info("enumerated %d GPUs, %d MIG GPU instances", len(inv.gpus), len(inv.instances))
        self._restart_watcher(enum)

    def _plan(self, enum: Enumeration) -> list[_GpuWork]:
        work = []
        by_gpu: dict[int, list[Entity]] = collections.defaultdict(list)
        for inst in enum.inventory.instances:
            by_gpu[inst.gpu].append(inst)
        for gpu in enum.inventory.gpus:
            handle = enum.handles.gpu[gpu.gpu]
            mig_on = enum.handles.mig_enabled.get(gpu.gpu, False)
            scopes = _MIG_PARENT_SCOPES if mig_on else _GPU_SCOPES
            plan = None
            if self._devices.gpus:
                plan = build_plan(self._lib, handle, f"GPU {gpu.gpu}",
                                  [s for s in self._fields if s.scope in scopes])
            instances = []
            for inst in by_gpu[gpu.gpu]:
                assert inst.gpu_instance_id is not None
                mig_handle = enum.handles.instance[(gpu.gpu, inst.gpu_instance_id)]
                inst_plan = build_plan(
                    self._lib, mig_handle, f"GPU {gpu.gpu} instance {inst.gpu_instance_id}",
                    [s for s in self._fields if s.scope is Scope.INSTANCE])
                instances.append((inst, inst_plan))
            work.append(_GpuWork(gpu, handle, mig_on, plan, instances))
        return work

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
        """Take a GPU that answered GPU_IS_LOST out of the inventory at once."""
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
        self._work = [w for w in self._work if w.entity.gpu != index]
        self._needs_enumeration = True
        self._enumerate_after = self._clock() + BACKOFF_S[0]

    def _on_lost(self, index: int) -> None:
        log.warning("GPU %d is lost (GPU_IS_LOST); it is left out until it answers again", index)

    # --- one poll ---------------------------------------------------------------------

    def poll(self) -> Readings:
        """Read every enabled field once. Never raises for NVML errors."""
        if not self._initialised:
            if self._clock() < self._next_init_at:
                return Readings()
            try:
                self._try_init()
            except Exception:
                return Readings()
        try:
            now = self._clock()
            if (self._needs_enumeration and now >= self._enumerate_after) or self._enum is None \
                    or now - self._enumerated_at >= REENUMERATE_EVERY_S:
                self._enumerate()
        except Exception as exc:
            if not is_nvml_error(exc):
                raise
            self._count_error("enumerate", nvml_code(exc))
            log.error("device enumeration failed: %s", describe(exc))
            self._enum = None
            self._work = []
            self._needs_enumeration = True
            return Readings()
        values: dict[tuple[int, int], dict[str, float]] = {}
        for work in list(self._work):
            try:
                self._poll_gpu(work, values)
            except _GpuLost:
                self._drop_lost(work.entity.gpu)
                for key in [k for k in values if k[0] == work.entity.gpu]:
                    del values[key]
        if self._wants_xid:
            self._add_xid_last_codes(values)
        self.clock_events.record(values)
        return Readings(
            values=values,
            xid_window=self.ledger.window() if self._wants_xid else (),
            xid_totals=self.ledger.totals() if self._wants_xid else (),
            gpm_supported=dict(self._gpm_support),
            xid_window_s=self.ledger.window_s,
            known=dict(self._known),
            clock_events=self.clock_events.window(),
            clock_events_window_s=self.clock_events.window_s,
        )

    def _poll_gpu(self, work: _GpuWork, out: dict[tuple[int, int], dict[str, float]]) -> None:
        if work.plan is not None:
            out[work.entity.key] = self._read(work.entity, work.handle, None, work.plan)
        if self._mig_layout_changed(work):
            self._needs_enumeration = True
            return
        for inst, plan in work.instances:
            out[inst.key] = self._read(inst, work.handle, inst.gpu_instance_id, plan)

    def _mig_layout_changed(self, work: _GpuWork) -> bool:
        try:
            current = self._lib.nvmlDeviceGetMigMode(work.handle)[0] == NVML_DEVICE_MIG_ENABLE
        except Exception as exc:
            if is_nvml_error(exc) and nvml_code(exc) in UNSUPPORTED_CODES:
                return False
            self._check_lost(exc, "nvmlDeviceGetMigMode")
            return False
        if current != work.mig_on:
            log.info("MIG mode of GPU %d changed; re-enumerating", work.entity.gpu)
            return True
        return False

    def _read(self, entity: Entity, parent: Handle, gpu_instance_id: int | None,
              plan: EntityPlan) -> dict[str, float]:
        out: dict[str, float] = {}
        for step in plan.calls:
            try:
                answer = step.call()
            except Exception as exc:
                if self._call_failed(plan, step.function, exc):
                    plan.calls = [s for s in plan.calls if s is not step]
                continue
            for o in step.outputs:
                value = o.conv(answer if o.pick is None else o.pick(answer))
                if value is not None:
                    out[o.name] = value
        if plan.field_values is not None:
            self._read_field_values(plan, out)
        if plan.gpm is not None:
            self._read_gpm(entity, parent, gpu_instance_id, plan, out)
        return out

    def _read_field_values(self, plan: EntityPlan, out: dict[str, float]) -> None:
        fv = plan.field_values
        assert fv is not None
        try:
            values, failed = read_field_values(self._lib, plan.handle, fv.requests)
        except Exception as exc:
            if self._call_failed(plan, "nvmlDeviceGetFieldValues", exc):
                plan.field_values = None
            return
        if failed:
            self._field_values_failed(plan, failed)
        for field_id, outputs in fv.outputs.items():
            raw = values.get(field_id)
            if raw is not None:
                for name, conv in outputs:
                    value = conv(raw)
                    if value is not None:
                        out[name] = value
        if fv.nvlink:
            tx = values.get(FI_NVLINK_THROUGHPUT_DATA_TX)
            rx = values.get(FI_NVLINK_THROUGHPUT_DATA_RX)
            if tx is not None and rx is not None:
                for name, conv in fv.nvlink:
                    value = conv(tx + rx)
                    if value is not None:
                        out[name] = value

    def _field_values_failed(self, plan: EntityPlan, failed: dict[int, int]) -> None:
        fv = plan.field_values
        assert fv is not None
        for field_id, code in failed.items():
            if code == NVML_ERROR_GPU_IS_LOST:
                raise _GpuLost()
            if code in UNSUPPORTED_CODES:
                self._note_unsupported(plan.uid, f"field {field_id}", "nvmlDeviceGetFieldValues",
                                       code)
                fv.requests = [r for r in fv.requests if r[0] != field_id]
            else:
                self._count_error("nvmlDeviceGetFieldValues", code)
        if not fv.requests:
            plan.field_values = None

    def _read_gpm(self, entity: Entity, parent: Handle, gpu_instance_id: int | None,
                  plan: EntityPlan, out: dict[str, float]) -> None:
        gpm = plan.gpm
        assert gpm is not None
        supported = self._gpm_support.get(entity.gpu)
        if supported is None:
            supported = self._query_gpm_support(entity, parent)
        if not supported:
            plan.gpm = None
            return
        try:
            values, failed = self._gpm.read(entity.key, parent, gpu_instance_id, gpm.metric_ids)
        except Exception as exc:
            if self._call_failed(plan, "nvmlGpmMetricsGet", exc):
                plan.gpm = None
            return
        for metric_id, code in failed.items():
            if code in UNSUPPORTED_CODES:
                # e.g. NVLink rates of a MIG instance: asked once, then left out.
                self._note_unsupported(plan.uid, f"GPM metric {metric_id}",
                                       "nvmlGpmMetricsGet", code)
                gpm.metric_ids = [m for m in gpm.metric_ids if m != metric_id]
            else:
                self._count_error("nvmlGpmMetricsGet", code)
        for metric_id, raw in values.items():
            for name, conv in gpm.outputs.get(metric_id, ()):
                value = conv(raw)
                if value is not None:
                    out[name] = value

    def _query_gpm_support(self, entity: Entity, parent: Handle) -> bool:
        try:
            supported = bool(self._lib.nvmlGpmQueryDeviceSupport(parent).isSupportedDevice)
        except Exception as exc:
            self._check_lost(exc, "nvmlGpmQueryDeviceSupport")
            supported = False
        self._gpm_support[entity.gpu] = supported
        if not supported:
            log.warning("GPU %d (%s) has no GPM support: DCGM_FI_PROF_* fields are not "
                        "exported for it (GPM needs Hopper or newer)", entity.gpu, entity.model)
        return supported

    def _add_xid_last_codes(self, values: dict[tuple[int, int], dict[str, float]]) -> None:
        if not self._wants_last_xid or self._watcher is None:
            return
        last = self.ledger.last_codes()
        registered = self._watcher.registered
        for key, entity_values in values.items():
            # No event yet is a true "last XID = 0", but only where events can arrive.
            if key[0] in registered:
                entity_values["DCGM_FI_DEV_XID_ERRORS"] = float(last.get(key, 0))
        present = {g.gpu for g in self.inventory.gpus}
        for key, code in last.items():
            # A GPU that fell off the bus keeps its last XID (typically 79) on display.
            if key[0] not in present:
                values.setdefault(key, {})["DCGM_FI_DEV_XID_ERRORS"] = float(code)

    # --- errors -----------------------------------------------------------------------

    def _count_error(self, function: str, code: int) -> None:
        self.call_errors[(function, error_name(code))] += 1

    def _check_lost(self, exc: Exception, function: str) -> None:
        if not is_nvml_error(exc):
            raise exc
        code = nvml_code(exc)
        self._count_error(function, code)
        if code == NVML_ERROR_GPU_IS_LOST:
            raise _GpuLost() from exc

    def _call_failed(self, plan: EntityPlan, function: str, exc: Exception) -> bool:
        """Account for a failed call; True when it should leave the plan (unsupported)."""
        if not is_nvml_error(exc):
            log.error("unexpected error from %s on %s: %r", function, plan.uid, exc)
            self.call_errors[(function, "EXCEPTION")] += 1
            return False
        code = nvml_code(exc)
        if code in UNSUPPORTED_CODES:
            self._note_unsupported(plan.uid, function, function, code)
            return True
        if code in (NVML_ERROR_INVALID_ARGUMENT, NVML_ERROR_NOT_FOUND):
            # A MIG handle whose instance was destroyed: the layout changed under us.
            self._needs_enumeration = True
        self._check_lost(exc, function)
        return False

    def _note_unsupported(self, uid: str, what: str, function: str, code: int) -> None:
        self._count_error(function, code)
        if (uid, what) not in self._logged_unsupported:
            self._logged_unsupported.add((uid, what))
            log.info("%s: %s answers %s; its series are omitted", uid, what, error_name(code))

    # --- self-metrics -----------------------------------------------------------------

    def families(self) -> list[Family]:
        errors = (NVML_ERRORS.sample(float(n), function=fn, code=code)
                  for (fn, code), n in sorted(self.call_errors.items()))
        return [
            NVML_UP.single(1.0 if self.up else 0.0),
            NVML_ERRORS.family(errors),
            GPU_LOST.single(float(self.gpus_lost_total)),
        ]

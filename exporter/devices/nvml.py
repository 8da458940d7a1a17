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

from exporter.devices.enumerate import Enumeration, enumerate_devices
from exporter.devices.errors import BackendUnavailable, describe, is_nvml_error, nvml_code
from exporter.devices.filter import ALL_DEVICES, DeviceFilter
from exporter.devices.gpm import GpmReader
from exporter.devices.model import Entity, Inventory, Readings
from exporter.devices.nvml_api import (
    NVML_ERROR_GPU_IS_LOST,
    NVML_ERROR_INVALID_ARGUMENT,
    NVML_ERROR_LIBRARY_NOT_FOUND,
    NVML_ERROR_NOT_FOUND,
    UNSUPPORTED_CODES,
    Handle,
    NvmlLib,
    error_name,
)
from exporter.devices.readers import (
    FUNCTION_OF,
    SIMPLE_READERS,
    convert,
    field_value_requests,
    field_values_part,
    read_field_values,
)
from exporter.devices.xid import XidLedger, XidWatcher
from exporter.fields.catalog import FieldSpec, Reader, Scope
from exporter.series import Family, Sample

log = logging.getLogger(__name__)

REENUMERATE_EVERY_S = 60.0
"""MIG Manager can rebuild instances without toggling MIG mode; a slow periodic walk
catches that without re-fetching handles every cycle."""
INIT_BACKOFF_S = (1.0, 2.0, 5.0, 10.0, 30.0)


class _GpuLost(Exception):
    pass


class NvmlBackend:
    def __init__(
        self,
        lib: NvmlLib,
        fields: Sequence[FieldSpec],
        *,
        devices: DeviceFilter = ALL_DEVICES,
        xid_window_s: float = 300.0,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self._lib = lib
        self._devices = devices
        self._clock = clock
        self.ledger = XidLedger(xid_window_s, wall_clock)
        self._gpm = GpmReader(lib, clock)
        self._initialised = False
        self._enum: Enumeration | None = None
        self._enumerated_at = 0.0
        self._watcher: XidWatcher | None = None
        self._unsupported: set[tuple[str, str]] = set()
        self._logged_unsupported: set[tuple[str, str]] = set()
        self._gpm_support: dict[int, bool] = {}
        self._init_failures = 0
        self._next_init_at = 0.0
        self._needs_enumeration = True
        self._enumerate_after = 0.0
        self._lost_retries = 0
        self.last_init_error: str | None = None
        self.call_errors: collections.Counter[tuple[str, str]] = collections.Counter()
        self.gpus_lost_total = 0
        self._wants_xid = False
        self._known: dict[tuple[int, int], Entity] = {}
        self.set_fields(tuple(fields))

    def set_fields(self, fields: tuple[FieldSpec, ...]) -> None:
        """Switch to another field set (a reload); takes effect from the next poll."""
        by_reader: dict[Reader, list[FieldSpec]] = collections.defaultdict(list)
        for spec in fields:
            by_reader[spec.reader].append(spec)
        self._by_reader = by_reader
        self._field_requests = field_value_requests(fields)
        self._gpm_ids = [s.part for s in by_reader[Reader.GPM] if isinstance(s.part, int)]
        wants_xid = bool(by_reader[Reader.XID_EVENTS])
        if wants_xid != self._wants_xid:
            self._needs_enumeration = True  # starts or stops the XID watcher
        self._wants_xid = wants_xid

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
            delay = INIT_BACKOFF_S[min(self._init_failures, len(INIT_BACKOFF_S) - 1)]
            self._init_failures += 1
            self._next_init_at = self._clock() + delay
            raise
        self._initialised = True
        self._init_failures = 0
        self.last_init_error = None
        self._needs_enumeration = True
        log.info("NVML initialised")

    def close(self) -> None:
        self._stop_watcher()
        self._gpm.forget()
        if self._initialised:
            try:
                self._lib.nvmlShutdown()
            except Exception as exc:
                log.debug("nvmlShutdown failed: %r", exc)
            self._initialised = False

    def _stop_watcher(self) -> None:
        if self._watcher is not None:
            self._watcher.stop()
            self._watcher = None

    def _enumerate(self) -> None:
        self._stop_watcher()
        enum = enumerate_devices(self._lib, self._devices, self._on_lost)
        self._enum = enum
        self._enumerated_at = self._clock()
        self._needs_enumeration = bool(enum.lost)
        if enum.lost:
            # A lost GPU is looked for again with growing pauses, never every cycle.
            delay = INIT_BACKOFF_S[min(self._lost_retries, len(INIT_BACKOFF_S) - 1)]
            self._lost_retries += 1
            self._enumerate_after = self._enumerated_at + delay
        else:
            self._lost_retries = 0
        # Handles may now mean other devices: forget everything tied to the old ones.
        self._unsupported.clear()
        self._gpm.forget()
        self._gpm_support.clear()
        inv = enum.inventory
        self._known.update((e.key, e) for e in (*inv.gpus, *inv.instances))
        log.info("enumerated %d GPUs, %d MIG GPU instances", len(inv.gpus), len(inv.instances))
        if self._wants_xid:
            self._watcher = XidWatcher(
                self._lib, self.ledger, dict(enum.handles.gpu),
                {g.uuid: g.gpu for g in inv.gpus},
                {i.key for i in inv.instances},
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
        self._needs_enumeration = True
        self._enumerate_after = self._clock() + INIT_BACKOFF_S[0]

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
            self._needs_enumeration = True
            return Readings()
        assert self._enum is not None
        values: dict[tuple[int, int], dict[str, float]] = {}
        for gpu in self._enum.inventory.gpus:
            try:
                self._poll_gpu(gpu, values)
            except _GpuLost:
                self._drop_lost(gpu.gpu)
                for key in [k for k in values if k[0] == gpu.gpu]:
                    del values[key]
        self._add_xid_last_codes(values)
        return Readings(
            values=values,
            xid_window=self.ledger.window() if self._wants_xid else (),
            xid_totals=self.ledger.totals() if self._wants_xid else (),
            xid_window_s=self.ledger.window_s,
            known=dict(self._known),
            gpm_supported=dict(self._gpm_support),
        )

    def _poll_gpu(self, gpu: Entity, out: dict[tuple[int, int], dict[str, float]]) -> None:
        assert self._enum is not None
        handles = self._enum.handles
        h = handles.gpu[gpu.gpu]
        mig_on = handles.mig_enabled.get(gpu.gpu, False)
        gpu_values: dict[str, float] = {}
        if self._devices.gpus:
            scopes = {Scope.GPU} if mig_on else {Scope.GPU, Scope.GPU_NO_MIG, Scope.INSTANCE}
            self._read_entity(gpu, h, None, scopes, gpu_values)
            out[gpu.key] = gpu_values
        if self._mig_layout_changed(gpu, h, mig_on):
            self._needs_enumeration = True
            return
        for inst in self._enum.inventory.instances:
            if inst.gpu != gpu.gpu or inst.gpu_instance_id is None:
                continue
            mh = handles.instance[(inst.gpu, inst.gpu_instance_id)]
            inst_values: dict[str, float] = {}
            self._read_entity(inst, mh, h, {Scope.INSTANCE}, inst_values)
            out[inst.key] = inst_values

    def _mig_layout_changed(self, gpu: Entity, h: Handle, mig_on: bool) -> bool:
        try:
            current = bool(self._lib.nvmlDeviceGetMigMode(h)[0])
        except Exception as exc:
            self._check_lost(exc, "nvmlDeviceGetMigMode")
            return False
        if current != mig_on:
            log.info("MIG mode of GPU %d changed; re-enumerating", gpu.gpu)
            return True
        return False

    def _read_entity(
        self,
        entity: Entity,
        handle: Handle,
        parent: Handle | None,
        scopes: set[Scope],
        out: dict[str, float],
    ) -> None:
        uid = f"{entity.uuid}/{entity.gpu_instance_id}"
        for reader, specs in self._by_reader.items():
            wanted = [s for s in specs if s.scope in scopes]
            if not wanted or (uid, reader.name) in self._unsupported:
                continue
            if reader in SIMPLE_READERS:
                self._read_simple(uid, reader, handle, wanted, out)
            elif reader is Reader.FIELD_VALUES:
                self._read_field_values(uid, handle, wanted, out)
            elif reader is Reader.GPM:
                self._read_gpm(entity, parent if parent is not None else handle, wanted, out)

    def _read_simple(
        self, uid: str, reader: Reader, handle: Handle, specs: list[FieldSpec],
        out: dict[str, float],
    ) -> None:
        try:
            parts = SIMPLE_READERS[reader](self._lib, handle)
        except Exception as exc:
            self._on_call_error(uid, reader.name, FUNCTION_OF[reader], exc)
            return
        for spec in specs:
            raw = parts.get(spec.part)
            value = None if raw is None else convert(spec.convert, float(raw))
            if value is not None:
                out[spec.name] = value

    def _read_field_values(
        self, uid: str, handle: Handle, specs: list[FieldSpec], out: dict[str, float]
    ) -> None:
        requests = [r for r in self._field_requests
                    if (uid, f"FI{r[0]}") not in self._unsupported]
        if not requests:
            return
        try:
            values, failed = read_field_values(self._lib, handle, requests)
        except Exception as exc:
            self._on_call_error(uid, Reader.FIELD_VALUES.name, "nvmlDeviceGetFieldValues", exc)
            return
        for field_id, code in failed.items():
            if code in UNSUPPORTED_CODES:
                self._remember_unsupported(uid, f"FI{field_id}", "nvmlDeviceGetFieldValues",
                                           code)
            elif code == NVML_ERROR_GPU_IS_LOST:
                raise _GpuLost()
            else:
                self._count_error("nvmlDeviceGetFieldValues", code)
        for spec in specs:
            raw = field_values_part(spec, values)
            value = None if raw is None else convert(spec.convert, raw)
            if value is not None:
                out[spec.name] = value

    def _read_gpm(
        self, entity: Entity, parent: Handle, specs: list[FieldSpec], out: dict[str, float]
    ) -> None:
        uid = f"{entity.uuid}/{entity.gpu_instance_id}"
        if entity.gpu not in self._gpm_support:
            try:
                supported = bool(self._lib.nvmlGpmQueryDeviceSupport(parent).isSupportedDevice)
            except Exception as exc:
                self._check_lost(exc, "nvmlGpmQueryDeviceSupport")
                supported = False
            self._gpm_support[entity.gpu] = supported
            if not supported:
                log.warning(
                    "GPU %d (%s) has no GPM support: DCGM_FI_PROF_* fields are not exported "
                    "for it (GPM needs Hopper or newer)", entity.gpu, entity.model)
        if not self._gpm_support[entity.gpu]:
            return
        metric_ids = [m for m in self._gpm_ids if (uid, f"GPM{m}") not in self._unsupported]
        try:
            values, failed = self._gpm.read(
                entity.key, parent, entity.gpu_instance_id, metric_ids)
        except Exception as exc:
            self._on_call_error(uid, Reader.GPM.name, "nvmlGpmMetricsGet", exc)
            return
        for metric_id, code in failed.items():
            if code in UNSUPPORTED_CODES:
                # e.g. NVLink rates of a MIG instance: asked once, then left out.
                self._remember_unsupported(uid, f"GPM{metric_id}", "nvmlGpmMetricsGet", code)
            else:
                self._count_error("nvmlGpmMetricsGet", code)
        for spec in specs:
            raw = values.get(int(spec.part)) if isinstance(spec.part, int) else None
            value = None if raw is None else convert(spec.convert, raw)
            if value is not None:
                out[spec.name] = value

    def _add_xid_last_codes(self, values: dict[tuple[int, int], dict[str, float]]) -> None:
        if not self._wants_xid or self._watcher is None:
            return
        if not any(s.name == "DCGM_FI_DEV_XID_ERRORS" for s in self._by_reader[Reader.XID_EVENTS]):
            return
        last = self.ledger.last_codes()
        for key, entity_values in values.items():
            # No event yet is a true "last XID = 0", but only where events can arrive.
            if key[0] in self._watcher.registered:
                entity_values["DCGM_FI_DEV_XID_ERRORS"] = float(last.get(key, 0))

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

    def _on_call_error(self, uid: str, what: str, function: str, exc: Exception) -> None:
        if not is_nvml_error(exc):
            log.exception("unexpected error from %s on %s", function, uid)
            self.call_errors[(function, "EXCEPTION")] += 1
            return
        code = nvml_code(exc)
        if code in UNSUPPORTED_CODES:
            self._remember_unsupported(uid, what, function, code)
            return
        if code in (NVML_ERROR_INVALID_ARGUMENT, NVML_ERROR_NOT_FOUND):
            # A MIG handle whose instance was destroyed: the layout changed under us.
            self._needs_enumeration = True
        self._check_lost(exc, function)

    def _remember_unsupported(self, uid: str, what: str, function: str, code: int) -> None:
        self._unsupported.add((uid, what))
        self._count_error(function, code)
        if (uid, what) not in self._logged_unsupported:
            self._logged_unsupported.add((uid, what))
            log.info("%s: %s answers %s; its series are omitted", uid, what, error_name(code))

    # --- self-metrics -----------------------------------------------------------------

    def families(self) -> list[Family]:
        errors = tuple(
            Sample((("function", fn), ("code", code)), float(n))
            for (fn, code), n in sorted(self.call_errors.items())
        )
        return [
            Family("gpu_exporter_nvml_up", "gauge",
                   "1 when NVML is initialised and devices are enumerated.",
                   (Sample((), 1.0 if self.up else 0.0),)),
            Family("gpu_exporter_nvml_errors", "counter",
                   "NVML calls that failed, by function and return code.", errors),
            Family("gpu_exporter_gpu_lost", "counter",
                   "Times a GPU answered GPU_IS_LOST and was dropped until it returns.",
                   (Sample((), float(self.gpus_lost_total)),)),
        ]

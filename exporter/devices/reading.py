"""Reading the enumerated devices' planned values once per poll, in the poll thread.

Each GPU has a plan (and one per MIG GPU instance); three read paths fill it: plain calls,
one nvmlDeviceGetFieldValues per entity, and GPM metrics. Every answer becomes series through
`store`, the one convert-and-store step. A call that answers "not supported" leaves the plan
until the next enumeration; GPU_IS_LOST ends the GPU's reads for this poll and is reported
to the caller, which drops it from the inventory; a MIG mode that flipped, or a MIG handle
that stopped working, marks the layout as changed so the caller walks the devices again.
"""

from __future__ import annotations

import collections
import logging
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from exporter.devices.accounting import CallErrors, GpuLost
from exporter.devices.counterparts import CounterpartReader
from exporter.devices.enumerate import Enumeration
from exporter.devices.errors import (
    PROFILING_ADMIN_ONLY,
    PROFILING_ADMIN_ONLY_FIX,
    is_nvml_error,
    nvml_code,
)
from exporter.devices.filter import DeviceFilter
from exporter.devices.gpm import GpmReader
from exporter.devices.links import LinkValues, active_links
from exporter.devices.model import Entity, EntityKey, GpmSupport
from exporter.devices.nvml_api import (
    LIBRARY_GONE_CODES,
    NVML_DEVICE_MIG_ENABLE,
    NVML_ERROR_GPU_IS_LOST,
    NVML_ERROR_INVALID_ARGUMENT,
    NVML_ERROR_NO_PERMISSION,
    NVML_ERROR_NOT_FOUND,
    UNSUPPORTED_CODES,
    Handle,
    NvmlLib,
)
from exporter.devices.read_plan import EntityPlan, FieldKey, Output, build_plan, read_field_values
from exporter.devices.static_labels import entity_labels, is_static_label, read_labels
from exporter.fields.catalog import FieldSpec, Reader, Scope

log = logging.getLogger(__name__)

Values = dict[EntityKey, dict[str, float]]
"""One poll's values: for each entity, the value of each field by name."""

Unsupported = tuple[str, str | int | FieldKey]
"""What a device answered "not supported" to: ("series", name) for the call behind a series,
("call", function), ("field", (field id, scope id)) or ("gpm", metric id)."""


def _series(output: Output) -> Unsupported:
    """Return the series whose call (on one link, for a link field) answered "not supported"."""
    if output.peer is not None:
        return ("series", f"{output.name}@peer{output.peer}")
    if output.link is None:
        return ("series", output.name)
    return ("series", f"{output.name}@link{output.link}")


_GPU_SCOPES = {Scope.GPU, Scope.GPU_NO_MIG, Scope.INSTANCE, Scope.LINK, Scope.PEER}
_MIG_PARENT_SCOPES = {Scope.GPU, Scope.PEER}
"""NVML answers no NVLink query under MIG, so a MIG-enabled GPU has no link entities."""


@dataclass(slots=True)
class GpuWork:
    """One GPU's poll work: its plan and those of its MIG GPU instances."""

    entity: Entity
    handle: Handle
    mig_on: bool
    plan: EntityPlan | None
    """None when only MIG instances are wanted (`--devices i`)."""
    instances: list[tuple[Entity, EntityPlan]]


def plan_work(lib: NvmlLib, enum: Enumeration, fields: Sequence[FieldSpec],
              devices: DeviceFilter, counterparts: bool = False) -> list[GpuWork]:
    """Plan the reads of every enumerated device. With `counterparts`, NVML's counterparts of the
    GPM fields are planned too on whole GPUs with MIG off, to be read there should the GPU have
    no GPM."""
    work = []
    fields = [s for s in fields if not is_static_label(s)]  # read once, not planned
    by_gpu: dict[int, list[Entity]] = collections.defaultdict(list)
    for inst in enum.inventory.instances:
        by_gpu[inst.gpu].append(inst)
    for gpu in enum.inventory.gpus:
        handle = enum.handles.gpu[gpu.gpu]
        mig_on = enum.handles.mig_enabled.get(gpu.gpu, False)
        scopes = _MIG_PARENT_SCOPES if mig_on else _GPU_SCOPES
        plan = None
        if devices.gpus:
            specs = [s for s in fields if s.scope in scopes]
            links = active_links(lib, handle) if any(
                s.scope is Scope.LINK for s in specs) else ()
            peers = tuple((g.gpu, enum.handles.gpu[g.gpu]) for g in enum.inventory.gpus
                          if g.gpu != gpu.gpu) if any(
                s.reader is Reader.P2P for s in specs) else ()
            plan = build_plan(lib, handle, f"GPU {gpu.gpu}", specs, links, peers,
                              counterparts=counterparts and not mig_on)
        instances = []
        for inst in by_gpu[gpu.gpu]:
            assert inst.gpu_instance_id is not None
            mig_handle = enum.handles.instance[(gpu.gpu, inst.gpu_instance_id)]
            inst_plan = build_plan(
                lib, mig_handle, f"GPU {gpu.gpu} instance {inst.gpu_instance_id}",
                [s for s in fields if s.scope is Scope.INSTANCE])
            instances.append((inst, inst_plan))
        work.append(GpuWork(gpu, handle, mig_on, plan, instances))
    return work


def store(outputs: Iterable[Output], answer: Any, out: dict[str, float],
          links: dict[int, dict[str, float]]) -> None:
    """Store the series one answer yields, on the entity (`out`) or on one of its links. A part
    the answer lacks (a failed field or metric), or a value its converter refuses (NaN, or an
    absent sensor's reading), is left out rather than exported."""
    for o in outputs:
        raw = answer if o.pick is None else o.pick(answer)
        if raw is not None:
            value = o.conv(raw)
            if value is not None:
                (out if o.link is None else links.setdefault(o.link, {}))[o.name] = value


class DeviceReader:
    """Read every entity's planned values once per poll, and rebuild the plans when the devices or
    the fields change."""

    def __init__(self, lib: NvmlLib, errors: CallErrors,
                 clock: Callable[[], float] = time.monotonic,
                 counterparts: bool = True) -> None:
        self._lib = lib
        self._errors = errors
        self._gpm = GpmReader(lib, clock)
        self._clock = clock
        self._counterparts_on = counterparts
        """Serve NVML's counterparts of GPM fields on GPUs without GPM (not
        `--no-prof-counterparts`)."""
        self._counterparts = CounterpartReader(lib, clock)
        self._work: list[GpuWork] = []
        self.gpm_support: dict[int, GpmSupport] = {}
        """Whether GPM answers ("supported", "unsupported" or "no_permission"), by GPU index
        (only GPUs asked since the last plan)."""
        self._told_admin_only = False
        """The warning about profiling restricted to administrators is logged once."""
        self.layout_changed = False
        """Set by a read that found the MIG layout changed; the caller clears it."""
        self._unsupported: dict[str, set[Unsupported]] = {}
        """By plan uid: what answered "not supported" since the layout was last planned."""
        self.links: LinkValues = {}
        """The last read's values of link entities, by (gpu index, link)."""
        self.peers: LinkValues = {}
        """The last read's values of GPU pairs, by (gpu index, peer gpu index)."""
        self.labels: dict[EntityKey, dict[str, str]] = {}
        """Label-type fields read at the last plan or walk, by entity."""
        self._label_specs: list[FieldSpec] = []

        self.library_gone: int | None = None
        """The code of a call that answered UNINITIALIZED or DRIVER_NOT_LOADED; the caller
        clears it (and initialises NVML again)."""

    def replan(self, enum: Enumeration, fields: Sequence[FieldSpec],
               devices: DeviceFilter, *, same_devices: bool = False) -> None:
        """Make the plans for `fields`. When `same_devices` says the walk found the layout the
        current plans were made for (only the fields changed), the GPM sample pairs and support,
        and what answered "not supported", carry over instead of being asked again."""
        if not same_devices:
            # Handles may now mean other devices: forget everything tied to the old ones.
            self._gpm.forget()
            self._counterparts = CounterpartReader(self._lib, self._clock)
            self.gpm_support.clear()
            self._unsupported.clear()
        self._work = plan_work(self._lib, enum, fields, devices, self._counterparts_on)
        if same_devices:
            planned = set()
            counted = set()
            for work in self._work:
                for entity, plan in ((work.entity, work.plan), *work.instances):
                    if plan is not None:
                        self._leave_out_unsupported(plan)
                        if plan.gpm is not None:
                            planned.add(entity.key)
                        if plan.counterparts is not None:
                            counted.add(entity.key)
            self._gpm.keep_only(planned)
            self._counterparts.keep_only(counted)
        self._label_specs = [s for s in fields if is_static_label(s)]
        self.read_labels()

    def read_labels(self) -> None:
        """Read the label-type fields; they are read at each plan and again at each periodic
        walk, since a fabric's cluster UUID appears only once registration completes."""
        self.labels = {}
        specs = self._label_specs
        for work in self._work if specs else ():
            labels = read_labels(self._lib, work.handle, specs, self._errors,
                                 f"GPU {work.entity.gpu}")
            for entity in (work.entity, *(inst for inst, _ in work.instances)):
                self.labels[entity.key] = entity_labels(labels, specs, entity, work.mig_on)

    def clear(self) -> None:
        """Forget the plans, so nothing is read until the next `replan`, and free the GPM
        buffers."""
        self._gpm.forget()
        self._work = []

    def _leave_out_unsupported(self, plan: EntityPlan) -> None:
        gone = self._unsupported.get(plan.uid)
        if not gone:
            return
        plan.calls = [s for s in plan.calls
                      if not any(_series(o) in gone for o in s.outputs)]
        fv = plan.field_values
        if fv is not None:
            fv.requests = [r for r in fv.requests if ("field", r) not in gone]
            if not fv.requests or ("call", "nvmlDeviceGetFieldValues") in gone:
                plan.field_values = None
        gpm = plan.gpm
        if gpm is not None:
            gpm.metric_ids = [m for m in gpm.metric_ids if ("gpm", m) not in gone]
            if not gpm.metric_ids or ("call", "nvmlGpmMetricsGet") in gone:
                plan.gpm = None
        step = plan.counterparts
        if step is not None:
            step.outputs = [(name, s) for name, s in step.outputs
                            if ("series", name) not in gone]

    def _unsupported_in(self, plan: EntityPlan, *what: Unsupported) -> None:
        self._unsupported.setdefault(plan.uid, set()).update(what)

    def read(self) -> tuple[Values, list[int]]:
        """Read every planned value and return the values with the GPUs that answered GPU_IS_LOST
        (those are left out of the values and of later reads). NVML errors are never raised."""
        values: Values = {}
        self.links = {}
        self.peers = {}
        lost: list[int] = []
        for work in self._work:
            try:
                self._read_gpu(work, values)
            except GpuLost:
                lost.append(work.entity.gpu)
                for key in [k for k in values if k[0] == work.entity.gpu]:
                    del values[key]
                for link_key in [k for k in self.links if k[0] == work.entity.gpu]:
                    del self.links[link_key]
                for pair in [k for k in self.peers if k[0] == work.entity.gpu]:
                    del self.peers[pair]
        if lost:
            self._work = [w for w in self._work if w.entity.gpu not in lost]
        return values, lost

    def _read_gpu(self, work: GpuWork, out: Values) -> None:
        if work.plan is not None:
            out[work.entity.key] = self._read(work.entity, work.handle, None, work.plan)
        if self._mig_mode_changed(work):
            self.layout_changed = True
            return
        for inst, plan in work.instances:
            out[inst.key] = self._read(inst, work.handle, inst.gpu_instance_id, plan)

    def _mig_mode_changed(self, work: GpuWork) -> bool:
        try:
            current = self._lib.nvmlDeviceGetMigMode(work.handle)[0] == NVML_DEVICE_MIG_ENABLE
        except Exception as exc:
            if is_nvml_error(exc) and nvml_code(exc) in UNSUPPORTED_CODES:
                return False
            self._errors.check_lost(exc, "nvmlDeviceGetMigMode")
            return False
        if current != work.mig_on:
            log.info("MIG mode of GPU %d changed; re-enumerating", work.entity.gpu)
            return True
        return False

    def _read(self, entity: Entity, parent: Handle, gpu_instance_id: int | None,
              plan: EntityPlan) -> dict[str, float]:
        out: dict[str, float] = {}
        links: dict[int, dict[str, float]] = {}
        peers: dict[int, dict[str, float]] = {}
        for step in plan.calls:
            try:
                answer = step.call()
            except Exception as exc:
                if self._call_failed(plan, step.function, exc, physical=not entity.is_mig):
                    plan.calls = [s for s in plan.calls if s is not step]
                    self._unsupported_in(plan, *map(_series, step.outputs))
                continue
            # `store`, inlined: with every field enabled this loop runs ~150 times per GPU.
            for o in step.outputs:
                raw = answer if o.pick is None else o.pick(answer)
                if raw is not None and (value := o.conv(raw)) is not None:
                    if o.peer is not None:
                        peers.setdefault(o.peer, {})[o.name] = value
                    else:
                        (out if o.link is None else links.setdefault(o.link, {}))[o.name] = value
        self._read_field_values_and_counterparts(entity, parent, plan, out, links)
        if plan.gpm is not None:
            self._read_gpm(entity, parent, gpu_instance_id, plan, out, links)
        for link, link_values in links.items():
            self.links[(entity.gpu, link)] = link_values
        for peer, peer_values in peers.items():
            self.peers[(entity.gpu, peer)] = peer_values
        return out

    # --- nvmlDeviceGetFieldValues ---------------------------------------------------------

    def _read_field_values_and_counterparts(self, entity: Entity, parent: Handle,
                                            plan: EntityPlan, out: dict[str, float],
                                            links: dict[int, dict[str, float]]) -> None:
        """Read the field values and the GPM counterparts that some of them feed. The
        counterparts are read only on a GPU without GPM: on a GPU with GPM they leave the plan at
        its first read."""
        if plan.counterparts is not None and not self._without_gpm(entity, parent):
            self._drop_counterparts(plan)
        field_values: dict[FieldKey, float] = {}
        # Which counters answered too narrow for a rate: only the counterparts read that.
        narrow: set[FieldKey] | None = None if plan.counterparts is None else set()
        if plan.field_values is not None:
            field_values = self._read_field_values(plan, out, links, narrow)
        if plan.counterparts is not None:
            assert narrow is not None
            self._read_counterparts(entity, plan, field_values, narrow, out)

    def _read_field_values(self, plan: EntityPlan, out: dict[str, float],
                           links: dict[int, dict[str, float]],
                           narrow: set[FieldKey] | None = None) -> dict[FieldKey, float]:
        """Store the series of the plan's field values; return the values read (`narrow`
        receives those answered in fewer than 64 bits)."""
        fv = plan.field_values
        assert fv is not None
        try:
            values, failed = read_field_values(self._lib, plan.handle, fv.requests, narrow)
        except Exception as exc:
            if self._call_failed(plan, "nvmlDeviceGetFieldValues", exc):
                plan.field_values = None
                self._unsupported_in(plan, ("call", "nvmlDeviceGetFieldValues"))
            return {}
        if failed:
            self._field_values_failed(plan, failed)
        store(fv.outputs, values, out, links)
        return values

    def _field_values_failed(self, plan: EntityPlan, failed: dict[FieldKey, int]) -> None:
        fv = plan.field_values
        assert fv is not None
        for key, code in failed.items():
            if code == NVML_ERROR_GPU_IS_LOST:
                raise GpuLost()
            if code in UNSUPPORTED_CODES or code == NVML_ERROR_INVALID_ARGUMENT:
                # INVALID_ARGUMENT per entry: an id this driver does not know, or a link
                # index the GPU does not have; it will not answer later either.
                field_id, scope_id = key
                what = f"field {field_id}" if scope_id == 0 else f"field {field_id}@{scope_id}"
                self._errors.note_unsupported(plan.uid, what, "nvmlDeviceGetFieldValues", code)
                fv.requests = [r for r in fv.requests if r != key]
                self._unsupported_in(plan, ("field", key))
            else:
                self._errors.count("nvmlDeviceGetFieldValues", code)
        if not fv.requests:
            plan.field_values = None

    # --- NVML's counterparts of GPM fields ----------------------------------------------------

    def _without_gpm(self, entity: Entity, handle: Handle) -> bool:
        """Return whether the GPU has no GPM, so that its counterparts are read: never where GPM
        exists, even if profiling is restricted to administrators."""
        support = self.gpm_support.get(entity.gpu)
        if support is None:
            support = self._query_gpm_support(entity, handle)
        return support == "unsupported"

    def _drop_counterparts(self, plan: EntityPlan) -> None:
        step = plan.counterparts
        assert step is not None
        plan.counterparts = None
        fv = plan.field_values
        if fv is not None and step.requests:
            fv.requests = [r for r in fv.requests if r not in step.requests]
            if not fv.requests:
                plan.field_values = None

    def _read_counterparts(self, entity: Entity, plan: EntityPlan,
                           field_values: dict[FieldKey, float], narrow: set[FieldKey],
                           out: dict[str, float]) -> None:
        step = plan.counterparts
        assert step is not None
        means: dict[int, float | None] = {}
        for sampling_type in step.sampling_types:
            try:
                means[sampling_type] = self._counterparts.mean_sample(
                    entity.key, plan.handle, sampling_type)
            except Exception as exc:
                if self._call_failed(plan, "nvmlDeviceGetSamples", exc, physical=True):
                    gone = [name for name, s in step.outputs if s.samples == sampling_type]
                    step.outputs = [(n, s) for n, s in step.outputs if n not in gone]
                    self._unsupported_in(plan, *(("series", n) for n in gone))
        counters = {s.counter for _, s in step.outputs if s.counter is not None}
        rates = self._counterparts.rates(entity.key, field_values, counters, narrow)
        for name, served in step.outputs:
            if served.samples is not None:
                mean = means.get(served.samples)
                if mean is not None:
                    out[name] = mean * served.scale
            elif served.counter is not None and (rate := rates.get(served.counter)) is not None:
                out[name] = float(int(rate * served.scale))  # DCGM serves int64 bytes/s

    # --- GPM --------------------------------------------------------------------------------

    def _read_gpm(self, entity: Entity, parent: Handle, gpu_instance_id: int | None,
                  plan: EntityPlan, out: dict[str, float],
                  links: dict[int, dict[str, float]]) -> None:
        gpm = plan.gpm
        assert gpm is not None
        support = self.gpm_support.get(entity.gpu)
        if support is None:
            support = self._query_gpm_support(entity, parent)
        if support != "supported":
            plan.gpm = None
            return
        try:
            values, failed = self._gpm.read(entity.key, parent, gpu_instance_id, gpm.metric_ids)
        except Exception as exc:
            if is_nvml_error(exc) and nvml_code(exc) == NVML_ERROR_NO_PERMISSION:
                self._errors.count("nvmlGpmMetricsGet", NVML_ERROR_NO_PERMISSION)
                self._admin_only(entity, plan)
            elif self._call_failed(plan, "nvmlGpmMetricsGet", exc):
                plan.gpm = None
                self._unsupported_in(plan, ("call", "nvmlGpmMetricsGet"))
            return
        if NVML_ERROR_NO_PERMISSION in failed.values():
            self._errors.count("nvmlGpmMetricsGet", NVML_ERROR_NO_PERMISSION)
            self._admin_only(entity, plan)
            return
        for metric_id, code in failed.items():
            if code in UNSUPPORTED_CODES:
                # e.g. NVLink rates of a MIG instance: asked once, then left out.
                self._errors.note_unsupported(plan.uid, f"GPM metric {metric_id}",
                                              "nvmlGpmMetricsGet", code)
                gpm.metric_ids = [m for m in gpm.metric_ids if m != metric_id]
                self._unsupported_in(plan, ("gpm", metric_id))
            else:
                self._errors.count("nvmlGpmMetricsGet", code)
        store(gpm.outputs, values, out, links)

    def _query_gpm_support(self, entity: Entity, parent: Handle) -> GpmSupport:
        try:
            supported = bool(self._lib.nvmlGpmQueryDeviceSupport(parent).isSupportedDevice)
        except Exception as exc:
            self._errors.check_lost(exc, "nvmlGpmQueryDeviceSupport")
            if nvml_code(exc) == NVML_ERROR_NO_PERMISSION:
                self._admin_only(entity, None)
                return "no_permission"
            supported = False
        support: GpmSupport = "supported" if supported else "unsupported"
        self.gpm_support[entity.gpu] = support
        if not supported and self._counterparts_on:
            log.warning("GPU %d (%s) has no GPM support (GPM needs Hopper or newer): of the "
                        "DCGM_FI_PROF_* fields only those NVML measures too are exported for "
                        "it, from NVML (docs/metrics.md, \"Before Hopper\")", entity.gpu,
                        entity.model)
        elif not supported:
            log.warning("GPU %d (%s) has no GPM support: DCGM_FI_PROF_* fields are not "
                        "exported for it (GPM needs Hopper or newer; --no-prof-counterparts "
                        "is set)", entity.gpu, entity.model)
        return support

    def _admin_only(self, entity: Entity, plan: EntityPlan | None) -> None:
        """Note that NVML refuses GPM for want of privilege. That is a driver setting, the same
        for every GPU of the node, so it is logged once with the fix, and shown per GPU in
        gpu_exporter_gpm_supported."""
        self.gpm_support[entity.gpu] = "no_permission"
        if plan is not None:
            plan.gpm = None
        if not self._told_admin_only:
            self._told_admin_only = True
            log.warning("%s. Fix: %s", PROFILING_ADMIN_ONLY, PROFILING_ADMIN_ONLY_FIX)

    # --- errors -------------------------------------------------------------------------------

    def _call_failed(self, plan: EntityPlan, function: str, exc: Exception,
                     physical: bool = False) -> bool:
        """Account for a failed call; True when it should leave the plan (unsupported).

        `physical`: the call was made on a GPU handle, which cannot go stale the way a MIG
        handle does, so INVALID_ARGUMENT there means an argument this GPU does not take (a
        link it lacks, a threshold type it does not report)."""
        if not is_nvml_error(exc):
            log.error("unexpected error from %s on %s: %r", function, plan.uid, exc)
            self._errors.count_exception(function)
            return False
        code = nvml_code(exc)
        if code in UNSUPPORTED_CODES or (physical and code == NVML_ERROR_INVALID_ARGUMENT):
            self._errors.note_unsupported(plan.uid, function, function, code)
            return True
        if code in (NVML_ERROR_INVALID_ARGUMENT, NVML_ERROR_NOT_FOUND):
            # A MIG handle whose instance was destroyed: the layout changed under us.
            self.layout_changed = True
        if code in LIBRARY_GONE_CODES:
            self.library_gone = code
        self._errors.check_lost(exc, function)
        return False

"""The node page's GPU cards: one per GPU the scope shows, with its MIG instances.

Values are the poll's, looked up under the name the collectors file serves each field by (a
file may name a field by an older alias); a field the file does not enable, or that the GPU
did not answer, is None. In pod scope only the pod's own entities appear: a GPU whose MIG
instance the pod holds is shown with that instance alone and without the GPU's own values
(power, clocks and temperature are shaped by the other tenants' work), as `/metrics` does.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, replace

from exporter.devices.clock_events import CLOCK_EVENT_FIELDS, REASONS
from exporter.devices.model import Entity, EntityKey, MigDevice
from exporter.fields.catalog import CATALOG, FieldSpec
from exporter.fields.csv import Collectors
from exporter.fields.gpm_fallbacks import GPU_UTIL, GR_ENGINE_ACTIVE
from exporter.nodepage.holders import Holdings, sharing_of
from exporter.nodepage.view import (
    Activity,
    FaultView,
    GpuState,
    GpuView,
    InstanceView,
    Memory,
    XidSeen,
)
from exporter.sampling.snapshot import Snapshot

FB_USED = "DCGM_FI_DEV_FB_USED"
FB_FREE = "DCGM_FI_DEV_FB_FREE"
FB_RESERVED = "DCGM_FI_DEV_FB_RESERVED"
GPU_TEMP = "DCGM_FI_DEV_GPU_TEMP"
MEMORY_TEMP = "DCGM_FI_DEV_MEMORY_TEMP"
POWER_USAGE = "DCGM_FI_DEV_POWER_USAGE"
POWER_LIMIT = "DCGM_FI_DEV_POWER_MGMT_LIMIT"
SM_CLOCK = "DCGM_FI_DEV_SM_CLOCK"
CLOCK_EVENT_REASONS = "DCGM_FI_DEV_CLOCKS_EVENT_REASONS"
ECC_SBE = "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL"
ECC_DBE = "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"
ROW_REMAP_FAILURE = "DCGM_FI_DEV_ROW_REMAP_FAILURE"

MIG_COMPUTE_SLICES = 7
"""Compute slices of a MIG-capable GPU (A100, H100, H200, B200, GB200); the A30 has 4."""
_FOUR_SLICE_MODELS = ("A30",)

_GI_SLICES = re.compile(r"^(\d+)g\.")
_CI_SLICES = re.compile(r"(?:^|\s)(\d+)c\.\d+g\.")


def _reading(spec: FieldSpec) -> tuple[object, ...]:
    """Return what a spec reads, whatever it is called, so that aliases compare equal."""
    return (spec.reader, spec.part, spec.convert, spec.scope)


_CATALOG_NAMES: dict[tuple[object, ...], list[str]] = {}
for _spec in CATALOG:
    _CATALOG_NAMES.setdefault(_reading(_spec), []).append(_spec.name)
"""What a spec reads -> every catalog name for it: a collectors file's alias is a catalog
spec renamed (`exporter.fields.dcgm_names`), and older names such as
`DCGM_FI_DEV_CLOCK_THROTTLE_REASONS` are catalog entries of their own."""


@dataclass(frozen=True, slots=True)
class FieldNames:
    """Catalog name -> the name the poll's collectors serve it under."""

    served: Mapping[str, str]

    @classmethod
    def of(cls, collectors: Collectors) -> FieldNames:
        """Return the served name of every catalog name the collectors file reads, under
        whichever alias the file uses for it."""
        served: dict[str, str] = {}
        for enabled in collectors.fields:
            spec = enabled.spec
            if spec.name in CLOCK_EVENT_FIELDS:
                continue  # the counters read the reasons' bitmask, but never keep it as a value
            for canonical in _CATALOG_NAMES.get(_reading(spec), [spec.name]):
                served.setdefault(canonical, spec.name)
        return cls(served)


_names_cache: tuple[Collectors, FieldNames] | None = None


def field_names(collectors: Collectors) -> FieldNames:
    """`FieldNames.of`, computed again only when the collectors change (a reload)."""
    global _names_cache
    if _names_cache is None or _names_cache[0] is not collectors:
        _names_cache = (collectors, FieldNames.of(collectors))
    return _names_cache[1]


class _Values:
    """One entity's values by catalog name."""

    def __init__(self, values: Mapping[str, float], names: FieldNames) -> None:
        self._values = values
        self._names = names

    def get(self, canonical: str) -> float | None:
        name = self._names.served.get(canonical)
        return None if name is None else self._values.get(name)

    def activity(self) -> Activity | None:
        gpm = self.get(GR_ENGINE_ACTIVE)
        if gpm is not None:
            return Activity(gpm, "gpm", self._names.served[GR_ENGINE_ACTIVE])
        util = self.get(GPU_UTIL)
        if util is not None:
            return Activity(util / 100.0, "nvml", self._names.served[GPU_UTIL])
        return None

    def memory(self) -> Memory | None:
        used, free = self.get(FB_USED), self.get(FB_FREE)
        if used is None:
            return None
        reserved = self.get(FB_RESERVED)
        total = None if free is None else used + free + (reserved or 0.0)
        return Memory(used, total)

    def clock_events(self) -> tuple[str, ...] | None:
        bits = self.get(CLOCK_EVENT_REASONS)
        if bits is None:
            return None
        return tuple(name for bit, name in REASONS if int(bits) & bit)


def profile_slices(profile: str) -> int:
    """Compute slices of a GPU-instance profile: `3g.71gb` -> 3 (1 if the name says none)."""
    match = _GI_SLICES.match(profile)
    return max(1, int(match.group(1))) if match else 1


def compute_slices(mig: MigDevice, instance_slices: int) -> int:
    """Return a compute instance's slices: `NVIDIA H200 MIG 1c.3g.71gb` -> 1; a name without `Nc.`
    is a compute instance spanning its GPU instance."""
    match = _CI_SLICES.search(mig.name.rsplit("MIG", 1)[-1])
    return int(match.group(1)) if match else instance_slices


def gpu_slices(model: str, instances: tuple[InstanceView, ...]) -> int:
    """Return how many compute slices a GPU's MIG layout is drawn over: 4 on an A30, 7 on
    other models, or more if its instances add up to more."""
    nominal = 4 if any(m in model for m in _FOUR_SLICE_MODELS) else MIG_COMPUTE_SLICES
    return max(nominal, sum(i.slices for i in instances))


@dataclass(frozen=True, slots=True)
class _Context:
    snapshot: Snapshot
    names: FieldNames
    holdings: Holdings
    attributed: bool

    def visible(self, key: EntityKey) -> bool:
        visible = self.snapshot.attribution.visible
        return visible is None or key in visible

    def values(self, key: EntityKey) -> _Values:
        return _Values(self.snapshot.readings.values.get(key, {}), self.names)


def _instance(ctx: _Context, inst: Entity) -> InstanceView:
    values = ctx.values(inst.key)
    slices = profile_slices(inst.gpu_instance_profile or "")
    sharing, holders = sharing_of(inst.key, ctx.holdings, ctx.attributed)
    return InstanceView(
        gpu_instance_id=inst.gpu_instance_id or 0,
        profile=inst.gpu_instance_profile or "",
        slices=slices,
        compute_slices=tuple(compute_slices(m, slices) for m in inst.mig_devices),
        memory=values.memory(), activity=values.activity(),
        sharing=sharing, holders=holders)


def _last_xid(ctx: _Context, gpu: int) -> tuple[XidSeen | None, int]:
    totals = [t for t in ctx.snapshot.readings.xid_totals
              if t.entity_key[0] == gpu and ctx.visible(t.entity_key)]
    if not totals:
        return None, 0
    last = max(totals, key=lambda t: t.last_seen)
    seen = XidSeen(last.xid, last.last_seen, last.total,
                   None if last.entity_key[1] < 0 else last.entity_key[1])
    return seen, sum(t.total for t in totals)


def _faults(ctx: _Context, uuid: str) -> tuple[FaultView, ...]:
    return tuple(FaultView(f.source, f.code, f.name, f.action, f.fatal, f.cleared_by.value,
                           f.since)
                 for f in ctx.snapshot.faults if f.uuid == uuid)


def _card(ctx: _Context, gpu: Entity, state: GpuState,
          instances: tuple[InstanceView, ...]) -> GpuView:
    own = state == "ok"
    values = ctx.values(gpu.key) if own else _Values({}, ctx.names)
    sharing, holders = sharing_of(gpu.key, ctx.holdings, ctx.attributed) if own else \
        ("unknown", ())
    xid, xid_events = _last_xid(ctx, gpu.gpu)
    activity = values.activity()
    gpm = ctx.snapshot.readings.gpm_support.get(gpu.gpu) if own else None
    if activity is not None and activity.source == "gpm" and gpm == "unsupported":
        # A GPU without GPM: the DCGM_FI_PROF_* value is NVML's counterpart.
        activity = replace(activity, source="nvml")
    return GpuView(
        gpu=gpu.gpu, uuid=gpu.uuid, model=gpu.model, pci_bus_id=gpu.pci_bus_id, state=state,
        gpm=gpm, activity=activity, memory=values.memory(),
        temperature_c=values.get(GPU_TEMP), memory_temperature_c=values.get(MEMORY_TEMP),
        power_w=values.get(POWER_USAGE), power_limit_w=values.get(POWER_LIMIT),
        sm_clock_mhz=values.get(SM_CLOCK), clock_events=values.clock_events(),
        ecc_sbe=values.get(ECC_SBE), ecc_dbe=values.get(ECC_DBE),
        row_remap_failure=values.get(ROW_REMAP_FAILURE),
        xid=xid, xid_events=xid_events,
        sharing=sharing if not instances else "unknown", holders=holders if not instances else (),
        mig_slices=gpu_slices(gpu.model, instances) if instances else 0,
        instances=instances, faults=_faults(ctx, gpu.uuid))


def gpu_views(snapshot: Snapshot, holdings: Holdings, attributed: bool
              ) -> tuple[GpuView, ...]:
    """Cards in GPU index order: present GPUs, then those lost since start."""
    ctx = _Context(snapshot, field_names(snapshot.collectors), holdings, attributed)
    inventory = snapshot.inventory
    cards: list[GpuView] = []
    for gpu in inventory.gpus:
        instances = tuple(_instance(ctx, inst) for inst in inventory.instances
                          if inst.gpu == gpu.gpu and ctx.visible(inst.key))
        if ctx.visible(gpu.key):
            cards.append(_card(ctx, gpu, "ok", instances))
        elif instances:
            cards.append(_card(ctx, gpu, "partial", instances))
    present = {g.gpu for g in inventory.gpus}
    for key, entity in sorted(snapshot.readings.known.items()):
        if key[1] < 0 and key[0] not in present and ctx.visible(key):
            cards.append(_card(ctx, entity, "lost", ()))
    cards.sort(key=lambda c: c.gpu)
    return tuple(cards)

"""Who holds each device, for the node page: from the poll's attribution and the allocation
rows and per-container use it exported (`gpu_exporter_pod_gpu_*`).

An exclusive device has its one owner (`Attribution.owners`). A shared one (time-slicing,
MPS, DRA share ids, a MIG instance whose compute instances went to different pods) has one
holder per allocation row, each with its own framebuffer and SM use where the poll measured
them: from process attribution (`--kubernetes.process-attribution`), else from the virtual
GPUs' split (`--kubernetes-virtual-gpus`). The rows and the use families are already limited
to this pod under `--scope pod`, as in `/metrics`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace

from exporter import label_registry as names
from exporter.devices.model import EntityKey
from exporter.k8s.types import Attribution, PodRef
from exporter.k8s.virtual_gpus import FB_USED, GPU_UTIL, within
from exporter.nodepage.view import Holder, Sharing
from exporter.sampling.snapshot import Snapshot
from exporter.selfmetrics import (
    KUBELET_UP,
    POD_GPU_ALLOCATION,
    POD_GPU_MEMORY_USED,
    POD_GPU_SM_UTILIZATION,
)
from exporter.series import Family, Sample

_MIB = 1024.0 * 1024.0

ContainerOn = tuple[EntityKey, str, str, str]
"""(entity, namespace, pod, container)."""

Holdings = dict[EntityKey, tuple[Sharing, tuple[Holder, ...]]]


def _entity_key(labels: Mapping[str, str]) -> EntityKey | None:
    try:
        return int(labels[names.GPU]), int(labels.get(names.GPU_I_ID, "-1"))
    except (KeyError, ValueError):
        return None


def _per_container(samples: Iterable[Sample], scale: float) -> dict[ContainerOn, float]:
    found: dict[ContainerOn, float] = {}
    for sample in samples:
        labels = dict(sample.labels)
        key = _entity_key(labels)
        if key is not None:
            found[(key, labels.get(names.NAMESPACE, ""), labels.get(names.POD, ""),
                   labels.get(names.CONTAINER, ""))] = sample.value * scale
    return found


def _row_holders(rows: Iterable[Sample], memory: dict[ContainerOn, float],
                 sm: dict[ContainerOn, float]) -> dict[EntityKey, list[Holder]]:
    """One holder per (container, replica) of the allocation rows."""
    by_entity: dict[EntityKey, list[Holder]] = {}
    for row in rows:
        labels = dict(row.labels)
        key = _entity_key(labels)
        if key is None:
            continue
        container: ContainerOn = (key, labels.get(names.NAMESPACE, ""),
                                  labels.get(names.POD, ""), labels.get(names.CONTAINER, ""))
        holder = Holder(container[1], container[2], container[3],
                        resource=labels.get(names.RESOURCE), replica=labels.get(names.REPLICA),
                        memory_mib=memory.get(container), sm_ratio=sm.get(container))
        held = by_entity.setdefault(key, [])
        if all((h.namespace, h.pod, h.container, h.replica) !=
               (holder.namespace, holder.pod, holder.container, holder.replica) for h in held):
            held.append(holder)
    return by_entity


def _vgpu(ref: PodRef) -> str | None:
    return dict(ref.extra).get(names.VGPU)


def _with_split(snapshot: Snapshot, key: EntityKey, held: list[Holder]) -> list[Holder]:
    """Holders given the virtual GPUs' per-holder FB_USED and GPU_UTIL where process
    attribution gave them nothing, scaled as `/metrics` scales them (`within`)."""
    attribution = snapshot.attribution
    refs = attribution.sharers.get(key, ())
    parts = attribution.split.get(key, {})
    device = snapshot.readings.values.get(key, {})
    per_ref: dict[tuple[str, str, str, str | None], tuple[float | None, float | None]] = {}
    memory = _scaled(device.get(FB_USED), parts.get(FB_USED), len(refs))
    util = _scaled(device.get(GPU_UTIL), parts.get(GPU_UTIL), len(refs))
    for ref, mem, percent in zip(refs, memory, util, strict=True):
        per_ref[(ref.namespace, ref.pod, ref.container, _vgpu(ref))] = (
            mem, None if percent is None else percent / 100.0)
    if not per_ref:
        return held
    out = []
    for h in held:
        mem, sm = per_ref.get((h.namespace, h.pod, h.container, h.replica), (None, None))
        out.append(replace(h, memory_mib=h.memory_mib if h.memory_mib is not None else mem,
                           sm_ratio=h.sm_ratio if h.sm_ratio is not None else sm))
    return out


def _scaled(device_value: float | None, parts: tuple[float | None, ...] | None, n: int
            ) -> list[float | None]:
    if parts is None or device_value is None or len(parts) != n:
        return [None] * n
    return within(device_value, parts)


def holdings(snapshot: Snapshot, families: Iterable[Family]) -> Holdings:
    """Sharing and holders of every attributed entity; an entity not in it is `free` when
    pod attribution runs, `unknown` when it does not (`attribution_on`)."""
    by_name = {f.name: f for f in families}
    rows = by_name.get(POD_GPU_ALLOCATION.name)
    memory = _per_container(_samples(by_name.get(POD_GPU_MEMORY_USED.name)), 1.0 / _MIB)
    sm = _per_container(_samples(by_name.get(POD_GPU_SM_UTILIZATION.name)), 1.0)
    shared = _row_holders(_samples(rows), memory, sm)
    found: Holdings = {}
    attribution: Attribution = snapshot.attribution
    for key, ref in attribution.owners.items():
        found[key] = ("exclusive", (Holder(ref.namespace, ref.pod, ref.container),))
    for key in {*shared, *attribution.sharers}:
        held = shared.get(key) or [Holder(r.namespace, r.pod, r.container, replica=_vgpu(r))
                                   for r in attribution.sharers.get(key, ())]
        found[key] = ("shared", tuple(_with_split(snapshot, key, held)))
    return found


def attribution_on(families: Iterable[Family]) -> bool:
    """Return whether pod attribution runs: the poll's exposition has
    `gpu_exporter_kubelet_up`."""
    return any(f.name == KUBELET_UP.name for f in families)


def sharing_of(key: EntityKey, found: Holdings, attributed: bool
               ) -> tuple[Sharing, tuple[Holder, ...]]:
    """Return how an entity is held and by whom: its entry in `found`, else `free` when pod
    attribution runs and `unknown` when it does not."""
    if key in found:
        return found[key]
    return ("free" if attributed else "unknown"), ()


def _samples(family: Family | None) -> tuple[Sample, ...]:
    return () if family is None else family.samples


"""Joining kubelet allocations with the node's inventory.

Rules (what the exposition layer sees through `Attribution` and the allocation rows):

- A device held by exactly one container is *exclusive*: its entity goes into
  `Attribution.owners` and its device series carry `pod`, `namespace`, `container` as
  dcgm-exporter does. That includes a time-sliced or MPS device (replica ids `::N`, GKE
  `vgpuK`) while one container holds every replica handed out, as dcgm-exporter labels it.
- A device held by several containers (through replicas or not), or a MIG GPU instance whose
  compute instances are held by different containers, is *shared*: its series stay
  unlabelled (never one copy per pod) and each holder gets one
  `gpu_exporter_pod_gpu_allocation` row, which PromQL joins on `gpu`/`UUID`/`GPU_I_ID`.
- With virtual GPUs (dcgm-exporter's `--kubernetes-virtual-gpus`, opt-in) a shared device's
  series are instead repeated once per holder (`Attribution.sharers`): that holder's `pod`,
  `namespace`, `container`, and `vgpu` (the replica id, when the device id carries one). The
  values stay the whole device's: every copy shows the GPU's full power or utilisation.
  The allocation rows are still emitted. In that mode a device held through replicas is
  always shared, even by one container, so its series keep their `vgpu` label.
- Whole GPUs are matched by UUID (`GPU-…`) or by index (GKE's `nvidia<N>`, against the
  `device` label `nvidia<index>`, as dcgm-exporter does) whatever `gpu_id_type` says;
  dcgm-exporter matches only the form it names. An id of the other form is logged once.
- A device claimed through DRA (driver `gpu.nvidia.com`) arrives here already resolved to its
  UUID (`exporter.k8s.dra`) and follows the same rules; a `share_id` makes it shared like a
  replica suffix. Its claim's `dra_*` labels follow the pod's labels on its series (when
  exclusive) or on its allocation row.
- With `--scope pod` only this pod's allocations are looked at. The visible entities are the
  whole GPUs and MIG GPU instances allocated to it. The parent GPU of an allocated MIG
  instance is *not* visible: its power, clocks and temperatures are the whole card's, shaped
  by the other tenants' work. A GPU instance is exclusive in pod scope only when this pod's
  one container holds every compute instance of it (the others may belong to pods that `Get`
  does not show), so the answer is the same whether `Get` or `List` was used; for the same
  reason a device this pod holds through replicas is never exclusive in pod scope.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from exporter import label_registry as names
from exporter.devices.model import Entity, Inventory, MigDevice
from exporter.k8s.config import DEFAULT_RESOURCE_NAMES, GpuIdType
from exporter.k8s.device_ids import DeviceId, DeviceIdError, DeviceKind, parse_device_id
from exporter.k8s.types import Attribution, EntityKey, PodRef
from exporter.series import Labels

log = logging.getLogger(__name__)

MIG_RESOURCE_PREFIX = "nvidia.com/mig-"


@dataclass(frozen=True, slots=True, order=True)
class Allocation:
    """One device id the kubelet says a container holds."""

    namespace: str
    pod: str
    container: str
    resource: str
    """The device plugin's resource name; for DRA the driver name."""
    device_id: str
    share_id: str = ""
    """DRA: the ClaimResource's share id (one device allocated to several claims at once)."""
    claim_labels: Labels = ()
    """DRA: the claim's `dra_*` labels (dcgm-exporter's names); empty for the device plugin."""


def resource_accepted(resource: str, extra_names: Iterable[str] = ()) -> bool:
    """Return whether the device plugin's resource names GPUs this exporter attributes: the
    default names, any MIG profile by prefix (so the device plugin v0.20's suffixed profiles,
    `nvidia.com/mig-1g.18gb+me`, `-me`, `+me.all`, `+gfx`, are taken like the plain ones),
    and the names the user adds."""
    return (
        resource in DEFAULT_RESOURCE_NAMES
        or resource.startswith(MIG_RESOURCE_PREFIX)
        or resource in extra_names
    )


@dataclass(frozen=True, slots=True)
class Resolved:
    """The device a kubelet device id points at: the GPU or MIG GPU instance, the MIG device when
    the id names one, and the replica of a shared GPU."""

    entity: Entity
    """The whole GPU, or the MIG GPU instance."""
    mig: MigDevice | None
    """The compute instance, when the id named one."""
    replica: int | None


class DeviceResolver:
    """Finds the entity a parsed id points at; MIG lookups (hits and misses) are cached until
    the inventory changes, so an unknown id costs one scan per re-enumeration, not per poll."""

    def __init__(self, gpu_id_type: GpuIdType = "uid") -> None:
        self._inventory: Inventory | None = None
        self._mig_cache: dict[str, tuple[Entity, MigDevice] | None] = {}
        self._gpu_id_type = gpu_id_type
        self._other_form_logged = False

    def _sync(self, inventory: Inventory) -> None:
        if inventory is not self._inventory:
            if self._inventory is None or inventory != self._inventory:
                self._mig_cache.clear()
            self._inventory = inventory

    def _mig_owner(self, inventory: Inventory, uuid: str) -> tuple[Entity, MigDevice] | None:
        if uuid not in self._mig_cache:
            self._mig_cache[uuid] = inventory.mig_owner(uuid)
        return self._mig_cache[uuid]

    def _note_other_form(self, dev: DeviceId) -> None:
        """Log once that whole GPUs are reported under the id form that `gpu_id_type` does not
        name. dcgm-exporter would leave those pods unlabelled; it matches MIG ids in both forms."""
        if self._other_form_logged:
            return
        self._other_form_logged = True
        wanted = "GPU-<uuid>" if self._gpu_id_type == "uid" else "nvidia<N>"
        log.info("the kubelet reports whole GPUs as %r while the GPU id type %r expects "
                 "%s ids; matched anyway (dcgm-exporter would not attribute them)",
                 dev.raw, self._gpu_id_type, wanted)

    def resolve(self, dev: DeviceId, inventory: Inventory) -> Resolved | None:
        """Return the device this id points at in the inventory, or None when the node has no such
        device."""
        self._sync(inventory)
        if dev.kind is DeviceKind.GPU_UUID:
            gpu = inventory.by_uuid(dev.uuid or "")
            if gpu is not None and self._gpu_id_type == "device-name":
                self._note_other_form(dev)
            return None if gpu is None else Resolved(gpu, None, dev.replica)
        if dev.kind is DeviceKind.MIG_UUID:
            found = self._mig_owner(inventory, dev.uuid or "")
            return None if found is None else Resolved(found[0], found[1], dev.replica)
        if dev.kind is DeviceKind.MIG_LEGACY:
            parent = inventory.by_uuid(dev.uuid or "")
            if parent is None or dev.gpu_instance_id is None:
                return None
            inst = inventory.instance(parent.gpu, dev.gpu_instance_id)
            if inst is None:
                return None
            mig = next(
                (m for m in inst.mig_devices if m.compute_instance_id == dev.compute_instance_id),
                None,
            )
            return None if mig is None else Resolved(inst, mig, dev.replica)
        # GKE: by index, optionally a GPU instance of it.
        if dev.gpu_index is None:
            return None
        if dev.gpu_instance_id is not None:
            inst = inventory.instance(dev.gpu_index, dev.gpu_instance_id)
            return None if inst is None else Resolved(inst, None, dev.replica)
        gpu = inventory.by_index(dev.gpu_index)
        if gpu is not None and self._gpu_id_type == "uid":
            self._note_other_form(dev)
        return None if gpu is None else Resolved(gpu, None, dev.replica)


UNKNOWN_DEVICE = "unknown_device"
MALFORMED_ID = "malformed_id"


@dataclass(frozen=True, slots=True)
class Unattributed:
    """An allocation that could not be joined with a device, and why."""

    allocation: Allocation
    reason: str
    """UNKNOWN_DEVICE or MALFORMED_ID."""
    detail: str


@dataclass(frozen=True, slots=True)
class AttributionResult:
    """Everything one join of the kubelet's allocations with the inventory produced: the
    attribution, the allocation series, and what could not be attributed."""

    attribution: Attribution
    allocation_rows: tuple[Labels, ...] = ()
    """Label sets of `gpu_exporter_pod_gpu_allocation` (value 1), one per holder of a shared
    device, sorted."""
    unattributed: tuple[Unattributed, ...] = ()
    parse_errors: tuple[tuple[Allocation, DeviceIdError], ...] = ()
    resolved: tuple[tuple[Allocation, Resolved], ...] = field(default=())


def _no_extra(namespace: str, pod: str) -> Labels:  # noqa: ARG001 (an ExtraLabels)
    return ()


@dataclass
class _Holding:
    entity: Entity
    holders: set[tuple[str, str, str]] = field(default_factory=set)
    replicas: bool = False
    compute_instances: set[int] = field(default_factory=set)
    whole_instance: bool = False
    rows: set[tuple[Allocation, int | None]] = field(default_factory=set)


def attribute(
    allocations: Iterable[Allocation],
    inventory: Inventory,
    resolver: DeviceResolver,
    *,
    extra_resource_names: Iterable[str] = (),
    pod_scope: tuple[str, str] | None = None,
    extra_labels: Callable[[str, str], Labels] = _no_extra,
    virtual_gpus: bool = False,
) -> AttributionResult:
    """Decide owners, shared-device rows and what could not be attributed.

    `pod_scope` is (namespace, pod): only that pod's allocations count, and the result's
    `visible` lists its entities (empty when it holds none). `virtual_gpus`: shared devices
    also get one `PodRef` per holder in `sharers`.
    """
    extra_names = frozenset(extra_resource_names)
    holdings: dict[EntityKey, _Holding] = {}
    unattributed: list[Unattributed] = []
    parse_errors: list[tuple[Allocation, DeviceIdError]] = []
    resolved_list: list[tuple[Allocation, Resolved]] = []

    for alloc in sorted(set(allocations)):
        if not (alloc.claim_labels or resource_accepted(alloc.resource, extra_names)):
            continue
        if pod_scope is not None and (alloc.namespace, alloc.pod) != pod_scope:
            continue
        parsed = parse_device_id(alloc.device_id)
        if isinstance(parsed, DeviceIdError):
            parse_errors.append((alloc, parsed))
            unattributed.append(Unattributed(alloc, MALFORMED_ID, parsed.reason))
            continue
        found = resolver.resolve(parsed, inventory)
        if found is None:
            unattributed.append(
                Unattributed(alloc, UNKNOWN_DEVICE, "no such device in the inventory")
            )
            continue
        resolved_list.append((alloc, found))
        holding = holdings.setdefault(found.entity.key, _Holding(found.entity))
        holding.holders.add((alloc.namespace, alloc.pod, alloc.container))
        holding.replicas |= found.replica is not None or alloc.share_id != ""
        if found.mig is not None:
            holding.compute_instances.add(found.mig.compute_instance_id)
        elif found.entity.is_mig:
            holding.whole_instance = True
        holding.rows.add((alloc, found.replica))

    owners: dict[EntityKey, PodRef] = {}
    sharers: dict[EntityKey, tuple[PodRef, ...]] = {}
    rows: set[Labels] = set()
    for key, holding in holdings.items():
        if _exclusive(holding, pod_scope is not None, virtual_gpus):
            namespace, pod, container = next(iter(holding.holders))
            # One holder, perhaps through several claims: the first claim's labels.
            claim = min(alloc for alloc, _ in holding.rows).claim_labels
            owners[key] = PodRef(pod, namespace, container,
                                 (*extra_labels(namespace, pod), *claim))
            continue
        for alloc, replica in holding.rows:
            rows.add(_row_labels(holding.entity, alloc, replica, extra_labels))
        if virtual_gpus:
            sharers[key] = _sharer_refs(holding, extra_labels)

    visible = frozenset(holdings) if pod_scope is not None else None
    return AttributionResult(
        Attribution(owners=owners, visible=visible, sharers=sharers,
                    holders={key: tuple(sorted({(ns, pod) for ns, pod, _ in h.holders}))
                             for key, h in holdings.items()}),
        tuple(sorted(rows)),
        tuple(unattributed),
        tuple(parse_errors),
        tuple(resolved_list),
    )


def _exclusive(holding: _Holding, pod_scope: bool, virtual_gpus: bool) -> bool:
    if len(holding.holders) != 1:
        return False
    if holding.replicas:
        # Node scope sees every holder of every replica; pod scope only this pod's. With
        # virtual GPUs a replica keeps its `vgpu` copy even while it is the only one held.
        return not pod_scope and not virtual_gpus
    if pod_scope and holding.entity.is_mig and not holding.whole_instance:
        every_ci = {m.compute_instance_id for m in holding.entity.mig_devices}
        return every_ci <= holding.compute_instances
    return True


def _sharer_refs(holding: _Holding, extra_labels: Callable[[str, str], Labels]
                 ) -> tuple[PodRef, ...]:
    """Return one reference per pair of container and replica: a container holding one replica
    under two resource names, or two compute instances of one GPU instance, gets one copy of the
    series, so no two copies of a series share a label set."""
    holders = sorted({(a.namespace, a.pod, a.container, -1 if r is None else r)
                      for a, r in holding.rows})
    return tuple(
        PodRef(pod, namespace, container,
               _with_vgpu(extra_labels(namespace, pod), None if replica < 0 else replica))
        for namespace, pod, container, replica in holders
    )


def _with_vgpu(extra: Labels, replica: int | None) -> Labels:
    """Return the labels with dcgm-exporter's `vgpu` label (the replica id) added after
    `pod_uid`, where upstream places it."""
    if replica is None:
        return extra
    vgpu = ((names.VGPU, str(replica)),)
    if extra and extra[0][0] == names.POD_UID:
        return extra[:1] + vgpu + extra[1:]
    return vgpu + extra


def _row_labels(
    entity: Entity,
    alloc: Allocation,
    replica: int | None,
    extra_labels: Callable[[str, str], Labels],
) -> Labels:
    labels: list[tuple[str, str]] = [(names.GPU, str(entity.gpu)), (names.UUID, entity.uuid)]
    if entity.gpu_instance_id is not None:
        labels.append((names.GPU_I_ID, str(entity.gpu_instance_id)))
    labels += [
        (names.POD, alloc.pod),
        (names.NAMESPACE, alloc.namespace),
        (names.CONTAINER, alloc.container),
        (names.RESOURCE, alloc.resource),
    ]
    if replica is not None:
        labels.append((names.REPLICA, str(replica)))
    return (*labels, *extra_labels(alloc.namespace, alloc.pod), *alloc.claim_labels)

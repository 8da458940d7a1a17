"""What a device backend hands upward: the node's inventory and one poll's readings.

Everything here is immutable, so a snapshot built from it can be shared between the poll
thread, the renderer and the web handlers without locks.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from exporter.fields.health_rules import HealthIncident

GpmSupport = Literal["supported", "unsupported", "no_permission"]
"""Whether NVML GPM, the source of DCGM_FI_PROF_*, answers on a GPU; if not, why: `unsupported`
(no GPM: older than Hopper), `no_permission` (the driver restricts profiling to
administrators)."""

EntityKey = tuple[int, int]
"""(gpu index, GPU instance id or -1): how readings, XID history and attribution name an
entity (`Entity.key`)."""


@dataclass(frozen=True, slots=True)
class MigDevice:
    """One MIG device: a compute instance inside a GPU instance, with its own `MIG-` UUID.

    This is what a device plugin hands to a pod.
    """

    uuid: str
    gpu_instance_id: int
    compute_instance_id: int
    name: str
    """NVML's device name, e.g. "NVIDIA H200 MIG 1c.3g.71gb"."""


@dataclass(frozen=True, slots=True)
class Entity:
    """The thing a set of series describes: a whole GPU, or one MIG GPU instance.

    MIG compute instances of one GPU instance share its framebuffer and GPM scope, so they
    are one entity here (several compute instances would otherwise yield series with the same
    label set); the MIG devices inside stay listed for pod attribution.
    """

    gpu: int
    uuid: str
    """The physical GPU's UUID (also for MIG instances, as dcgm-exporter does)."""
    pci_bus_id: str
    device: str
    """`nvidia<index>`."""
    model: str
    gpu_instance_id: int | None = None
    gpu_instance_profile: str | None = None
    """e.g. "3g.71gb"; taken from the MIG device name, never from its memory size."""
    mig_devices: tuple[MigDevice, ...] = ()

    @property
    def is_mig(self) -> bool:
        """Return whether this entity is a MIG GPU instance rather than a whole GPU."""
        return self.gpu_instance_id is not None

    @property
    def key(self) -> EntityKey:
        """Return the key that sorts and finds this entity: its GPU index, and its GPU instance
        id or -1 for a whole GPU."""
        return (self.gpu, -1 if self.gpu_instance_id is None else self.gpu_instance_id)


@dataclass(frozen=True, slots=True)
class Inventory:
    """The node's devices as last enumerated. GPUs first, each followed by its instances."""

    gpus: tuple[Entity, ...] = ()
    instances: tuple[Entity, ...] = ()
    driver_version: str | None = None

    def by_uuid(self, uuid: str) -> Entity | None:
        """Return the GPU with this UUID, or None when the node has none."""
        for gpu in self.gpus:
            if gpu.uuid == uuid:
                return gpu
        return None

    def by_index(self, index: int) -> Entity | None:
        """Return the GPU with this NVML index, or None when the node has none."""
        for gpu in self.gpus:
            if gpu.gpu == index:
                return gpu
        return None

    def instance(self, gpu: int, gpu_instance_id: int) -> Entity | None:
        """Return the MIG GPU instance with this id on this GPU, or None when there is none."""
        for inst in self.instances:
            if inst.gpu == gpu and inst.gpu_instance_id == gpu_instance_id:
                return inst
        return None

    def mig_owner(self, mig_uuid: str) -> tuple[Entity, MigDevice] | None:
        """Return the GPU-instance entity that holds the MIG device with this UUID, with that
        device, or None when no instance holds it."""
        for inst in self.instances:
            for mig in inst.mig_devices:
                if mig.uuid == mig_uuid:
                    return inst, mig
        return None


@dataclass(frozen=True, slots=True)
class XidCount:
    """Events of one XID code on one entity within the counting window."""

    entity_key: EntityKey
    xid: int
    count: int


@dataclass(frozen=True, slots=True)
class XidTotal:
    """All events of one XID code on one entity since the exporter started."""

    entity_key: EntityKey
    xid: int
    total: int
    last_seen: float
    """Unix time of the most recent event with this code."""


@dataclass(frozen=True, slots=True)
class ClockEventCount:
    """Polls within the counting window that found one clock event reason active on a GPU."""

    entity_key: EntityKey
    reason: str | None
    """dcgm-exporter's name of the reason bit, e.g. "sw_thermal"; None: the GPU had no
    sample in the window (one series of 0 without `clock_event`, as dcgm-exporter shows)."""
    count: int


@dataclass(frozen=True, slots=True)
class ClockEventTotal:
    """Times one clock event reason turned on on a GPU since the exporter started."""

    entity_key: EntityKey
    reason: str
    total: int


@dataclass(frozen=True, slots=True)
class Readings:
    """One poll's values: field name -> value, per entity key. Missing means unavailable."""

    values: dict[EntityKey, dict[str, float]] = field(default_factory=dict)
    xid_window: tuple[XidCount, ...] = ()
    xid_totals: tuple[XidTotal, ...] = ()
    xid_window_s: float = 0.0
    """Length of the window `xid_window` counts over."""
    known: dict[EntityKey, Entity] = field(default_factory=dict)
    """Every entity seen since start, so XID history of a GPU that fell off the bus (XID 79)
    keeps its labels after the GPU left the inventory."""
    gpm_support: dict[int, GpmSupport] = field(default_factory=dict)
    """Whether GPM profiling is available ("supported", "unsupported" or "no_permission"), by
    GPU index (only GPUs that were asked)."""
    clock_events: tuple[ClockEventCount, ...] = ()
    clock_events_window_s: float = 0.0
    """Length of the window `clock_events` counts over."""
    clock_event_totals: tuple[ClockEventTotal, ...] = ()
    health: dict[int, tuple[HealthIncident, ...]] = field(default_factory=dict)
    """By GPU index: every health watch's incident, in dcgm-exporter's watch order."""
    health_codes: dict[int, frozenset[str]] = field(default_factory=dict)
    """The DCGM codes that each GPU's health rules over NVML values report now (XID rules left
    out), by GPU index; a GPU without health reads this poll is absent, since it is not known to
    pass."""
    labels: dict[EntityKey, dict[str, str]] = field(default_factory=dict)
    """Label-type fields read through NVML (serial, VBIOS version, ...), by entity."""
    links: dict[tuple[int, int], dict[str, float]] = field(default_factory=dict)
    """Values of link-scope fields by (gpu index, NVLink index); a link without values has
    no series."""
    peers: dict[tuple[int, int], dict[str, float]] = field(default_factory=dict)
    """Values of GPU-pair fields by (gpu index, peer gpu index)."""

"""What the node page shows (`/` and `/api/node`), as plain immutable data.

Built from one poll's snapshot, its poll counters and the self-metric families that went
into that poll's exposition (`exporter.nodepage.build`), never from a call of its
own: the page answers from the last poll as `/metrics` does. A value the poll did not
produce is None here and shown as absent, never as 0.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

ActivitySource = Literal["gpm", "nvml"]
Sharing = Literal["exclusive", "shared", "free", "unknown"]
"""Who holds a device: one container, several, none, or unknown (no pod attribution)."""
GpuState = Literal["ok", "lost", "partial"]
"""`lost`: answered GPU_IS_LOST and left the inventory; `partial`: in pod scope, only this
pod's MIG instances of the GPU are visible, not the GPU's own values."""


@dataclass(frozen=True, slots=True)
class Activity:
    """How busy a GPU or MIG instance was at the poll, and where that was read."""

    ratio: float
    """0-1."""
    source: ActivitySource
    """`gpm`: NVML GPM's graphics engine activity (Hopper and newer); `nvml`: NVML's
    utilisation (`GPU_UTIL`, or on a GPU without GPM the `DCGM_FI_PROF_GR_ENGINE_ACTIVE`
    counterpart averaged from its samples), where GPM is not served."""
    field: str
    """The field it was read from, under the name the collectors file gives it."""


@dataclass(frozen=True, slots=True)
class Memory:
    """Framebuffer memory of a GPU or MIG instance, in MiB."""

    used_mib: float
    total_mib: float | None
    """Used + free + reserved, when the poll read all three."""


@dataclass(frozen=True, slots=True)
class Holder:
    """A container holding a device (or one replica of it)."""

    namespace: str
    pod: str
    container: str
    resource: str | None = None
    replica: str | None = None
    """The time-slicing replica (or DRA share) it holds, when the device id names one."""
    memory_mib: float | None = None
    """Framebuffer of its processes on the device (process attribution or virtual GPUs)."""
    sm_ratio: float | None = None
    """SM utilisation of its processes on the device, 0-1."""


@dataclass(frozen=True, slots=True)
class XidSeen:
    """The most recent XID error code seen on a GPU, and how often it was seen."""

    xid: int
    at: float
    """Unix time of the most recent event with this code."""
    count: int
    """Events of this code since the exporter started."""
    gpu_instance_id: int | None
    """The MIG GPU instance it was reported on; None: the GPU."""


@dataclass(frozen=True, slots=True)
class FaultView:
    """A fault held on the GPU until its clearing event (`exporter.sampling.fault_tracker`)."""

    source: str
    """`xid` or `health`."""
    code: str
    name: str
    action: str
    """NVIDIA's recommended action (RESET_GPU, RESTART_APP, ...)."""
    fatal: bool
    cleared_by: str
    """`holder-exit`, `gpu-reset`, `health-pass` or `reboot`."""
    since: float
    """Unix time it was first seen."""


@dataclass(frozen=True, slots=True)
class InstanceView:
    """One MIG GPU instance: a block of `slices` compute slices of its GPU."""

    gpu_instance_id: int
    profile: str
    slices: int
    """Compute slices, from the profile name (`3g.71gb`: 3)."""
    compute_slices: tuple[int, ...]
    """Compute slices of each compute instance inside it (`1c.3g.71gb`: 1)."""
    memory: Memory | None
    activity: Activity | None
    sharing: Sharing
    holders: tuple[Holder, ...]


@dataclass(frozen=True, slots=True)
class GpuView:
    """One GPU's card: its identity, the poll's values for it, who holds it, its MIG
    instances and faults."""

    gpu: int
    uuid: str
    model: str
    pci_bus_id: str
    state: GpuState
    gpm: str | None
    """`supported`, `unsupported` or `no_permission`; None: not asked (or lost)."""
    activity: Activity | None
    memory: Memory | None
    temperature_c: float | None
    memory_temperature_c: float | None
    power_w: float | None
    power_limit_w: float | None
    sm_clock_mhz: float | None
    clock_events: tuple[str, ...] | None
    """Clock event (throttle) reasons active at the poll, by dcgm-exporter's names; None:
    `DCGM_FI_DEV_CLOCKS_EVENT_REASONS` not read."""
    ecc_sbe: float | None
    ecc_dbe: float | None
    row_remap_failure: float | None
    xid: XidSeen | None
    """The most recent XID on the GPU or one of its visible instances, since start."""
    xid_events: int
    """XID events on the GPU and its visible instances since start, all codes."""
    sharing: Sharing
    holders: tuple[Holder, ...]
    mig_slices: int
    """Compute slices the GPU's MIG layout is drawn over; 0: MIG off."""
    instances: tuple[InstanceView, ...]
    faults: tuple[FaultView, ...] = ()
    """The faults held on the GPU after the poll."""


@dataclass(frozen=True, slots=True)
class Connection:
    """The state of a connection the exporter keeps (kubelet, API server, DRA watch)."""

    up: bool
    last_success: float | None
    errors: tuple[tuple[str, int], ...]
    """(code or reason, count) since start."""


@dataclass(frozen=True, slots=True)
class NvmlError:
    """How many times one NVML function failed with one error code since start."""

    function: str
    code: str
    count: int


@dataclass(frozen=True, slots=True)
class FieldServed:
    """One field of the collectors file and how many devices it was served for."""

    name: str
    entities: int
    """Visible devices (GPUs, MIG instances, links) the poll read a value of it for."""


@dataclass(frozen=True, slots=True)
class ExporterView:
    """The exporter's own state at the poll: version, poll timing and errors, connections,
    NVML's health and the fields served."""

    version: str
    backend: str
    scope: Literal["node", "pod"]
    host: str
    driver_version: str | None
    taken_at: float | None
    """Unix time the poll finished; None before the first poll."""
    interval_s: float
    poll_duration_s: float | None
    last_success: float | None
    poll_errors: tuple[tuple[str, int], ...]
    scrapes: int
    nvml_up: bool | None
    nvml_errors: tuple[NvmlError, ...] | None
    """None in pod scope: node-wide counts describe other tenants' devices too."""
    gpus_lost: int | None
    kubelet: Connection | None
    """None: pod attribution off."""
    api_server: Connection | None
    """None: no pod watch (no pod labels, no process attribution)."""
    dra: Connection | None
    unattributed: tuple[tuple[str, int], ...]
    collectors: str
    fields_served: tuple[FieldServed, ...]
    fields_skipped: tuple[str, ...]
    """The collectors file's fields that are not served, each with its reason."""
    connections_refused: tuple[tuple[str, int], ...]


@dataclass(frozen=True, slots=True)
class NodeView:
    """Everything the node page shows of one poll: the exporter's state and the GPU cards."""

    exporter: ExporterView
    gpus: tuple[GpuView, ...]

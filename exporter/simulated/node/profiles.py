"""The simulated nodes: which GPUs they hold and the figures those GPUs show.

Hopper figures (names, totals, reserved memory, idle and loaded power, temperatures, clocks,
PCI ids, the H200 MIG layout) come from real `nvidia-smi` captures on driver 590.48.01. The
A100 and L4 figures are typical published values for those boards, as no capture exists.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass

DRIVER_VERSION = "590.48.01"
NVML_VERSION = "13.590.48.01"
CUDA_DRIVER_VERSION = 13010
MAX_MIG_DEVICES = 7


@dataclass(frozen=True, slots=True)
class Board:
    """Static figures of one GPU model."""

    name: str
    pci_device_id: int
    pci_subsystem_id: int
    memory_total_mib: int
    memory_reserved_mib: int
    power_limit_w: float
    power_idle_w: float
    power_load_w: float
    """Draw at full activity (the captures' gpu-burn figure)."""
    temp_idle_c: float
    temp_load_c: float
    temp_slowdown_c: float
    mem_temp_idle_c: float | None
    """None: the board has no memory temperature sensor (NOT_SUPPORTED)."""
    mem_temp_load_c: float | None
    sm_clock_idle_mhz: int
    sm_clock_max_mhz: int
    mem_clock_idle_mhz: int
    mem_clock_max_mhz: int
    nvlink_links: int
    nvlink_peak_gib_s: float
    """Sum over links, one direction, at full activity."""
    pcie_peak_mib_s: float
    gpm: bool
    mig_capable: bool
    multiprocessors: int
    has_encoder: bool


H100_SXM = Board(
    name="NVIDIA H100 80GB HBM3", pci_device_id=0x233010DE, pci_subsystem_id=0x16C110DE,
    memory_total_mib=81559, memory_reserved_mib=479,
    power_limit_w=700.0, power_idle_w=69.0, power_load_w=633.0,
    temp_idle_c=41.0, temp_load_c=64.0, temp_slowdown_c=87.0,
    mem_temp_idle_c=47.0, mem_temp_load_c=59.0,
    sm_clock_idle_mhz=345, sm_clock_max_mhz=1980, mem_clock_idle_mhz=2619,
    mem_clock_max_mhz=2619, nvlink_links=18, nvlink_peak_gib_s=180.0, pcie_peak_mib_s=24000.0,
    gpm=True, mig_capable=True, multiprocessors=132, has_encoder=False,
)
H200_SXM = Board(
    name="NVIDIA H200", pci_device_id=0x233510DE, pci_subsystem_id=0x18BE10DE,
    memory_total_mib=143771, memory_reserved_mib=614,
    power_limit_w=700.0, power_idle_w=77.0, power_load_w=630.0,
    temp_idle_c=28.0, temp_load_c=54.0, temp_slowdown_c=87.0,
    mem_temp_idle_c=32.0, mem_temp_load_c=42.0,
    sm_clock_idle_mhz=345, sm_clock_max_mhz=1980, mem_clock_idle_mhz=3201,
    mem_clock_max_mhz=3201, nvlink_links=18, nvlink_peak_gib_s=180.0, pcie_peak_mib_s=24000.0,
    gpm=True, mig_capable=True, multiprocessors=132, has_encoder=False,
)
A100_SXM = Board(
    name="NVIDIA A100-SXM4-80GB", pci_device_id=0x20B210DE, pci_subsystem_id=0x147F10DE,
    memory_total_mib=81920, memory_reserved_mib=569,
    power_limit_w=400.0, power_idle_w=62.0, power_load_w=385.0,
    temp_idle_c=32.0, temp_load_c=66.0, temp_slowdown_c=85.0,
    mem_temp_idle_c=38.0, mem_temp_load_c=71.0,
    sm_clock_idle_mhz=210, sm_clock_max_mhz=1410, mem_clock_idle_mhz=1593,
    mem_clock_max_mhz=1593, nvlink_links=12, nvlink_peak_gib_s=120.0, pcie_peak_mib_s=12000.0,
    gpm=False, mig_capable=True, multiprocessors=108, has_encoder=False,
)
L4 = Board(
    name="NVIDIA L4", pci_device_id=0x27B810DE, pci_subsystem_id=0x16CA10DE,
    memory_total_mib=23034, memory_reserved_mib=435,
    power_limit_w=72.0, power_idle_w=16.0, power_load_w=70.0,
    temp_idle_c=36.0, temp_load_c=74.0, temp_slowdown_c=90.0,
    mem_temp_idle_c=None, mem_temp_load_c=None,
    sm_clock_idle_mhz=210, sm_clock_max_mhz=2040, mem_clock_idle_mhz=405,
    mem_clock_max_mhz=6251, nvlink_links=0, nvlink_peak_gib_s=0.0, pcie_peak_mib_s=12000.0,
    gpm=False, mig_capable=False, multiprocessors=58, has_encoder=True,
)


@dataclass(frozen=True, slots=True)
class ComputeInstanceSpec:
    """One compute instance of a simulated GPU instance."""

    ci_id: int
    slices: int
    """Compute slices of the GPU instance this compute instance holds."""
    slot: int
    """MIG device index on the parent (nvmlDeviceGetMigDeviceHandleByIndex)."""
    multiprocessors: int


@dataclass(frozen=True, slots=True)
class GpuInstanceSpec:
    """One MIG GPU instance of a simulated GPU: its id, profile, size and compute instances."""

    gi_id: int
    profile: str
    """e.g. "3g.71gb"."""
    slices: int
    memory_mib: int
    compute_instances: tuple[ComputeInstanceSpec, ...]

    def mig_name(self, board: Board, ci: ComputeInstanceSpec) -> str:
        """Return NVML's name of a MIG device; the compute-instance prefix appears only when the
        GPU instance is split ("1c.3g.71gb"), as in the capture."""
        if ci.slices == self.slices:
            return f"{board.name} MIG {self.profile}"
        return f"{board.name} MIG {ci.slices}c.{self.profile}"


@dataclass(frozen=True, slots=True)
class GpuSpec:
    """One simulated GPU: its index, board, PCI address and MIG layout."""

    index: int
    board: Board
    bus: int
    """PCI bus number; domain 0, device 0 unless `pci_device` says otherwise."""
    pci_device: int = 0
    mig: tuple[GpuInstanceSpec, ...] | None = None
    """None: MIG off (or unsupported)."""
    shared_by: int = 0
    """Compute processes taking turns on the GPU (time-slicing); 0: no processes modelled."""

    @property
    def bus_id(self) -> str:
        """Return the GPU's PCI bus id with an eight-digit domain, as NVML writes it."""
        return f"{0:08X}:{self.bus:02X}:{self.pci_device:02X}.0"

    @property
    def bus_id_legacy(self) -> str:
        """Return the GPU's PCI bus id with a four-digit domain, as NVML's legacy field writes
        it."""
        return f"{0:04X}:{self.bus:02X}:{self.pci_device:02X}.0"


@dataclass(frozen=True, slots=True)
class Profile:
    """One simulated node: its name, a description and its GPUs."""

    name: str
    description: str
    gpus: tuple[GpuSpec, ...]


def _gi(gi_id: int, profile: str, slices: int, memory_mib: int,
        cis: tuple[tuple[int, int, int], ...]) -> GpuInstanceSpec:
    """Return a GPU instance spec; each of `cis` is (ci id, compute slices, MIG device slot)."""
    return GpuInstanceSpec(
        gi_id, profile, slices, memory_mib,
        tuple(ComputeInstanceSpec(ci, s, slot, 16 * s) for ci, s, slot in cis),
    )


# The capture's layout on GPU 0; MIG device slots 2 and 5 are left empty so that consumers
# must walk every slot up to nvmlDeviceGetMaxMigDeviceCount.
H200_CAPTURE_LAYOUT = (
    _gi(2, "3g.71gb", 3, 71424, ((0, 1, 0), (1, 2, 1))),
    _gi(3, "2g.35gb", 2, 33280, ((0, 2, 3),)),
    _gi(9, "1g.18gb", 1, 16384, ((0, 1, 4),)),
    _gi(10, "1g.18gb", 1, 16384, ((0, 1, 6),)),
)
H200_SEVEN_SMALL = tuple(
    _gi(7 + i, "1g.18gb", 1, 16384, ((0, 1, i),)) for i in range(7)
)

# GPU 0 sits where the capture's H200 does; the others follow in pairs behind PCIe switches.
_H200_BUSES = (0x83, 0x84, 0xA3, 0xA4, 0xC3, 0xC4, 0xE3, 0xE4)

PROFILES: Mapping[str, Profile] = {
    p.name: p
    for p in (
        Profile(
            "h100-8",
            "8x H100 80GB HBM3 (SXM), MIG off, GPM and NVLink",
            # The capture is from a VM whose GPU sits at 00000000:00:09.0; its siblings
            # follow as further devices on bus 0.
            tuple(GpuSpec(i, H100_SXM, 0x00, pci_device=0x09 + i) for i in range(8)),
        ),
        Profile(
            "h200-mig",
            "8x H200: GPU 0 in the captured MIG layout, GPU 1 as 7x 1g.18gb, GPUs 2-7 whole",
            tuple(
                GpuSpec(i, H200_SXM, bus,
                        mig=H200_CAPTURE_LAYOUT if i == 0 else H200_SEVEN_SMALL if i == 1
                        else None)
                for i, bus in enumerate(_H200_BUSES)
            ),
        ),
        Profile(
            "a100-4",
            "4x A100-SXM4-80GB, MIG off, held whole by pods; pre-Hopper, so no GPM",
            tuple(GpuSpec(i, A100_SXM, bus) for i, bus in enumerate((0x07, 0x0F, 0x47, 0x4E))),
        ),
        Profile(
            "a100-timesliced",
            "4x A100-SXM4-80GB shared by time-slicing; pre-Hopper, so no GPM",
            # Three processes per GPU: the demo kubelet hands each GPU to three pods.
            tuple(GpuSpec(i, A100_SXM, bus, shared_by=3)
                  for i, bus in enumerate((0x07, 0x0F, 0x47, 0x4E))),
        ),
        Profile(
            "l4-1",
            "1x L4: no GPM, no NVLink, no memory temperature sensor, no MIG",
            (GpuSpec(0, L4, 0x00, pci_device=0x03),),
        ),
    )
}


def profile_names() -> list[str]:
    """Return the names of the simulated nodes, sorted."""
    return sorted(PROFILES)


def get_profile(name: str) -> Profile:
    """Return the simulated node with this name; raise ValueError listing the known names
    otherwise."""
    try:
        return PROFILES[name]
    except KeyError:
        raise ValueError(
            f"unknown simulated profile {name!r}; expected one of {', '.join(profile_names())}"
        ) from None


_UUID_NAMESPACE = uuid.UUID("6b1f3c52-3f0e-4c57-9a51-2d1f7f0e9c11")


def gpu_uuid(profile: str, gpu: int) -> str:
    """Return a GPU UUID stable across seeds and runs, so simulated allocations can name devices."""
    return f"GPU-{uuid.uuid5(_UUID_NAMESPACE, f'{profile}/gpu/{gpu}')}"


def mig_uuid(profile: str, gpu: int, gi: int, ci: int) -> str:
    """Return the MIG device UUID for this node, GPU, GPU instance and compute instance, the same on
    every run."""
    return f"MIG-{uuid.uuid5(_UUID_NAMESPACE, f'{profile}/gpu/{gpu}/gi/{gi}/ci/{ci}')}"

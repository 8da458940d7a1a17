"""Static figures of the simulated boards beyond `profiles.Board`: limits, link widths,
thresholds and the like, which do not move with activity.

Hopper figures come from the `nvidia-smi -q` captures on driver 590.48.01 (H100 80GB HBM3,
H200): the thresholds there are printed relative to the GPU's T.Limit (41 C with 46 C of
margin: a limit of 87 C, shutdown at -8 C, slowdown at -2 C of it), application clocks and the
fan answer "deprecated" / N/A, BAR1 is 128 GiB; the serial numbers there are redacted
(zeros), and so are the simulated ones. The A100 and L4 figures are the boards'
published values, with the L40S capture (same Ada generation) for the L4's PCIe link.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class BoardFigures:
    """The fixed figures of one simulated board: clock and power limits, PCIe and memory sizes, and
    thresholds."""

    max_video_clock_mhz: int
    video_clock_idle_mhz: int
    power_limit_min_w: float
    power_limit_max_w: float
    pcie_gen: int
    pcie_width: int
    bar1_total_mib: int
    temp_limit_c: int
    """GPU max operating temperature (the T.Limit)."""
    temp_shutdown_c: int
    temp_slowdown_c: int
    mem_temp_max_c: int | None
    compute_capability: tuple[int, int]
    bank_remap_max: int
    """Row-remapper banks with maximum availability (the histogram's `max` column)."""
    c2c: bool
    nvdec: int
    nvjpg: int
    nvofa: int
    vbios: str
    inforom_image: str
    inforom_oem: str
    inforom_ecc: str
    module_id: int | None
    """Platform Info's Module Id; None where no capture shows it (platform info answers
    NOT_SUPPORTED)."""


BOARD_FIGURES: dict[str, BoardFigures] = {
    "NVIDIA H100 80GB HBM3": BoardFigures(
        max_video_clock_mhz=1545, video_clock_idle_mhz=765, power_limit_min_w=200.0,
        power_limit_max_w=700.0, pcie_gen=5, pcie_width=16, bar1_total_mib=131072,
        temp_limit_c=87, temp_shutdown_c=95, temp_slowdown_c=89, mem_temp_max_c=95,
        compute_capability=(9, 0), bank_remap_max=2560, c2c=False, nvdec=7, nvjpg=7, nvofa=1,
        vbios="96.00.A5.00.01", inforom_image="G520.0200.00.05", inforom_oem="2.1",
        inforom_ecc="7.16", module_id=7),
    "NVIDIA H200": BoardFigures(
        max_video_clock_mhz=1545, video_clock_idle_mhz=765, power_limit_min_w=200.0,
        power_limit_max_w=700.0, pcie_gen=5, pcie_width=16, bar1_total_mib=262144,
        temp_limit_c=87, temp_shutdown_c=95, temp_slowdown_c=89, mem_temp_max_c=95,
        compute_capability=(9, 0), bank_remap_max=4480, c2c=False, nvdec=7, nvjpg=7, nvofa=1,
        vbios="96.00.A5.00.03", inforom_image="G520.0280.02.02", inforom_oem="2.1",
        inforom_ecc="7.16", module_id=1),
    "NVIDIA A100-SXM4-80GB": BoardFigures(
        max_video_clock_mhz=1290, video_clock_idle_mhz=585, power_limit_min_w=100.0,
        power_limit_max_w=400.0, pcie_gen=4, pcie_width=16, bar1_total_mib=131072,
        temp_limit_c=85, temp_shutdown_c=92, temp_slowdown_c=89, mem_temp_max_c=95,
        compute_capability=(8, 0), bank_remap_max=2560, c2c=False, nvdec=5, nvjpg=1, nvofa=1,
        vbios="92.00.45.00.06", inforom_image="G506.0212.00.02", inforom_oem="2.0",
        inforom_ecc="6.16", module_id=None),
    "NVIDIA L4": BoardFigures(
        max_video_clock_mhz=1545, video_clock_idle_mhz=795, power_limit_min_w=40.0,
        power_limit_max_w=72.0, pcie_gen=4, pcie_width=16, bar1_total_mib=32768,
        temp_limit_c=87, temp_shutdown_c=95, temp_slowdown_c=92, mem_temp_max_c=None,
        compute_capability=(8, 9), bank_remap_max=192, c2c=False, nvdec=4, nvjpg=4, nvofa=1,
        vbios="95.04.43.00.05", inforom_image="G193.0200.00.01", inforom_oem="2.1",
        inforom_ecc="6.16", module_id=1),
}

"""Static figures of the simulated boards beyond `profiles.Board`: limits, link widths,
thresholds and the like, which do not move with activity.

Hopper figures come from the `nvidia-smi -q` captures on driver 590.48.01 (H100 80GB HBM3,
H200): the thresholds there are printed relative to the GPU's T.Limit (41 C with 46 C of
margin: a limit of 87 C, shutdown at -8 C, slowdown at -2 C of it), application clocks and the
fan answer "deprecated" / N/A, BAR1 is 128 GiB. The A100 and L4 figures are the boards'
published values, with the L40S capture (same Ada generation) for the L4's PCIe link.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class BoardFigures:
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


BOARD_FIGURES: dict[str, BoardFigures] = {
    "NVIDIA H100 80GB HBM3": BoardFigures(
        max_video_clock_mhz=1545, video_clock_idle_mhz=765, power_limit_min_w=200.0,
        power_limit_max_w=700.0, pcie_gen=5, pcie_width=16, bar1_total_mib=131072,
        temp_limit_c=87, temp_shutdown_c=95, temp_slowdown_c=89, mem_temp_max_c=95,
        compute_capability=(9, 0), bank_remap_max=2560, c2c=False, nvdec=7, nvjpg=7, nvofa=1),
    "NVIDIA H200": BoardFigures(
        max_video_clock_mhz=1545, video_clock_idle_mhz=765, power_limit_min_w=200.0,
        power_limit_max_w=700.0, pcie_gen=5, pcie_width=16, bar1_total_mib=262144,
        temp_limit_c=87, temp_shutdown_c=95, temp_slowdown_c=89, mem_temp_max_c=95,
        compute_capability=(9, 0), bank_remap_max=4480, c2c=False, nvdec=7, nvjpg=7, nvofa=1),
    "NVIDIA A100-SXM4-80GB": BoardFigures(
        max_video_clock_mhz=1290, video_clock_idle_mhz=585, power_limit_min_w=100.0,
        power_limit_max_w=400.0, pcie_gen=4, pcie_width=16, bar1_total_mib=131072,
        temp_limit_c=85, temp_shutdown_c=92, temp_slowdown_c=89, mem_temp_max_c=95,
        compute_capability=(8, 0), bank_remap_max=2560, c2c=False, nvdec=5, nvjpg=1, nvofa=1),
    "NVIDIA L4": BoardFigures(
        max_video_clock_mhz=1545, video_clock_idle_mhz=795, power_limit_min_w=40.0,
        power_limit_max_w=72.0, pcie_gen=4, pcie_width=16, bar1_total_mib=32768,
        temp_limit_c=87, temp_shutdown_c=95, temp_slowdown_c=92, mem_temp_max_c=None,
        compute_capability=(8, 9), bank_remap_max=192, c2c=False, nvdec=4, nvjpg=4, nvofa=1),
}

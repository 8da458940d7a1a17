"""`nvmlDeviceGetFieldValues` ids beyond the default fields, answered from the dynamics.

Each answers (value, union member, value type), or None for NOT_SUPPORTED: the simulated
boards are Hopper and older, so NVLink5 counters, C2C and power smoothing (Blackwell and
Grace) are not supported, as on the real parts.
"""

from __future__ import annotations

from collections.abc import Callable

import pynvml

from exporter.simulated.node.core import GpuEntry

Answer = tuple[float, str, int]
_ULL = ("ullVal", pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG)
_UINT = ("uiVal", pynvml.NVML_VALUE_TYPE_UNSIGNED_INT)

# NVML_NVLINK_ERROR_DL_* counter of each per-GPU NVLink error total.
_NVLINK_ERROR_TOTALS = {
    pynvml.NVML_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL: pynvml.NVML_NVLINK_ERROR_DL_CRC_FLIT,
    pynvml.NVML_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL: pynvml.NVML_NVLINK_ERROR_DL_CRC_DATA,
    pynvml.NVML_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL: pynvml.NVML_NVLINK_ERROR_DL_REPLAY,
    pynvml.NVML_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL: pynvml.NVML_NVLINK_ERROR_DL_RECOVERY,
    pynvml.NVML_FI_DEV_NVLINK_ERROR_DL_CRC: pynvml.NVML_NVLINK_ERROR_DL_CRC_FLIT,
    pynvml.NVML_FI_DEV_NVLINK_ERROR_DL_REPLAY: pynvml.NVML_NVLINK_ERROR_DL_REPLAY,
    pynvml.NVML_FI_DEV_NVLINK_ERROR_DL_RECOVERY: pynvml.NVML_NVLINK_ERROR_DL_RECOVERY,
}
_REMAPPED = {pynvml.NVML_FI_DEV_REMAPPED_COR: 0, pynvml.NVML_FI_DEV_REMAPPED_UNC: 1,
             pynvml.NVML_FI_DEV_REMAPPED_PENDING: 2, pynvml.NVML_FI_DEV_REMAPPED_FAILURE: 3}
_RETIRED = {pynvml.NVML_FI_DEV_RETIRED_SBE: 0, pynvml.NVML_FI_DEV_RETIRED_DBE: 1,
            pynvml.NVML_FI_DEV_RETIRED_PENDING: 2}
"""Answered once a `retire` fault started (see `GpuDynamics.retired_pages`)."""
_MIB = 1024 * 1024
_PCIE_BYTES = {pynvml.NVML_FI_DEV_PCIE_COUNT_TX_BYTES: (0.01, 0.25),
               pynvml.NVML_FI_DEV_PCIE_COUNT_RX_BYTES: (0.01, 0.35)}
"""Idle and per-activity shares of the board's PCIe peak, as `dynamics.gpm_metric`'s."""
_CLOCK_EVENT_NS = {
    pynvml.NVML_FI_DEV_CLOCKS_EVENT_REASON_SW_THERM_SLOWDOWN: "thermal",
    pynvml.NVML_FI_DEV_CLOCKS_EVENT_REASON_HW_THERM_SLOWDOWN: "thermal",
    pynvml.NVML_FI_DEV_CLOCKS_EVENT_REASON_HW_POWER_BRAKE_SLOWDOWN: "power",
}


def _nvlink(gpu: GpuEntry) -> bool:
    return gpu.spec.board.nvlink_links > 0 and not gpu.mig_on


def other_field_value(gpu: GpuEntry, field_id: int, scope_id: int, t: float
                      ) -> Answer | None:
    """Return the answer for a field id the default fields do not read; None: NOT_SUPPORTED."""
    dyn = gpu.dyn
    simple: dict[int, Callable[[], float]] = {
        pynvml.NVML_FI_DEV_ECC_CURRENT: lambda: 1,
        pynvml.NVML_FI_DEV_ECC_PENDING: lambda: 1,
        pynvml.NVML_FI_DEV_PERF_POLICY_TOTAL_APP_CLOCKS: lambda: 0,
        pynvml.NVML_FI_DEV_PERF_POLICY_TOTAL_BASE_CLOCKS: lambda: 0,
        pynvml.NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION: lambda: int(dyn.energy_mj(t)),
        pynvml.NVML_FI_DEV_PCIE_COUNT_CORRECTABLE_ERRORS: lambda: dyn.pcie_replays(t) // 4,
        # "GPU Recovery Action: None" unless a `recovery` fault holds
        pynvml.NVML_FI_DEV_GET_GPU_RECOVERY_ACTION: lambda: dyn.recovery_action(t),
    }
    if field_id in simple:
        return (simple[field_id](), *_ULL)
    if field_id in _PCIE_BYTES:
        # The integral of the rate GPM reports on Hopper (MiB/s), in bytes.
        idle, busy = _PCIE_BYTES[field_id]
        mib = gpu.spec.board.pcie_peak_mib_s * (idle * t + busy * dyn.activity_integral(0.0, t))
        return (int(mib * _MIB), *_ULL)
    if field_id == pynvml.NVML_FI_DEV_POWER_INSTANT:
        return (round(dyn.instant_power_mw(t)), *_UINT)
    retired = _RETIRED.get(field_id)
    if retired is not None and (pages := dyn.retired_pages(t)) is not None:
        return (pages[retired], *_ULL)
    if field_id in _REMAPPED:
        if gpu.mig_on:
            return None
        return (dyn.remapped_rows(t)[_REMAPPED[field_id]], *_ULL)
    if field_id in _CLOCK_EVENT_NS:
        return (dyn.violation_ns(t, _CLOCK_EVENT_NS[field_id]), *_ULL)
    if field_id in _NVLINK_ERROR_TOTALS and _nvlink(gpu):
        counter = _NVLINK_ERROR_TOTALS[field_id]
        links = range(gpu.spec.board.nvlink_links)
        return (sum(dyn.nvlink_errors(t, link, counter) for link in links), *_ULL)
    if (field_id == pynvml.NVML_FI_DEV_NVLINK_GET_STATE and _nvlink(gpu)
            and 0 <= scope_id < gpu.spec.board.nvlink_links):
        return (pynvml.NVML_FEATURE_ENABLED, *_UINT)
    return None

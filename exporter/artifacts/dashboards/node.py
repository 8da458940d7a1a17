"""(b) Node and GPU detail: every collected field of the selected GPUs, one panel per topic."""

from __future__ import annotations

from exporter.artifacts.dashboards.spec import (
    GPU_LEGEND,
    GPU_VAR,
    GPUS,
    HOPPER_ONLY,
    HOST,
    HOST_VAR,
    HOSTS,
    INSTANCE_LEGEND,
    JOB,
    JOB_VAR,
    NO_ACTIVITY,
    NO_XID,
    Dashboard,
    Kind,
    Panel,
    Query,
    Section,
    sel,
)
from exporter.promql.measures import DRAM, GR_ENGINE, NVLINK_BYTES

S = sel(JOB, HOSTS, GPUS)
TS = Kind.TIMESERIES
WINDOW = "$__rate_interval"
RATE = f"[{WINDOW}]"
NO_NVLINK = "No NVLink counters: the selected GPUs have no NVLink (or it is off)"
NO_PCIE = ("No PCIe counters: GPUs before Hopper serve them from NVML's PCIe byte counters "
           "unless --no-prof-counterparts is set; dcgm-exporter only where its profiling "
           "module reads them")


def _series(*fields: tuple[str, str], legend: str = GPU_LEGEND, fmt: str = "{}") -> tuple[
        Query, ...]:
    """Return one query per (field, legend suffix); `fmt` wraps the selected series."""
    return tuple(Query(fmt.format(f"{name}{S}"), f"{legend} {suffix}".rstrip())
                 for name, suffix in fields)


def _ts(title: str, queries: tuple[Query, ...], unit: str, description: str,
        min: float | None = None, max: float | None = None,
        no_value: str | None = None) -> Panel:
    return Panel(title, TS, queries, unit, description, width=8, min=min, max=max,
                 no_value=no_value)


ACTIVITY = Section("Activity", (
    _ts("Utilisation", _series(("DCGM_FI_DEV_GPU_UTIL", "util"),
                               ("DCGM_FI_DEV_MEM_COPY_UTIL", "memory copy")),
        "percent", "NVML utilisation counters (whole GPUs only; absent in MIG mode).",
        min=0, max=100),
    _ts("Video engines", _series(("DCGM_FI_DEV_ENC_UTIL", "encoder"),
                                 ("DCGM_FI_DEV_DEC_UTIL", "decoder")),
        "percent", "Encoder and decoder utilisation.", min=0, max=100),
    _ts("Graphics engine / SM", (
        Query(GR_ENGINE.select(S), f"{INSTANCE_LEGEND} gr engine"),
        *_series(("DCGM_FI_PROF_SM_ACTIVE", "sm active"),
                 ("DCGM_FI_PROF_SM_OCCUPANCY", "sm occupancy"), legend=INSTANCE_LEGEND)),
        "percentunit", "Activity ratios per GPU or MIG instance. Graphics engine: GPM on "
        "Hopper and newer, NVML utilisation / 100 on older GPUs. SM active and occupancy are "
        "GPM only (Hopper and newer).", min=0, max=1, no_value=NO_ACTIVITY),
    _ts("Pipes", _series(("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "tensor"),
                         ("DCGM_FI_PROF_PIPE_FP64_ACTIVE", "fp64"),
                         ("DCGM_FI_PROF_PIPE_FP32_ACTIVE", "fp32"),
                         ("DCGM_FI_PROF_PIPE_FP16_ACTIVE", "fp16"), legend=INSTANCE_LEGEND),
        "percentunit", "Share of cycles each arithmetic pipe was active (GPM: Hopper and "
        "newer).", min=0, max=1, no_value=HOPPER_ONLY),
    _ts("Memory interface", (Query(DRAM.select(S), f"{INSTANCE_LEGEND} dram"),),
        "percentunit", "Share of time the memory interface was busy: GPM on Hopper and "
        "newer, NVML memory utilisation / 100 on older GPUs.", min=0, max=1,
        no_value=NO_ACTIVITY),
    _ts("Clocks", _series(("DCGM_FI_DEV_SM_CLOCK", "sm"), ("DCGM_FI_DEV_MEM_CLOCK", "memory"),
                          fmt="{} * 1000000"),
        "hertz", "Current SM and memory clocks."),
))

MEMORY = Section("Framebuffer", (
    _ts("Framebuffer", _series(("DCGM_FI_DEV_FB_USED", "used"), ("DCGM_FI_DEV_FB_FREE", "free"),
                               ("DCGM_FI_DEV_FB_RESERVED", "reserved"), legend=INSTANCE_LEGEND),
        "mbytes", "Framebuffer per GPU or MIG GPU instance."),
    _ts("Framebuffer used share", (Query(
        f"DCGM_FI_DEV_FB_USED{S} / (DCGM_FI_DEV_FB_USED{S} + DCGM_FI_DEV_FB_FREE{S})",
        INSTANCE_LEGEND),), "percentunit", "Used share of usable framebuffer.", min=0, max=1),
))

POWER = Section("Power and thermals", (
    _ts("Power", _series(("DCGM_FI_DEV_POWER_USAGE", "draw"),
                         ("DCGM_FI_DEV_POWER_MGMT_LIMIT", "limit")),
        "watt", "Power draw against the management limit."),
    _ts("Energy", _series(("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "average power"),
                          fmt="rate({}" + RATE + ") / 1000"),
        "watt", "Average power derived from the energy counter."),
    _ts("Temperature", _series(("DCGM_FI_DEV_GPU_TEMP", "core"),
                               ("DCGM_FI_DEV_MEMORY_TEMP", "memory")),
        "celsius", "Core and HBM temperature."),
    _ts("Clock event reasons", _series(("DCGM_FI_DEV_CLOCKS_EVENT_REASONS", "bitmask"),
                                       ("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", "bitmask (old)")),
        "none", "Bitmask: 0x8 HW slowdown, 0x20 SW thermal, 0x40 HW thermal, 0x80 power brake."),
    _ts("Time throttled", _series(("DCGM_FI_DEV_POWER_VIOLATION", "power"),
                                  ("DCGM_FI_DEV_THERMAL_VIOLATION", "thermal"),
                                  ("DCGM_FI_DEV_SYNC_BOOST_VIOLATION", "sync boost"),
                                  ("DCGM_FI_DEV_BOARD_LIMIT_VIOLATION", "board limit"),
                                  ("DCGM_FI_DEV_LOW_UTIL_VIOLATION", "low utilisation"),
                                  ("DCGM_FI_DEV_RELIABILITY_VIOLATION", "reliability"),
                                  fmt="rate({}" + RATE + ") / 1e9"),
        "percentunit", "Share of wall time the clocks were held down, by cause."),
))

INTERCONNECT = Section("Interconnect", (
    _ts("PCIe throughput", _series(("DCGM_FI_PROF_PCIE_TX_BYTES", "tx"),
                                   ("DCGM_FI_PROF_PCIE_RX_BYTES", "rx"), legend=INSTANCE_LEGEND),
        "Bps", "PCIe bytes per second including protocol overhead (GPM on Hopper and newer, NVML's "
        "PCIe byte counters before Hopper).",
        no_value=NO_PCIE),
    _ts("NVLink throughput", (
        Query(NVLINK_BYTES.select(S, window=WINDOW), f"{INSTANCE_LEGEND} tx+rx"),
        *_series(("DCGM_FI_PROF_NVLINK_TX_BYTES", "tx"), ("DCGM_FI_PROF_NVLINK_RX_BYTES", "rx"),
                 legend=INSTANCE_LEGEND),
    ), "Bps", "NVLink payload bytes per second. Sent plus received from GPM on Hopper and "
              "newer, from the rate of NVML's NVLink byte counter on older GPUs; each "
              "direction from GPM only.", no_value=NO_NVLINK),
    _ts("PCIe replays", _series(("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "replays"),
                                fmt="rate({}" + RATE + ")"),
        "ops", "PCIe link-level retries per second."),
))

ERRORS = Section("Errors", (
    _ts("XID events", (Query(
        f"sum by ({HOST}, gpu, GPU_I_ID, xid) (increase(gpu_exporter_xid_errors_total{S}{RATE}))",
        f"{GPU_LEGEND} {{{{GPU_I_ID}}}} xid {{{{xid}}}}"),), "short",
        "XID events per code in each rate window.", no_value=NO_XID),
    _ts("XID events in the exporter's window", (Query(
        f"DCGM_EXP_XID_ERRORS_COUNT{S}", f"{INSTANCE_LEGEND} xid {{{{xid}}}}"),), "short",
        "dcgm-exporter compatible count of XIDs per code in a sliding window.",
        no_value=NO_XID),
    _ts("NVLink errors", _series(("DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL", "crc flit"),
                                 ("DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL", "crc data"),
                                 ("DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL", "replay"),
                                 ("DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL", "recovery"),
                                 fmt="increase({}" + RATE + ")"),
        "short", "NVLink errors over all links per rate window: CRC errors are retried "
        "(replay), a recovery retrains a link; XID 74 follows when one breaks.",
        no_value=NO_NVLINK),
    _ts("Last XID code", _series(("DCGM_FI_DEV_XID_ERRORS", "last xid"), legend=INSTANCE_LEGEND),
        "none", "The most recent XID code (a gauge: it never goes back to 0)."),
    _ts("ECC errors", (
        *_series(("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "single-bit"),
                 ("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "double-bit"),
                 fmt="increase({}" + RATE + ")"),
        *_series(("DCGM_FI_DEV_ECC_SBE_AGG_TOTAL", "single-bit lifetime"),
                 ("DCGM_FI_DEV_ECC_DBE_AGG_TOTAL", "double-bit lifetime")),
    ), "short", "Volatile ECC errors per rate window and lifetime totals."),
    _ts("Row remapping", _series(("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "uncorrectable"),
                                 ("DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", "correctable"),
                                 ("DCGM_FI_DEV_ROW_REMAP_FAILURE", "failure"),
                                 ("DCGM_FI_DEV_ROW_REMAP_PENDING", "pending")),
        "short", "Remapped HBM rows; failure = needs repair, pending = needs a GPU reset."),
    _ts("Retired pages", _series(("DCGM_FI_DEV_RETIRED_SBE", "single-bit"),
                                 ("DCGM_FI_DEV_RETIRED_DBE", "double-bit"),
                                 ("DCGM_FI_DEV_RETIRED_PENDING", "pending")),
        "short", "Page retirement (pre-Ampere GPUs)."),
))

NODE = Dashboard(
    uid="gpu-exporter-node",
    filename="gpu-node-detail.json",
    title="GPU node and device detail",
    description="Every collected field of the GPUs of one or more nodes.",
    tags=("gpu-exporter", "gpu", "nvidia"),
    variables=(JOB_VAR, HOST_VAR, GPU_VAR),
    sections=(ACTIVITY, MEMORY, POWER, INTERCONNECT, ERRORS),
)

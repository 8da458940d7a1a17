"""The hand-written catalog of served fields, keyed by their DCGM names.

Every entry says where the value comes from in NVML, how it is converted, what Prometheus
type it is exposed as and on which entity (whole GPU, MIG GPU instance, or the parent GPU of
a MIG instance) it lives. The other served fields come from the generated
`dcgm-names.csv` (`exporter.fields.dcgm_names`); an entry here wins over it.

Adding a DCGM field: one that DCGM's reference table (`tests/fixtures/dcgm-fields/`) gives
an NVML source is served through the generic readers once
`python -m tools.derive_dcgm_names --write` has regenerated `dcgm-names.csv` from that
table; nothing is written by hand. One that needs its own reader, conversion, entity or
help gets an entry here; then run that command (the CSV drops its generic spec) and
`python -m exporter.fields.docs docs/metrics.md`. Their drift tests fail until both are
rerun.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class MetricType(enum.Enum):
    """The Prometheus type a field is exported as, or `label` for a field that labels other
    series."""

    GAUGE = "gauge"
    COUNTER = "counter"
    LABEL = "label"
    UNTYPED = "untyped"


class Scope(enum.Enum):
    """Which entity a field's series belong to."""

    GPU = "gpu"
    """A physical-GPU value (clocks, power, ...): one series per GPU, MIG or not."""
    GPU_NO_MIG = "gpu-no-mig"
    """A physical-GPU value NVML does not report while MIG is enabled (utilisation)."""
    INSTANCE = "instance"
    """Per whole GPU when MIG is off, per MIG GPU instance when it is on (framebuffer, GPM)."""
    LINK = "link"
    """Per active NVLink of a GPU without MIG (NVML answers no NVLink query under MIG)."""
    PEER = "peer"
    """Per ordered pair of GPUs: one series per other GPU of the node (dcgm-exporter's
    `DCGM_EXP_P2P_STATUS`, with `link_status` and `peer_gpu` labels)."""


class Reader(enum.Enum):
    """The NVML call (or call group) a field's value comes from.

    Fields sharing a reader are served by one call per device per poll.
    """

    CLOCK_SM = "nvmlDeviceGetClockInfo(SM)"
    CLOCK_MEM = "nvmlDeviceGetClockInfo(MEM)"
    TEMPERATURE = "nvmlDeviceGetTemperature(GPU)"
    POWER = "nvmlDeviceGetPowerUsage"
    POWER_LIMIT = "nvmlDeviceGetPowerManagementLimit"
    ENERGY = "nvmlDeviceGetTotalEnergyConsumption"
    PCIE_REPLAY = "nvmlDeviceGetPcieReplayCounter"
    UTILIZATION = "nvmlDeviceGetUtilizationRates"
    ENCODER = "nvmlDeviceGetEncoderUtilization"
    DECODER = "nvmlDeviceGetDecoderUtilization"
    MEMORY = "nvmlDeviceGetMemoryInfo(v2)"
    REMAPPED_ROWS = "nvmlDeviceGetRemappedRows"
    CLOCK_EVENTS = "nvmlDeviceGetCurrentClocksEventReasons"
    FIELD_VALUES = "nvmlDeviceGetFieldValues"
    GPM = "nvmlGpmMetricsGet"
    XID_EVENTS = "nvmlEventSetWait_v2"
    DRIVER = "nvmlSystemGetDriverVersion"
    FABRIC = "nvmlDeviceGetGpuFabricInfoV(v3)"
    HEALTH = "DCGM health watches, derived from NVML (see docs/metrics.md)"
    """DCGM_EXP_GPU_HEALTH_STATUS: one series per GPU and health watch."""
    P2P = "nvmlDeviceGetP2PStatus(peer, NVLINK)"
    """The NVLink P2P status towards one peer GPU (`Scope.PEER`)."""
    CALL = "NVML call"
    """Any other plain NVML call, described by a `Call` part."""


class Convert(enum.Enum):
    """Unit conversion from the NVML value to the exported one."""

    NONE = "none"
    MILLIWATT_TO_WATT = "mW -> W"
    BYTES_TO_MIB = "bytes -> MiB (floor)"
    PERCENT_TO_RATIO = "% -> ratio"
    MIB_PER_S_TO_BYTES_PER_S = "MiB/s -> bytes/s"
    TEMPERATURE = "degC, values above 200 dropped"
    MILLIWATT_TO_WATT_FLOOR = "mW -> W (integer division)"
    MILLIJOULE_TO_JOULE = "mJ -> J"
    MHZ_TO_HZ = "MHz -> Hz"
    TRUNCATE = "truncated to an integer"
    COMPUTE_MODE = "DCGM compute mode (prohibited 1, exclusive process 2)"
    COMPUTE_CAPABILITY = "(major << 16) | minor"
    BER = "mantissa (bits 8-11) x 10^-exponent (bits 0-7)"
    FB_USED_RATIO = "used / (total - reserved)"
    FABRIC_MANAGER_STATUS = "DCGM fabric manager status from state and status"
    FABRIC_MANAGER_ERROR = "DCGM return code of the registration status, once completed"
    UNSET_0XFF = "none; 0xFF (not reported) left out"
    VGPU_LICENSED = "1 when the vGPU feature is licensed, else 0"
    # Label fields: NVML's answer to the exported string.
    BRAND_NAME = "brand enum -> nvidia-smi's name"
    GUID_HEX = "first 8 bytes as 0x%016x"
    SERIAL_BYTES = "bytes up to the first NUL; empty or all 0xFF left out"
    UUID_BYTES = "the cluster UUID as a GUID string, once fabric registration completed"
    CUDA_VISIBLE_DEVICES = "the entity's CUDA_VISIBLE_DEVICES: GPU-<uuid>, MIG-GPU-<uuid>/<gi>"


HANDLE = "h"
"""In `Call.args`: the entity's device handle."""
LINK = "link"
"""In `Call.args` and `FieldRefs`: the link index of a link entity."""

Arg = int | str
"""An NVML constant, or one of the placeholders `HANDLE` and `LINK`."""


@dataclass(frozen=True, slots=True)
class Call:
    """A plain NVML call: the pynvml function, its arguments, and where the value is in the
    answer (an attribute, an index, or the answer itself)."""

    function: str
    args: tuple[Arg, ...] = (HANDLE,)
    pick: str | int | None = None

    def __str__(self) -> str:
        """Return the call as docs/metrics.md shows it, such as
        `nvmlDeviceGetMaxClockInfo(h, 1)`."""
        pick = "" if self.pick is None else (
            f".{self.pick}" if isinstance(self.pick, str) else f"[{self.pick}]")
        return f"{self.function}({', '.join(map(str, self.args))}){pick}"


@dataclass(frozen=True, slots=True)
class FieldRefs:
    """`nvmlDeviceGetFieldValues` entries (field id, scope id) whose values are summed; a scope
    of `LINK` is the link entity's index."""

    refs: tuple[tuple[int, Arg], ...]

    def __str__(self) -> str:
        """Return the field ids at their scopes as docs/metrics.md shows them, joined by ` + `."""
        return " + ".join(f"{f}@{s}" for f, s in self.refs)


@dataclass(frozen=True, slots=True)
class GpmLink:
    """A per-link GPM metric: link n reads metric `low + 2n` (links 0-17) or
    `high + 2(n - 18)` (links 18 and up)."""

    low: int
    high: int

    def metric(self, link: int) -> int:
        """Return the GPM metric id of this NVLink: NVML numbers the first 18 links from one base
        and the rest from another."""
        return self.low + 2 * link if link < 18 else self.high + 2 * (link - 18)

    def __str__(self) -> str:
        """Return the rule that numbers the links' metric ids, as docs/metrics.md shows it."""
        return f"{self.low}+2n (n<18), {self.high}+2(n-18)"


NvmlSource = str | int | Call | FieldRefs | GpmLink | None
"""Where a field's value comes from in NVML: a struct attribute of the reader's answer, an
NVML_FI_* or GPM id, `FieldRefs`, `GpmLink` or a `Call`; None when the reader's answer is the
value."""


@dataclass(frozen=True, slots=True)
class FieldSpec:
    """One field this exporter can serve: its name, type, help, unit, and where and how its value is
    read."""

    name: str
    """The DCGM field name; also the exported metric name."""
    type: MetricType
    """The Prometheus type used when a CSV does not say otherwise."""
    help: str
    unit: str
    reader: Reader
    part: NvmlSource
    """Which part of the reader's answer: a struct attribute, an NVML_FI_* id (or `FieldRefs`),
    a GPM id (or `GpmLink`), or for `Reader.CALL` the `Call`."""
    convert: Convert
    scope: Scope
    default: bool
    """Enabled in the project's own collectors.csv."""


# NVML_FI_* ids from nvml.h.
FI_ECC_SBE_VOL_TOTAL = 3
FI_ECC_DBE_VOL_TOTAL = 4
FI_ECC_SBE_AGG_TOTAL = 5
FI_ECC_DBE_AGG_TOTAL = 6
FI_RETIRED_SBE = 29
FI_RETIRED_DBE = 30
FI_RETIRED_PENDING = 31
FI_PERF_POLICY_POWER = 74
FI_PERF_POLICY_THERMAL = 75
FI_PERF_POLICY_SYNC_BOOST = 76
FI_PERF_POLICY_BOARD_LIMIT = 77
FI_PERF_POLICY_LOW_UTILIZATION = 78
FI_PERF_POLICY_RELIABILITY = 79
FI_MEMORY_TEMP = 82
FI_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL = 38
FI_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL = 45
FI_NVLINK_REPLAY_ERROR_COUNT_TOTAL = 52
FI_NVLINK_RECOVERY_ERROR_COUNT_TOTAL = 59
FI_NVLINK_THROUGHPUT_DATA_TX = 138
FI_NVLINK_THROUGHPUT_DATA_RX = 139
NVLINK_SCOPE_ALL_LINKS = 0xFFFFFFFF

# NVML_GPM_METRIC_* ids from nvml.h.
GPM_GRAPHICS_UTIL = 1
GPM_SM_UTIL = 2
GPM_SM_OCCUPANCY = 3
GPM_ANY_TENSOR_UTIL = 5
GPM_DRAM_BW_UTIL = 10
GPM_FP64_UTIL = 11
GPM_FP32_UTIL = 12
GPM_FP16_UTIL = 13
GPM_PCIE_TX_PER_SEC = 20
GPM_PCIE_RX_PER_SEC = 21
GPM_NVLINK_TOTAL_RX_PER_SEC = 60
GPM_NVLINK_TOTAL_TX_PER_SEC = 61

P2P_BITMAP_PART = "bitmap"
"""DCGM_FI_DEV_NVLINK_P2P_STATUS (`Reader.P2P` on a GPU): the peers with NVLink P2P OK, as
bits by GPU index."""

NVLINK_BANDWIDTH_PART = "tx+rx"
"""DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL: TX + RX over all links, read in one field-value call."""

_G, _C, _L = MetricType.GAUGE, MetricType.COUNTER, MetricType.LABEL
_R, _V, _S = Reader, Convert, Scope


def _f(
    name: str,
    type_: MetricType,
    help_: str,
    unit: str,
    reader: Reader,
    part: NvmlSource,
    convert: Convert,
    scope: Scope,
    default: bool = True,
) -> FieldSpec:
    return FieldSpec(name, type_, help_, unit, reader, part, convert, scope, default)


CATALOG: tuple[FieldSpec, ...] = (
    _f("DCGM_FI_DEV_SM_CLOCK", _G, "SM clock frequency (in MHz).", "MHz",
       _R.CLOCK_SM, None, _V.NONE, _S.GPU),
    _f("DCGM_FI_DEV_MEM_CLOCK", _G, "Memory clock frequency (in MHz).", "MHz",
       _R.CLOCK_MEM, None, _V.NONE, _S.GPU),
    _f("DCGM_FI_DEV_MEMORY_TEMP", _G, "Memory temperature (in C).", "Celsius",
       _R.FIELD_VALUES, FI_MEMORY_TEMP, _V.TEMPERATURE, _S.GPU),
    _f("DCGM_FI_DEV_GPU_TEMP", _G, "GPU temperature (in C).", "Celsius",
       _R.TEMPERATURE, None, _V.TEMPERATURE, _S.GPU),
    _f("DCGM_FI_DEV_POWER_USAGE", _G, "Power draw (in W).", "W",
       _R.POWER, None, _V.MILLIWATT_TO_WATT, _S.GPU),
    _f("DCGM_FI_DEV_POWER_MGMT_LIMIT", _G, "Power management limit (in W).", "W",
       _R.POWER_LIMIT, None, _V.MILLIWATT_TO_WATT_FLOOR, _S.GPU),
    _f("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", _C,
       "Total energy consumption since boot (in mJ).", "mJ",
       _R.ENERGY, None, _V.NONE, _S.GPU),
    _f("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", _C, "Total number of PCIe retries.", "count",
       _R.PCIE_REPLAY, None, _V.NONE, _S.GPU),
    _f("DCGM_FI_DEV_GPU_UTIL", _G, "GPU utilization (in %).", "%",
       _R.UTILIZATION, "gpu", _V.NONE, _S.GPU_NO_MIG),
    _f("DCGM_FI_DEV_MEM_COPY_UTIL", _G, "Memory utilization (in %).", "%",
       _R.UTILIZATION, "memory", _V.NONE, _S.GPU_NO_MIG),
    _f("DCGM_FI_DEV_ENC_UTIL", _G, "Encoder utilization (in %).", "%",
       _R.ENCODER, None, _V.NONE, _S.GPU_NO_MIG),
    _f("DCGM_FI_DEV_DEC_UTIL", _G, "Decoder utilization (in %).", "%",
       _R.DECODER, None, _V.NONE, _S.GPU_NO_MIG),
    _f("DCGM_FI_DEV_XID_ERRORS", _G, "Value of the last XID error encountered.", "code",
       _R.XID_EVENTS, None, _V.NONE, _S.INSTANCE),
    _f("DCGM_EXP_XID_ERRORS_COUNT", _G,
       "Count of XID errors within the user-specified time window (see xid label).", "count",
       _R.XID_EVENTS, "window", _V.NONE, _S.INSTANCE),
    # Every XID since the exporter started, per entity and code (no series before one is seen).
    _f("DCGM_EXP_XID_ERRORS_TOTAL", _C, "Total XID errors observed since exporter start.",
       "count", _R.XID_EVENTS, "total", _V.NONE, _S.INSTANCE, default=False),
    _f("DCGM_FI_DEV_FB_FREE", _G, "Framebuffer memory free (in MiB).", "MiB",
       _R.MEMORY, "free", _V.BYTES_TO_MIB, _S.INSTANCE),
    _f("DCGM_FI_DEV_FB_USED", _G, "Framebuffer memory used (in MiB).", "MiB",
       _R.MEMORY, "used", _V.BYTES_TO_MIB, _S.INSTANCE),
    _f("DCGM_FI_DEV_FB_RESERVED", _G, "Framebuffer memory reserved (in MiB).", "MiB",
       _R.MEMORY, "reserved", _V.BYTES_TO_MIB, _S.INSTANCE),
    _f("DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", _C,
       "Total number of NVLink bandwidth counters for all lanes (cumulative KiB, TX + RX).",
       "KiB", _R.FIELD_VALUES, NVLINK_BANDWIDTH_PART, _V.NONE, _S.GPU),
    _f("DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL", _C,
       "Total number of NVLink flow-control CRC errors.", "count",
       _R.FIELD_VALUES, FI_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL, _V.NONE, _S.GPU),
    _f("DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL", _C,
       "Total number of NVLink data CRC errors.", "count",
       _R.FIELD_VALUES, FI_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL, _V.NONE, _S.GPU),
    _f("DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL", _C, "Total number of NVLink retries.",
       "count", _R.FIELD_VALUES, FI_NVLINK_REPLAY_ERROR_COUNT_TOTAL, _V.NONE, _S.GPU),
    _f("DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL", _C,
       "Total number of NVLink recovery errors.", "count",
       _R.FIELD_VALUES, FI_NVLINK_RECOVERY_ERROR_COUNT_TOTAL, _V.NONE, _S.GPU),
    _f("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", _C,
       "Number of remapped rows for uncorrectable errors", "rows",
       _R.REMAPPED_ROWS, "uncorrectable", _V.NONE, _S.GPU),
    _f("DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", _C,
       "Number of remapped rows for correctable errors", "rows",
       _R.REMAPPED_ROWS, "correctable", _V.NONE, _S.GPU),
    _f("DCGM_FI_DEV_ROW_REMAP_FAILURE", _G, "Whether remapping of rows has failed", "bool",
       _R.REMAPPED_ROWS, "failure", _V.NONE, _S.GPU),
    _f("DCGM_FI_DEV_ROW_REMAP_PENDING", _G, "Whether remapping of rows is pending", "bool",
       _R.REMAPPED_ROWS, "pending", _V.NONE, _S.GPU, default=False),
    _f("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", _C, "Total number of single-bit volatile ECC errors.",
       "count", _R.FIELD_VALUES, FI_ECC_SBE_VOL_TOTAL, _V.NONE, _S.GPU),
    _f("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", _C, "Total number of double-bit volatile ECC errors.",
       "count", _R.FIELD_VALUES, FI_ECC_DBE_VOL_TOTAL, _V.NONE, _S.GPU),
    _f("DCGM_FI_DEV_ECC_SBE_AGG_TOTAL", _C,
       "Total number of single-bit persistent ECC errors.", "count",
       _R.FIELD_VALUES, FI_ECC_SBE_AGG_TOTAL, _V.NONE, _S.GPU, default=False),
    _f("DCGM_FI_DEV_ECC_DBE_AGG_TOTAL", _C,
       "Total number of double-bit persistent ECC errors.", "count",
       _R.FIELD_VALUES, FI_ECC_DBE_AGG_TOTAL, _V.NONE, _S.GPU, default=False),
    _f("DCGM_FI_DEV_RETIRED_SBE", _C, "Total number of retired pages due to single-bit errors.",
       "pages", _R.FIELD_VALUES, FI_RETIRED_SBE, _V.NONE, _S.GPU, default=False),
    _f("DCGM_FI_DEV_RETIRED_DBE", _C, "Total number of retired pages due to double-bit errors.",
       "pages", _R.FIELD_VALUES, FI_RETIRED_DBE, _V.NONE, _S.GPU, default=False),
    _f("DCGM_FI_DEV_RETIRED_PENDING", _G, "Whether pages are pending retirement.", "bool",
       _R.FIELD_VALUES, FI_RETIRED_PENDING, _V.NONE, _S.GPU, default=False),
    _f("DCGM_FI_DEV_POWER_VIOLATION", _C,
       "Throttling duration due to power constraints (in ns, as NVML counts it).", "ns",
       _R.FIELD_VALUES, FI_PERF_POLICY_POWER, _V.NONE, _S.GPU, default=False),
    _f("DCGM_FI_DEV_THERMAL_VIOLATION", _C,
       "Throttling duration due to thermal constraints (in ns, as NVML counts it).", "ns",
       _R.FIELD_VALUES, FI_PERF_POLICY_THERMAL, _V.NONE, _S.GPU, default=False),
    _f("DCGM_FI_DEV_SYNC_BOOST_VIOLATION", _C,
       "Throttling duration due to sync-boost constraints (in ns, as NVML counts it).", "ns",
       _R.FIELD_VALUES, FI_PERF_POLICY_SYNC_BOOST, _V.NONE, _S.GPU, default=False),
    _f("DCGM_FI_DEV_BOARD_LIMIT_VIOLATION", _C,
       "Throttling duration due to board limit constraints (in ns, as NVML counts it).", "ns",
       _R.FIELD_VALUES, FI_PERF_POLICY_BOARD_LIMIT, _V.NONE, _S.GPU, default=False),
    _f("DCGM_FI_DEV_LOW_UTIL_VIOLATION", _C,
       "Throttling duration due to low utilization (in ns, as NVML counts it).", "ns",
       _R.FIELD_VALUES, FI_PERF_POLICY_LOW_UTILIZATION, _V.NONE, _S.GPU, default=False),
    _f("DCGM_FI_DEV_RELIABILITY_VIOLATION", _C,
       "Throttling duration due to reliability constraints (in ns, as NVML counts it).", "ns",
       _R.FIELD_VALUES, FI_PERF_POLICY_RELIABILITY, _V.NONE, _S.GPU, default=False),
    _f("DCGM_FI_DEV_CLOCKS_EVENT_REASONS", _G,
       "Current clock event reasons (bitmask of NVML clocks event reasons).", "bitmask",
       _R.CLOCK_EVENTS, None, _V.NONE, _S.GPU),
    _f("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", _G,
       "Current clock throttle reasons (older name of DCGM_FI_DEV_CLOCKS_EVENT_REASONS).",
       "bitmask", _R.CLOCK_EVENTS, None, _V.NONE, _S.GPU, default=False),
    # Read as the bitmask; the backend counts it per reason over a window (see
    # exporter/devices/clock_events.py), exported with `clock_event`, `window_size_in_ms`.
    _f("DCGM_EXP_CLOCK_EVENTS_COUNT", _G,
       "Count of clock events within the user-specified time window (see "
       "clock-events-count-window-size param).", "count",
       _R.CLOCK_EVENTS, None, _V.NONE, _S.GPU, default=False),
    # The same bitmask, edge-counted per reason since the exporter started (first poll: none).
    _f("DCGM_EXP_CLOCK_EVENTS_TOTAL", _C,
       "Total clock events observed since exporter start (edge-counted).", "count",
       _R.CLOCK_EVENTS, None, _V.NONE, _S.GPU, default=False),
    _f("DCGM_EXP_GPU_HEALTH_STATUS", _G, "Current DCGM-reported GPU health status.", "enum",
       _R.HEALTH, None, _V.NONE, _S.GPU, default=False),
    _f("DCGM_FI_DRIVER_VERSION", _L, "Driver Version", "",
       _R.DRIVER, None, _V.NONE, _S.GPU),
    _f("DCGM_FI_PROF_GR_ENGINE_ACTIVE", _G, "Ratio of time the graphics engine is active.",
       "ratio", _R.GPM, GPM_GRAPHICS_UTIL, _V.PERCENT_TO_RATIO, _S.INSTANCE),
    _f("DCGM_FI_PROF_SM_ACTIVE", _G,
       "The ratio of cycles an SM has at least 1 warp assigned.", "ratio",
       _R.GPM, GPM_SM_UTIL, _V.PERCENT_TO_RATIO, _S.INSTANCE),
    _f("DCGM_FI_PROF_SM_OCCUPANCY", _G,
       "The ratio of number of warps resident on an SM.", "ratio",
       _R.GPM, GPM_SM_OCCUPANCY, _V.PERCENT_TO_RATIO, _S.INSTANCE),
    _f("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", _G,
       "Ratio of cycles the tensor (HMMA) pipe is active.", "ratio",
       _R.GPM, GPM_ANY_TENSOR_UTIL, _V.PERCENT_TO_RATIO, _S.INSTANCE),
    _f("DCGM_FI_PROF_DRAM_ACTIVE", _G,
       "Ratio of cycles the device memory interface is active sending or receiving data.",
       "ratio", _R.GPM, GPM_DRAM_BW_UTIL, _V.PERCENT_TO_RATIO, _S.INSTANCE),
    _f("DCGM_FI_PROF_PIPE_FP64_ACTIVE", _G, "Ratio of cycles the fp64 pipes are active.",
       "ratio", _R.GPM, GPM_FP64_UTIL, _V.PERCENT_TO_RATIO, _S.INSTANCE),
    _f("DCGM_FI_PROF_PIPE_FP32_ACTIVE", _G, "Ratio of cycles the fp32 pipes are active.",
       "ratio", _R.GPM, GPM_FP32_UTIL, _V.PERCENT_TO_RATIO, _S.INSTANCE),
    _f("DCGM_FI_PROF_PIPE_FP16_ACTIVE", _G, "Ratio of cycles the fp16 pipes are active.",
       "ratio", _R.GPM, GPM_FP16_UTIL, _V.PERCENT_TO_RATIO, _S.INSTANCE),
    _f("DCGM_FI_PROF_PCIE_TX_BYTES", _G,
       "The rate of data transmitted over the PCIe bus - including both protocol headers and "
       "data payloads - in bytes per second.", "B/s",
       _R.GPM, GPM_PCIE_TX_PER_SEC, _V.MIB_PER_S_TO_BYTES_PER_S, _S.INSTANCE),
    _f("DCGM_FI_PROF_PCIE_RX_BYTES", _G,
       "The rate of data received over the PCIe bus - including both protocol headers and "
       "data payloads - in bytes per second.", "B/s",
       _R.GPM, GPM_PCIE_RX_PER_SEC, _V.MIB_PER_S_TO_BYTES_PER_S, _S.INSTANCE),
    _f("DCGM_FI_PROF_NVLINK_TX_BYTES", _G,
       "The rate of data transmitted over NVLink, not including protocol headers, in bytes "
       "per second.", "B/s",
       _R.GPM, GPM_NVLINK_TOTAL_TX_PER_SEC, _V.MIB_PER_S_TO_BYTES_PER_S, _S.INSTANCE),
    _f("DCGM_FI_PROF_NVLINK_RX_BYTES", _G,
       "The rate of data received over NVLink, not including protocol headers, in bytes per "
       "second.", "B/s",
       _R.GPM, GPM_NVLINK_TOTAL_RX_PER_SEC, _V.MIB_PER_S_TO_BYTES_PER_S, _S.INSTANCE),
)

BY_NAME: dict[str, FieldSpec] = {spec.name: spec for spec in CATALOG}

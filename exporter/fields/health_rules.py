"""DCGM_EXP_GPU_HEALTH_STATUS: DCGM's health rules, over the NVML values they come from.

dcgm-exporter asks DCGM's health module (`dcgmHealthCheck` with every watch set) and shows one
series per GPU and watch, PASS where DCGM reported no incident. DCGM computes the result in its
engine from fields it watches; here the same rules (DCGM 4.6's `DcgmHealthWatch.cpp`) are
stated over the NVML values those fields come from. `READ_SPECS` are the reads (planned like
any field, under hidden names); `exporter.devices.health` keeps their last minute and the XIDs
seen, and `evaluate` turns them into one incident per watch. A watch NVML cannot tell anything
about stays PASS, as DCGM's does when a field has no value.

`RULES` is also the table docs/metrics.md prints: each rule's watch, the NVML call feeding it,
the condition, the result and the DCGM error code.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from exporter.fields.catalog import (
    HANDLE,
    NVLINK_SCOPE_ALL_LINKS,
    Call,
    Convert,
    FieldRefs,
    FieldSpec,
    MetricType,
    NvmlSource,
    Reader,
    Scope,
)

HEALTH_FIELD = "DCGM_EXP_GPU_HEALTH_STATUS"
PASS, WARN, FAIL = 0, 10, 20
"""DCGM_HEALTH_RESULT_* (dcgm_structs.h)."""
RESULT_NAMES = {PASS: "PASS", WARN: "WARN", FAIL: "FAIL"}
WATCHES = ("PCIE", "NVLINK", "PMU", "MCU", "MEM", "SM", "INFOROM", "THERMAL", "POWER", "DRIVER",
           "ALL")
"""dcgm-exporter's `gpuHealthChecks`, in its order (gpu_health_collector.go @7ad58324)."""
WINDOW_S = 60.0
"""DCGM compares counters over the last minute when asked without a start time."""
NVLINK_STATE_LINKS = 18
"""DCGM_NVLINK_MAX_LINKS_PER_GPU: the links whose state DCGM's NVLink watch asks."""

_OK = "DCGM_FR_OK"


@dataclass(frozen=True, slots=True)
class HealthIncident:
    """One health watch's state on a GPU, as dcgm-exporter's DCGM_EXP_GPU_HEALTH_STATUS
    shows it: the DCGM health result and the error behind it."""

    watch: str
    """DCGM's watch name: PCIE, NVLINK, ..., ALL."""
    result: int
    """DCGM_HEALTH_RESULT_*: PASS 0, WARN 10, FAIL 20."""
    code: str
    """The DCGM error code's name, e.g. DCGM_FR_OK, DCGM_FR_VOLATILE_DBE_DETECTED."""
    severity: str
    """DCGM's severity of the code (NONE, MONITOR, ISOLATE, ...)."""
    category: str
    """DCGM's category of the code (NONE, HARDWARE_MEMORY, ...)."""

ERROR_META: Mapping[str, tuple[str, str]] = {
    "DCGM_FR_PCI_REPLAY_RATE": ("ISOLATE", "HARDWARE_PCIE"),
    "DCGM_FR_VOLATILE_DBE_DETECTED": ("ISOLATE", "HARDWARE_MEMORY"),
    "DCGM_FR_PENDING_PAGE_RETIREMENTS": ("RESET", "HARDWARE_MEMORY"),
    "DCGM_FR_RETIRED_PAGES_LIMIT": ("ISOLATE", "HARDWARE_MEMORY"),
    "DCGM_FR_CORRUPT_INFOROM": ("TRIAGE", "HARDWARE_OTHER"),
    "DCGM_FR_CLOCK_THROTTLE_THERMAL": ("MONITOR", "HARDWARE_THERMAL"),
    "DCGM_FR_CLOCK_THROTTLE_POWER": ("MONITOR", "HARDWARE_POWER"),
    "DCGM_FR_NVLINK_ERROR_THRESHOLD": ("ISOLATE", "HARDWARE_NVLINK"),
    "DCGM_FR_NVLINK_DOWN": ("TRIAGE", "HARDWARE_NVLINK"),
    "DCGM_FR_FAULTY_MEMORY": ("ISOLATE", "HARDWARE_MEMORY"),
    "DCGM_FR_NVLINK_CRC_ERROR_THRESHOLD": ("ISOLATE", "HARDWARE_NVLINK"),
    "DCGM_FR_NVLINK_ERROR_CRITICAL": ("ISOLATE", "HARDWARE_NVLINK"),
    "DCGM_FR_ROW_REMAP_FAILURE": ("RESET", "HARDWARE_MEMORY"),
    "DCGM_FR_UNCONTAINED_ERROR": ("ISOLATE", "SOFTWARE_XID"),
    "DCGM_FR_XID_ERROR": ("TRIAGE", "SOFTWARE_XID"),
    "DCGM_FR_FALLEN_OFF_BUS": ("ISOLATE", "HARDWARE_OTHER"),
    "DCGM_FR_GPU_RECOVERY_RESET": ("RESET", "HARDWARE_OTHER"),
    "DCGM_FR_GPU_RECOVERY_REBOOT": ("ISOLATE", "HARDWARE_OTHER"),
    "DCGM_FR_GPU_RECOVERY_DRAIN_P2P": ("RESET", "HARDWARE_OTHER"),
    "DCGM_FR_GPU_RECOVERY_DRAIN_RESET": ("RESET", "HARDWARE_OTHER"),
    "DCGM_FR_CONTAINED_ERROR": ("MONITOR", "SOFTWARE_XID"),
}
"""Severity and category of each code a rule reports: DCGM 4.6's `dcgmErrorMeta`
(dcgmlib/src/dcgm_errors.c), as dcgm-exporter reads it through `GetErrorMeta`. Codes 10 and
12 carry go-dcgm's names (DCGM 4.6 calls them DCGM_FR_CLOCKS_EVENT_THERMAL/_POWER)."""


# --- the NVML reads, planned under hidden names ------------------------------------------

PREFIX = HEALTH_FIELD + ":"
"""Starts the name of every health read in a poll's values."""
_PREFIX = PREFIX


def _read(key: str, reader: Reader, part: NvmlSource) -> FieldSpec:
    return FieldSpec(_PREFIX + key, MetricType.GAUGE, "", "", reader, part, Convert.NONE,
                     Scope.GPU, default=False)


def _call(function: str, *args: int | str) -> Call:
    return Call(function, (HANDLE, *args))


_READS: tuple[tuple[str, Reader, NvmlSource], ...] = (
    ("pcie_replays", Reader.PCIE_REPLAY, None),
    ("pcie_gen", Reader.CALL, _call("nvmlDeviceGetCurrPcieLinkGeneration")),
    ("pcie_width", Reader.CALL, _call("nvmlDeviceGetCurrPcieLinkWidth")),
    ("dbe_volatile", Reader.FIELD_VALUES, 4),  # NVML_FI_DEV_ECC_DBE_VOL_TOTAL
    ("retired_sbe", Reader.FIELD_VALUES, 29),  # NVML_FI_DEV_RETIRED_SBE
    ("retired_dbe", Reader.FIELD_VALUES, 30),  # NVML_FI_DEV_RETIRED_DBE
    ("retired_pending", Reader.FIELD_VALUES, 31),  # NVML_FI_DEV_RETIRED_PENDING
    ("row_remap_failure", Reader.REMAPPED_ROWS, "failure"),
    ("unrepairable", Reader.CALL,
     Call("nvmlDeviceGetUnrepairableMemoryFlag_v1", pick="bUnrepairableMemory")),
    ("inforom_valid", Reader.CALL, _call("nvmlDeviceValidateInforom")),
    ("thermal_violation", Reader.FIELD_VALUES, 75),  # NVML_FI_DEV_PERF_POLICY_THERMAL
    ("power_violation", Reader.FIELD_VALUES, 74),  # NVML_FI_DEV_PERF_POLICY_POWER
    ("nvlink_crc_flit", Reader.FIELD_VALUES, 38),  # NVML_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL
    ("nvlink_crc_data", Reader.FIELD_VALUES, 45),  # ..._CRC_DATA_ERROR_COUNT_TOTAL
    ("nvlink_replay", Reader.FIELD_VALUES, 52),  # ..._REPLAY_ERROR_COUNT_TOTAL
    ("nvlink_recovery", Reader.FIELD_VALUES, 59),  # ..._RECOVERY_ERROR_COUNT_TOTAL
    ("nvlink_dl_crc", Reader.FIELD_VALUES, 163),  # NVML_FI_DEV_NVLINK_ERROR_DL_CRC
    ("nvlink_dl_recovery", Reader.FIELD_VALUES, 162),  # ..._DL_RECOVERY
    ("nvlink_dl_replay", Reader.FIELD_VALUES, 161),  # ..._DL_REPLAY
    ("nvlink_recovery_ok", Reader.FIELD_VALUES,  # ..._COUNT_LINK_RECOVERY_SUCCESSFUL_EVENTS
     FieldRefs(((213, NVLINK_SCOPE_ALL_LINKS),))),
    ("nvlink_recovery_failed", Reader.FIELD_VALUES,  # ..._COUNT_LINK_RECOVERY_FAILED_EVENTS
     FieldRefs(((214, NVLINK_SCOPE_ALL_LINKS),))),
    ("recovery_action", Reader.FIELD_VALUES, 230),  # NVML_FI_DEV_GET_GPU_RECOVERY_ACTION
    *((f"nvlink_state_{link}", Reader.CALL, _call("nvmlDeviceGetNvLinkState", link))
      for link in range(NVLINK_STATE_LINKS)),
)

READ_SPECS: tuple[FieldSpec, ...] = tuple(_read(*r) for r in _READS)
"""What the plan reads for the health watches, on each GPU (a read NVML answers "not
supported" leaves the plan, as any field's does)."""


# --- the rules ---------------------------------------------------------------------------

Sample = Mapping[str, float]


@dataclass(frozen=True, slots=True)
class Facts:
    """What one GPU's rules look at: the samples of the last minute (oldest first), the XIDs
    seen since start, and whether MIG is on."""

    samples: tuple[Sample, ...]
    xids: frozenset[int]
    mig_on: bool

    def latest(self, key: str) -> float | None:
        """Return the newest value of this key in the samples, or None when no sample holds it."""
        for sample in reversed(self.samples):
            if (value := sample.get(_PREFIX + key)) is not None:
                return value
        return None

    def delta(self, key: str) -> float | None:
        """Return how much a counter moved over the window, between the first and the last sample
        that hold it."""
        held = [v for s in self.samples if (v := s.get(_PREFIX + key)) is not None]
        return abs(held[-1] - held[0]) if held else None


@dataclass(frozen=True, slots=True)
class Rule:
    """One DCGM health rule: the watch it belongs to, what it reads, when it fires, and the result
    and error code it then reports."""

    watch: str
    source: str
    """The NVML call the rule reads (for the docs table)."""
    condition: str
    result: int
    code: str
    fires: Callable[[Facts], bool]
    xid: int | None = None
    """The XID the rule looks for; None for a rule over NVML values."""


def _xid(watch: str, code: int, result: int, error: str, name: str) -> Rule:
    return Rule(watch, "nvmlEventSetWait_v2 (XID events)", f"XID {code} ({name}) seen",
                result, error, lambda f: code in f.xids, xid=code)


def _above(key: str, limit: float) -> Callable[[Facts], bool]:
    def fires(f: Facts) -> bool:
        value = f.latest(key)
        return value is not None and value > limit
    return fires


def _moved(key: str, at_least: float = 1.0) -> Callable[[Facts], bool]:
    def fires(f: Facts) -> bool:
        moved = f.delta(key)
        return moved is not None and moved >= at_least
    return fires


_PCIE_REPLAYS_PER_LANE_MINUTE = (0.15, 0.3, 0.48, 0.96, 1.92, 3.84)
"""DCGM's expected PCIe replays per lane per minute for generations 1 to 6 (a bit error rate
of 1e-12 at the lane speed)."""


def pcie_replay_limit(generation: int, width: int) -> int:
    """Return DCGM's limit of PCIe replays per minute: the rate per lane of the generation times
    the lanes, rounded up. Generations later than DCGM knows use the last one it knows."""
    rates = _PCIE_REPLAYS_PER_LANE_MINUTE
    return math.ceil(rates[min(max(generation, 1), len(rates)) - 1] * width)


def _pcie_replay_rate(f: Facts) -> bool:
    moved, gen, width = f.delta("pcie_replays"), f.latest("pcie_gen"), f.latest("pcie_width")
    if moved is None or not gen or width is None:
        return False
    return moved > pcie_replay_limit(int(gen), int(width))


def _crc_per_s(at_least: float, below: float = math.inf) -> Callable[[Facts], bool]:
    def fires(f: Facts) -> bool:
        moved = max(f.delta("nvlink_crc_flit") or 0.0, f.delta("nvlink_crc_data") or 0.0)
        return moved >= 1 and at_least <= moved / WINDOW_S < below
    return fires


def _link_down(f: Facts) -> bool:
    """Return whether a link that NVML reports disabled (rather than "not supported") is down.
    DCGM treats the links of a GPU in MIG mode as disabled, since NVML reports them down there."""
    if f.mig_on or not f.samples:
        return False
    last = f.samples[-1]
    return any(last.get(f"{_PREFIX}nvlink_state_{link}") == 0
               for link in range(NVLINK_STATE_LINKS))


def _retired_pages(f: Facts) -> bool:
    sbe, dbe = f.latest("retired_sbe"), f.latest("retired_dbe")
    if sbe is None and dbe is None:
        return False
    return (sbe or 0) + (dbe or 0) >= 63  # DCGM_LIMIT_MAX_RETIRED_PAGES


def _recovery(action: int) -> Callable[[Facts], bool]:
    def fires(f: Facts) -> bool:
        return f.latest("recovery_action") == action
    return fires


_FV = "nvmlDeviceGetFieldValues"
_NVLINK_COUNTS = f"{_FV}(NVML_FI_DEV_NVLINK_*_ERROR_COUNT_TOTAL)"

RULES: tuple[Rule, ...] = (
    _xid("PCIE", 38, WARN, "DCGM_FR_XID_ERROR", "PCIe bus error"),
    _xid("PCIE", 39, WARN, "DCGM_FR_XID_ERROR", "PCIe fabric error"),
    _xid("PCIE", 42, WARN, "DCGM_FR_XID_ERROR", "PCIe replay error"),
    Rule("PCIE", "nvmlDeviceGetPcieReplayCounter, nvmlDeviceGetCurrPcieLinkGeneration/Width",
         "replays in the last minute > ceil(per-lane limit of the generation x lanes)", WARN,
         "DCGM_FR_PCI_REPLAY_RATE", _pcie_replay_rate),
    Rule("NVLINK", _NVLINK_COUNTS, "CRC flit or data errors in the last minute, under 100/s",
         WARN, "DCGM_FR_NVLINK_ERROR_THRESHOLD", _crc_per_s(0.0, 100.0)),
    Rule("NVLINK", _NVLINK_COUNTS, "CRC flit or data errors at 100/s or more over the minute",
         FAIL, "DCGM_FR_NVLINK_CRC_ERROR_THRESHOLD", _crc_per_s(100.0)),
    Rule("NVLINK", _NVLINK_COUNTS, "replay or recovery errors in the last minute", FAIL,
         "DCGM_FR_NVLINK_ERROR_CRITICAL",
         lambda f: _moved("nvlink_replay")(f) or _moved("nvlink_recovery")(f)),
    _xid("NVLINK", 67, WARN, "DCGM_FR_XID_ERROR", "NVLink error"),
    _xid("NVLINK", 73, WARN, "DCGM_FR_XID_ERROR", "NVLink flow control error"),
    _xid("NVLINK", 121, WARN, "DCGM_FR_XID_ERROR", "C2C link corrected error"),
    _xid("NVLINK", 137, WARN, "DCGM_FR_XID_ERROR", "NVLink FLA privilege error"),
    Rule("NVLINK", "nvmlDeviceGetNvLinkState (links 0-17)",
         "a link reports disabled (down), MIG off", FAIL, "DCGM_FR_NVLINK_DOWN", _link_down),
    Rule("NVLINK", f"{_FV}(NVML_FI_DEV_NVLINK_ERROR_DL_CRC/_RECOVERY/_REPLAY)",
         "any DL CRC, recovery or replay error counted (before Blackwell)", FAIL,
         "DCGM_FR_NVLINK_ERROR_CRITICAL",
         lambda f: any(_above(k, 0)(f) for k in ("nvlink_dl_crc", "nvlink_dl_recovery",
                                                   "nvlink_dl_replay"))),
    Rule("NVLINK", f"{_FV}(NVML_FI_DEV_NVLINK_COUNT_LINK_RECOVERY_SUCCESSFUL_EVENTS)",
         "any successful link recovery counted (Blackwell)", WARN,
         "DCGM_FR_NVLINK_ERROR_CRITICAL", _above("nvlink_recovery_ok", 0)),
    Rule("NVLINK", f"{_FV}(NVML_FI_DEV_NVLINK_COUNT_LINK_RECOVERY_FAILED_EVENTS)",
         "any failed link recovery counted (Blackwell)", FAIL,
         "DCGM_FR_NVLINK_ERROR_CRITICAL", _above("nvlink_recovery_failed", 0)),
    _xid("MEM", 31, WARN, "DCGM_FR_XID_ERROR", "MMU error"),
    _xid("MEM", 32, WARN, "DCGM_FR_XID_ERROR", "PBDMA error"),
    _xid("MEM", 43, WARN, "DCGM_FR_XID_ERROR", "reset channel verification error"),
    _xid("MEM", 63, WARN, "DCGM_FR_PENDING_PAGE_RETIREMENTS", "pending page retirement"),
    _xid("MEM", 64, FAIL, "DCGM_FR_ROW_REMAP_FAILURE", "row remap failure"),
    Rule("MEM", f"{_FV}(NVML_FI_DEV_ECC_DBE_VOL_TOTAL)", "volatile double-bit ECC errors > 0",
         FAIL, "DCGM_FR_VOLATILE_DBE_DETECTED", _above("dbe_volatile", 0)),
    Rule("MEM", f"{_FV}(NVML_FI_DEV_RETIRED_PENDING)", "a page is pending retirement", WARN,
         "DCGM_FR_PENDING_PAGE_RETIREMENTS", _above("retired_pending", 0)),
    Rule("MEM", f"{_FV}(NVML_FI_DEV_RETIRED_SBE + _DBE)", "63 or more retired pages", FAIL,
         "DCGM_FR_RETIRED_PAGES_LIMIT", _retired_pages),
    Rule("MEM", "nvmlDeviceGetRemappedRows", "row remapping failed", FAIL,
         "DCGM_FR_ROW_REMAP_FAILURE", _above("row_remap_failure", 0)),
    Rule("MEM", "nvmlDeviceGetUnrepairableMemoryFlag_v1", "memory flagged unrepairable", FAIL,
         "DCGM_FR_FAULTY_MEMORY", _above("unrepairable", 0)),
    Rule("INFOROM", "nvmlDeviceValidateInforom", "answers CORRUPTED_INFOROM", WARN,
         "DCGM_FR_CORRUPT_INFOROM", lambda f: f.latest("inforom_valid") == 0),
    _xid("THERMAL", 60, WARN, "DCGM_FR_CLOCK_THROTTLE_THERMAL", "clocks held by temperature"),
    _xid("THERMAL", 61, WARN, "DCGM_FR_XID_ERROR", "EDPP power brake thermal limit"),
    _xid("THERMAL", 62, WARN, "DCGM_FR_XID_ERROR", "thermal violation"),
    Rule("THERMAL", f"{_FV}(NVML_FI_DEV_PERF_POLICY_THERMAL)",
         "thermal violation time grew in the last minute", WARN,
         "DCGM_FR_CLOCK_THROTTLE_THERMAL", _moved("thermal_violation")),
    _xid("POWER", 54, WARN, "DCGM_FR_XID_ERROR", "power state change"),
    _xid("POWER", 56, WARN, "DCGM_FR_XID_ERROR", "clock change"),
    _xid("POWER", 57, WARN, "DCGM_FR_CLOCK_THROTTLE_POWER", "clock change due to power"),
    _xid("POWER", 58, WARN, "DCGM_FR_XID_ERROR", "clock change due to thermal"),
    _xid("POWER", 78, WARN, "DCGM_FR_XID_ERROR", "power state forced change"),
    Rule("POWER", f"{_FV}(NVML_FI_DEV_PERF_POLICY_POWER)",
         "power violation time grew in the last minute", WARN,
         "DCGM_FR_CLOCK_THROTTLE_POWER", _moved("power_violation")),
    Rule("DRIVER", f"{_FV}(NVML_FI_DEV_GET_GPU_RECOVERY_ACTION)", "recovery action GPU_RESET",
         FAIL, "DCGM_FR_GPU_RECOVERY_RESET", _recovery(1)),
    Rule("DRIVER", f"{_FV}(NVML_FI_DEV_GET_GPU_RECOVERY_ACTION)", "recovery action NODE_REBOOT",
         FAIL, "DCGM_FR_GPU_RECOVERY_REBOOT", _recovery(2)),
    Rule("DRIVER", f"{_FV}(NVML_FI_DEV_GET_GPU_RECOVERY_ACTION)", "recovery action DRAIN_P2P",
         WARN, "DCGM_FR_GPU_RECOVERY_DRAIN_P2P", _recovery(3)),
    Rule("DRIVER", f"{_FV}(NVML_FI_DEV_GET_GPU_RECOVERY_ACTION)",
         "recovery action DRAIN_AND_RESET", FAIL, "DCGM_FR_GPU_RECOVERY_DRAIN_RESET",
         _recovery(4)),
    _xid("ALL", 48, FAIL, "DCGM_FR_XID_ERROR", "double-bit ECC error"),
    _xid("ALL", 74, FAIL, "DCGM_FR_XID_ERROR", "NVLink critical error"),
    _xid("ALL", 79, FAIL, "DCGM_FR_FALLEN_OFF_BUS", "GPU has fallen off the bus"),
    _xid("ALL", 94, WARN, "DCGM_FR_CONTAINED_ERROR", "contained error"),
    _xid("ALL", 95, FAIL, "DCGM_FR_UNCONTAINED_ERROR", "uncontained error"),
    _xid("ALL", 119, FAIL, "DCGM_FR_XID_ERROR", "GSP RPC timeout"),
    _xid("ALL", 120, FAIL, "DCGM_FR_XID_ERROR", "GSP error"),
    _xid("ALL", 140, FAIL, "DCGM_FR_XID_ERROR", "ECC unrecovered error"),
)
"""DCGM 4.6's health rules (modules/health/DcgmHealthWatch.cpp), per watch in DCGM's check
order. PMU, MCU and SM have none there: they always pass."""


def incident(watch: str, result: int = PASS, code: str = _OK) -> HealthIncident:
    """Return a watch's incident with its code's severity and category: NONE for DCGM_FR_OK, as
    dcgm-exporter writes it, and UNKNOWN for a code without metadata."""
    if code == _OK:
        return HealthIncident(watch, result, code, "NONE", "NONE")
    severity, category = ERROR_META.get(code, ("UNKNOWN", "UNKNOWN"))
    return HealthIncident(watch, result, code, severity, category)


def evaluate(facts: Facts) -> tuple[HealthIncident, ...]:
    """Return every watch's incident. dcgm-exporter keeps one incident per watch (the last one
    DCGM reports), and DCGM orders XIDs as an unordered map does, so here the worst result wins,
    and among equal results the later rule of `RULES`."""
    worst: dict[str, Rule] = {}
    for rule in RULES:
        if rule.fires(facts):
            held = worst.get(rule.watch)
            if held is None or rule.result >= held.result:
                worst[rule.watch] = rule
    return tuple(incident(w, worst[w].result, worst[w].code) if w in worst else incident(w)
                 for w in WATCHES)


def failing_codes(facts: Facts) -> frozenset[str]:
    """Return the DCGM codes of the rules over NVML values that fire now (WARN or FAIL).

    The rules that look for an XID are left out: an XID is a fault of its own, and DCGM's
    XID rules, which look at every XID since start, would never pass again. These are the
    conditions a fault can be derived from and seen to end."""
    return frozenset(rule.code for rule in RULES if rule.xid is None and rule.fires(facts))

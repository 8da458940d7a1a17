"""Faults the simulated node can be told to show, and the `--sim.fault` spec parser.

A spec is comma-separated: the kind first, then `key=value` items. Times (`at`, `for`,
`over`) are durations such as `30s`, `2m`, `500ms` or `1h`, measured from the simulated
node's start. Every parse error names the offending part and what was expected; the caller
adds which flag and spec it came from.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from exporter.durations import DURATION_HINT, parse_duration


@dataclass(frozen=True, slots=True)
class Window:
    """A span of simulated seconds from `start` up to, but not including, `end`; an `end` of None
    means it never ends."""

    start: float
    end: float | None = None

    def active(self, t: float) -> bool:
        """Return whether the window holds at t (it starts at `start` and ends before `end`)."""
        return self.start <= t and (self.end is None or t < self.end)

    def overlap(self, t0: float, t1: float) -> float:
        """Return the seconds of [t0, t1] covered by this window."""
        end = math.inf if self.end is None else self.end
        return max(0.0, min(t1, end) - max(t0, self.start))


@dataclass(frozen=True, slots=True)
class XidFault:
    """One XID event on a GPU (optionally attributed to a MIG GPU instance)."""

    gpu: int
    code: int
    at: float
    gpu_instance: int | None = None
    spec: str = ""


@dataclass(frozen=True, slots=True)
class LostFault:
    """A GPU and its MIG devices answer GPU_IS_LOST during the window."""

    gpu: int
    window: Window
    spec: str = ""


@dataclass(frozen=True, slots=True)
class NvmlDownFault:
    """nvmlInit fails with DRIVER_NOT_LOADED during the window, and an initialised library is
    dropped: every call answers UNINITIALIZED until nvmlInit succeeds again."""

    window: Window
    spec: str = ""


@dataclass(frozen=True, slots=True)
class GpmAdminOnlyFault:
    """The driver restricts profiling to administrators (RmProfilingAdminOnly=1): GPM
    sampling answers NO_PERMISSION on every GPU, while GPM support is still reported."""

    spec: str = ""


@dataclass(frozen=True, slots=True)
class FbRampFault:
    """Framebuffer used ramps linearly to `to_percent` of total over `over` seconds."""

    gpu: int
    at: float
    over: float
    to_percent: float
    gpu_instance: int | None = None
    spec: str = ""


@dataclass(frozen=True, slots=True)
class EccFault:
    """Volatile (and aggregate) ECC error counts grow by these amounts at `at`."""

    gpu: int
    at: float
    dbe: int = 0
    sbe: int = 0
    spec: str = ""


@dataclass(frozen=True, slots=True)
class RemapFault:
    """A row hit by an uncorrectable error: remap pending and/or failure from `at` on."""

    gpu: int
    at: float
    failure: bool = False
    pending: bool = False
    spec: str = ""


@dataclass(frozen=True, slots=True)
class ThermalFault:
    """A hardware thermal slowdown: the temperature sits at its slowdown limit and the clocks are
    cut."""

    gpu: int
    window: Window
    spec: str = ""


@dataclass(frozen=True, slots=True)
class PowerBrakeFault:
    """A hardware power brake slowdown: power and clocks are cut."""

    gpu: int
    window: Window
    spec: str = ""


@dataclass(frozen=True, slots=True)
class IdleFault:
    """Utilisation and GPM activity drop to 0 (allocated but idle); memory stays."""

    gpu: int
    window: Window
    gpu_instance: int | None = None
    spec: str = ""


@dataclass(frozen=True, slots=True)
class NvlinkFault:
    """One NVLink of a GPU takes CRC flit errors at `crc_per_s` from `at` until `until` (its
    replay, CRC data and recovery counters follow at fixed fractions)."""

    gpu: int
    link: int
    at: float
    crc_per_s: float
    until: float = math.inf
    spec: str = ""


@dataclass(frozen=True, slots=True)
class PcieReplayFault:
    """A burst of `count` PCIe replays at `at` (a marginal link)."""

    gpu: int
    at: float
    count: int
    spec: str = ""


@dataclass(frozen=True, slots=True)
class RetireFault:
    """Page retirement from `at`, as on a GPU before Ampere: `pages` retired (half for
    single-bit, half for double-bit errors) and/or one pending until the next reset."""

    gpu: int
    at: float
    pages: int = 0
    pending: bool = False
    spec: str = ""


@dataclass(frozen=True, slots=True)
class InforomFault:
    """The InfoROM check (nvmlDeviceValidateInforom) answers CORRUPTED_INFOROM during the window."""

    gpu: int
    window: Window
    spec: str = ""


@dataclass(frozen=True, slots=True)
class NvlinkDownFault:
    """One NVLink of a GPU reports disabled (down) during the window."""

    gpu: int
    link: int
    window: Window
    spec: str = ""


@dataclass(frozen=True, slots=True)
class RecoveryFault:
    """The driver asks for a recovery action (NVML_GPU_RECOVERY_ACTION_*: 1 GPU reset, 2 node
    reboot, 3 drain P2P, 4 drain and reset) during the window."""

    gpu: int
    action: int
    window: Window
    spec: str = ""


@dataclass(frozen=True, slots=True)
class ResetFault:
    """A GPU reset: the GPU is lost during the window, then back with its volatile ECC
    counts zeroed and no page left pending retirement."""

    gpu: int
    window: Window
    spec: str = ""


@dataclass(frozen=True, slots=True)
class ExitFault:
    """The processes running on a GPU exit at `at`: none is listed from then on."""

    gpu: int
    at: float
    spec: str = ""


RESET_LOST_S = 2.0
"""How long a reset keeps the GPU lost when the spec gives no `for`."""

Fault = (
    XidFault
    | LostFault
    | NvmlDownFault
    | GpmAdminOnlyFault
    | FbRampFault
    | EccFault
    | RemapFault
    | ThermalFault
    | PowerBrakeFault
    | IdleFault
    | NvlinkFault
    | PcieReplayFault
    | RetireFault
    | InforomFault
    | NvlinkDownFault
    | RecoveryFault
    | ResetFault
    | ExitFault
)

GRAMMAR: Mapping[str, str] = {
    "xid": "xid,code=79,gpu=0,at=10s[,gi=2]",
    "lost": "lost,gpu=1,at=20s[,for=30s]",
    "nvml-down": "nvml-down,at=0s[,for=20s]",
    "gpm-admin-only": "gpm-admin-only",
    "fb-ramp": "fb-ramp,gpu=2,at=5s,over=30s,to=97[,gi=3]",
    "ecc": "ecc,gpu=0,at=5s,dbe=1[,sbe=N]",
    "remap": "remap,gpu=0,at=5s,failure=1[,pending=1]",
    "thermal": "thermal,gpu=0,at=5s[,for=1m]",
    "power-brake": "power-brake,gpu=0,at=5s[,for=1m]",
    "idle": "idle,gpu=3,at=0s[,for=1m][,gi=2]",
    "nvlink": "nvlink,gpu=0,link=3,at=5s,rate=20[,for=1m]",
    "pcie-replay": "pcie-replay,gpu=0,at=5s,count=500",
    "retire": "retire,gpu=0,at=5s,pending=1[,pages=N]",
    "inforom": "inforom,gpu=0,at=5s[,for=1m]",
    "nvlink-down": "nvlink-down,gpu=0,link=2,at=5s[,for=1m]",
    "recovery": "recovery,gpu=0,at=5s,action=1[,for=1m]",
    "reset": "reset,gpu=0,at=30s[,for=2s]",
    "exit": "exit,gpu=0,at=20s",
}
"""One example per kind; square brackets mark optional keys."""

_REQUIRED: Mapping[str, tuple[str, ...]] = {
    "xid": ("code", "gpu", "at"),
    "lost": ("gpu", "at"),
    "nvml-down": ("at",),
    "gpm-admin-only": (),
    "fb-ramp": ("gpu", "at", "over", "to"),
    "ecc": ("gpu", "at"),
    "remap": ("gpu", "at"),
    "thermal": ("gpu", "at"),
    "power-brake": ("gpu", "at"),
    "idle": ("gpu", "at"),
    "nvlink": ("gpu", "link", "at", "rate"),
    "pcie-replay": ("gpu", "at", "count"),
    "retire": ("gpu", "at"),
    "inforom": ("gpu", "at"),
    "nvlink-down": ("gpu", "link", "at"),
    "recovery": ("gpu", "at", "action"),
    "reset": ("gpu", "at"),
    "exit": ("gpu", "at"),
}
_OPTIONAL: Mapping[str, tuple[str, ...]] = {
    "xid": ("gi",),
    "lost": ("for",),
    "nvml-down": ("for",),
    "gpm-admin-only": (),
    "fb-ramp": ("gi",),
    "ecc": ("dbe", "sbe"),
    "remap": ("failure", "pending"),
    "thermal": ("for",),
    "power-brake": ("for",),
    "idle": ("for", "gi"),
    "nvlink": ("for",),
    "pcie-replay": (),
    "retire": ("pending", "pages"),
    "inforom": ("for",),
    "nvlink-down": ("for",),
    "recovery": ("for",),
    "reset": ("for",),
    "exit": (),
}
_VALUE_HINTS: Mapping[str, str] = {
    "code": "an XID number such as 79",
    "gpu": "a GPU index such as 0",
    "gi": "a MIG GPU instance id such as 2",
    "at": DURATION_HINT,
    "for": DURATION_HINT,
    "over": DURATION_HINT,
    "to": "a percentage of the framebuffer between 0 and 100",
    "dbe": "a count of double-bit errors (0 or more)",
    "sbe": "a count of single-bit errors (0 or more)",
    "failure": "0 or 1",
    "pending": "0 or 1",
    "link": "an NVLink index such as 3",
    "rate": "CRC errors per second (more than 0)",
    "count": "a count of PCIe replays (1 or more)",
    "pages": "a count of retired pages (0 or more)",
    "action": "an NVML_GPU_RECOVERY_ACTION_* value from 1 to 4",
}


class _Items:
    """The key=value items of one spec, with errors that name the bad part."""

    def __init__(self, kind: str, items: dict[str, str]) -> None:
        self.kind = kind
        self.items = items

    def _fail(self, key: str, detail: str) -> ValueError:
        return ValueError(
            f"{key}={self.items[key]!r} {detail}; "
            f"expected {key}=<{_VALUE_HINTS[key]}> (e.g. {GRAMMAR[self.kind]})"
        )

    def _get(self, key: str, convert: Callable[[str], float], detail: str) -> float | None:
        raw = self.items.get(key)
        if raw is None:
            return None
        try:
            return convert(raw)
        except ValueError:
            raise self._fail(key, detail) from None

    def int_(self, key: str, *, low: int = 0, high: int | None = None) -> int | None:
        value = self._get(key, int, "is not a whole number")
        if value is None:
            return None
        if value < low or (high is not None and value > high):
            bound = f"at least {low}" if high is None else f"between {low} and {high}"
            raise self._fail(key, f"is out of range (must be {bound})")
        return int(value)

    def duration(self, key: str) -> float | None:
        return self._get(key, parse_duration, "is not a duration")

    def percent(self, key: str) -> float | None:
        value = self._get(key, float, "is not a number")
        if value is not None and not 0.0 <= value <= 100.0:
            raise self._fail(key, "is out of range")
        return value

    def window(self) -> Window:
        at = self.duration("at")
        assert at is not None  # required for every windowed kind
        length = self.duration("for")
        if length is not None and length <= 0:
            raise self._fail("for", "must be longer than 0")
        return Window(at, None if length is None else at + length)


def _split(spec: str) -> tuple[str, dict[str, str]]:
    parts = [p.strip() for p in spec.split(",")]
    kind = parts[0].lower()
    if not kind:
        raise ValueError(
            f"missing the fault kind; expected one of "
            f"{', '.join(GRAMMAR)} first (e.g. {GRAMMAR['xid']})"
        )
    if kind not in GRAMMAR:
        raise ValueError(
            f"unknown fault kind {parts[0]!r}; expected one of "
            f"{', '.join(GRAMMAR)}"
        )
    allowed = _REQUIRED[kind] + _OPTIONAL[kind]
    items: dict[str, str] = {}
    for part in parts[1:]:
        key, sep, value = part.partition("=")
        key = key.strip().lower()
        if not sep or not key or not value.strip():
            raise ValueError(
                f"item {part!r} is not key=value; expected e.g. "
                f"{GRAMMAR[kind]}"
            )
        if key not in allowed:
            raise ValueError(
                f"unknown key {key!r} for {kind} faults; expected keys: "
                f"{', '.join(allowed)} (e.g. {GRAMMAR[kind]})"
            )
        if key in items:
            raise ValueError(f"key {key!r} is given twice")
        items[key] = value.strip()
    missing = [k for k in _REQUIRED[kind] if k not in items]
    if missing:
        raise ValueError(
            f"{kind} faults need {', '.join(k + '=' for k in missing)}; "
            f"expected e.g. {GRAMMAR[kind]}"
        )
    return kind, items


def _ecc_fault(items: _Items, gpu: int, at: float, spec: str) -> Fault:
    dbe, sbe = items.int_("dbe") or 0, items.int_("sbe") or 0
    if "dbe" not in items.items and "sbe" not in items.items:
        raise ValueError(f"ecc faults need dbe= and/or sbe=; expected e.g. {GRAMMAR['ecc']}")
    return EccFault(gpu, at, dbe, sbe, spec)


def _remap_fault(items: _Items, gpu: int, at: float, spec: str) -> Fault:
    failure = items.int_("failure", high=1)
    pending = items.int_("pending", high=1)
    if failure is None and pending is None:
        raise ValueError(
            f"remap faults need failure= and/or pending=; expected e.g. {GRAMMAR['remap']}")
    return RemapFault(gpu, at, bool(failure), bool(pending), spec)


def _nvlink_fault(items: _Items, gpu: int, at: float, spec: str) -> Fault:
    link = items.int_("link", high=35)
    rate = items._get("rate", float, "is not a number")
    assert link is not None
    assert rate is not None
    if rate <= 0:
        raise items._fail("rate", "must be more than 0")
    window = items.window()
    return NvlinkFault(gpu, link, at, rate, math.inf if window.end is None else window.end,
                       spec)


def _pcie_replay_fault(items: _Items, gpu: int, at: float, spec: str) -> Fault:
    count = items.int_("count", low=1)
    assert count is not None
    return PcieReplayFault(gpu, at, count, spec)


def _retire_fault(items: _Items, gpu: int, at: float, spec: str) -> Fault:
    pages = items.int_("pages")
    pending = items.int_("pending", high=1)
    if pages is None and pending is None:
        raise ValueError(
            f"retire faults need pages= and/or pending=; expected e.g. {GRAMMAR['retire']}")
    return RetireFault(gpu, at, pages or 0, bool(pending), spec)


_COUNTER_FAULTS: Mapping[str, Callable[[_Items, int, float, str], Fault]] = {
    "ecc": _ecc_fault,
    "remap": _remap_fault,
    "nvlink": _nvlink_fault,
    "pcie-replay": _pcie_replay_fault,
    "retire": _retire_fault,
}
"""Faults that start counting at `at` on one GPU, parsed past `gpu` and `at`."""


def parse_fault(spec: str) -> Fault:
    """Parse one `--sim.fault` spec; ValueError names the bad part and the expected form."""
    kind, raw = _split(spec)
    items = _Items(kind, raw)
    gpu = items.int_("gpu")
    at = items.duration("at")
    if kind == "xid":
        assert gpu is not None
        assert at is not None
        code = items.int_("code", low=1)
        assert code is not None
        return XidFault(gpu, code, at, items.int_("gi"), spec)
    if kind == "nvml-down":
        return NvmlDownFault(items.window(), spec)
    if kind == "gpm-admin-only":
        return GpmAdminOnlyFault(spec)
    if kind == "fb-ramp":
        assert gpu is not None
        assert at is not None
        over = items.duration("over")
        to = items.percent("to")
        assert over is not None
        assert to is not None
        return FbRampFault(gpu, at, over, to, items.int_("gi"), spec)
    if kind == "exit":
        assert gpu is not None
        assert at is not None
        return ExitFault(gpu, at, spec)
    if kind in _COUNTER_FAULTS:
        assert gpu is not None
        assert at is not None
        return _COUNTER_FAULTS[kind](items, gpu, at, spec)
    assert gpu is not None
    return _windowed_fault(kind, items, gpu, spec)


def _windowed_fault(kind: str, items: _Items, gpu: int, spec: str) -> Fault:
    """Parse a fault of one GPU that holds over a window (`at`, optional `for`)."""
    window = items.window()
    if kind == "lost":
        return LostFault(gpu, window, spec)
    if kind == "reset":
        if window.end is None:
            window = Window(window.start, window.start + RESET_LOST_S)
        return ResetFault(gpu, window, spec)
    if kind == "thermal":
        return ThermalFault(gpu, window, spec)
    if kind == "power-brake":
        return PowerBrakeFault(gpu, window, spec)
    if kind == "inforom":
        return InforomFault(gpu, window, spec)
    if kind == "nvlink-down":
        link = items.int_("link", high=35)
        assert link is not None
        return NvlinkDownFault(gpu, link, window, spec)
    if kind == "recovery":
        action = items.int_("action", low=1, high=4)
        assert action is not None
        return RecoveryFault(gpu, action, window, spec)
    assert kind == "idle"
    return IdleFault(gpu, window, items.int_("gi"), spec)


def fault_gpu(fault: Fault) -> int | None:
    """Return the GPU a fault is about (None for node-wide faults)."""
    return None if isinstance(fault, NvmlDownFault | GpmAdminOnlyFault) else fault.gpu


def fault_gpu_instance(fault: Fault) -> int | None:
    """Return the GPU instance a fault is about, or None for faults about a whole GPU or the
    node."""
    if isinstance(fault, XidFault | FbRampFault | IdleFault):
        return fault.gpu_instance
    return None

"""The report's figures per pod over a window, and the recording rules that precompute them.

Every figure is a subquery over the window at a fixed resolution: the holdings are sampled
at each resolution step (aligned to multiples of it) and summed, so consecutive windows tile
time and their sums add up. The subquery's range is one millisecond short of the window:
Prometheus before 3.0 includes a point lying exactly on the window's start, which the
previous window already counted.

A recording rule is a figure over the rule group's interval (its *window*), so the sum of a
rule's samples over any range is the figure over that range.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from exporter.promql import holdings as h

Aggregation = Literal["sum", "max"]


@dataclass(frozen=True, slots=True)
class Figure:
    """One per-pod figure: its recording rule's name and how windows combine."""

    key: str
    rule: str
    combine: Aggregation
    """How the figure of a long range follows from its windows': summed, or the maximum."""
    help: str


ALLOCATED = Figure("allocated_gpu_hours", "pod:gpu_usage_allocated_gpu_hours:window",
                   "sum", "GPU-hours held (whole GPU 1, MIG by compute slices, shared split)")
ACTIVE = Figure("active_gpu_hours", "pod:gpu_usage_active_gpu_hours:window", "sum",
                "GPU-hours weighted by activity, by `activity_source`")
ACTIVITY_MAX = Figure("activity_max", "pod:gpu_usage_activity:max_window", "max",
                      "highest activity (0-1) of the pod's devices while held")
ENERGY = Figure("energy_kwh", "pod:gpu_usage_energy_kwh:window", "sum",
                "energy, the GPU's counter increase times the holding's share (kWh)")
FB_MIB_HOURS = Figure("fb_mib_hours", "pod:gpu_usage_framebuffer_mib_hours:window", "sum",
                      "framebuffer in use integrated over time (MiB-hours)")
HELD_HOURS = Figure("held_hours", "pod:gpu_usage_held_hours:window", "sum",
                    "hours the pod held any GPU")
FB_PEAK = Figure("fb_peak_mib", "pod:gpu_usage_framebuffer_mib:max_window", "max",
                 "most framebuffer the pod had in use at once (MiB)")

RULES: tuple[Figure, ...] = (ALLOCATED, ACTIVE, ACTIVITY_MAX, ENERGY, FB_MIB_HOURS,
                             HELD_HOURS, FB_PEAK)
IDLE_RULE = "pod:gpu_usage_idle_gpu_hours:window"
"""GPU-hours of rule windows in which the pod's activity stayed below the rules' idle
threshold (for dashboards; the report applies its own threshold to the figures above)."""
DEFAULT_IDLE_BELOW = 0.05
RULE_MARKER = "gpu_usage:rules_window_seconds"
"""Recorded with the rules, always: their window in seconds. The report reads it to know
whether, and since when, the rules cover a range."""
RULE_GROUP = "gpu-exporter.usage"


def duration(seconds: float) -> str:
    """A PromQL duration: whole hours, minutes or seconds where exact, else milliseconds."""
    ms = round(seconds * 1000)
    if ms <= 0:
        raise ValueError(f"a duration must be positive, not {seconds!r}s")
    for unit, size in (("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1000)):
        if ms % size == 0:
            return f"{ms // size}{unit}"
    return f"{ms}ms"


def _range(window_s: float, resolution_s: float) -> str:
    """A subquery range covering `window_s` back from its evaluation time, start excluded."""
    return f"[{round(window_s * 1000) - 1}ms:{duration(resolution_s)}]"


def pod_figure(figure: Figure, window_s: float, resolution_s: float) -> str:
    """`figure` per pod over the `window_s` before each evaluation time."""
    r = _range(window_s, resolution_s)
    hours = f"{resolution_s / 3600!r}"
    if figure is ALLOCATED:
        return h.per_pod(f"sum_over_time((\n{h.holder_share()}\n){r})") + f" * {hours}"
    if figure is ACTIVE:
        return h.per_pod(f"sum_over_time((\n{h.holder_active_share()}\n){r})") + f" * {hours}"
    if figure is ACTIVITY_MAX:
        return h.per_pod(f"max_over_time((\n{h.holder_activity()}\n){r})", "max",
                         drop=(h.ACTIVITY_SOURCE,))
    if figure is ENERGY:
        energy = h.holder_energy_mj(duration(resolution_s))
        return h.per_pod(f"sum_over_time((\n{energy}\n){r})") + " / 3.6e9"
    if figure is FB_MIB_HOURS:
        return (h.per_pod(f"sum_over_time((\n{h.holder_framebuffer_mib()}\n){r})")
                + f" * {hours}")
    if figure is HELD_HOURS:
        return f"count_over_time((\n{h.per_pod(h.holder_share())}\n){r}) * {hours}"
    if figure is FB_PEAK:
        return f"max_over_time((\n{h.per_pod(h.holder_framebuffer_mib())}\n){r})"
    raise ValueError(f"unknown figure {figure.key}")


def idle_pods(window_s: float, resolution_s: float, below: float) -> str:
    """Per pod, the GPU-hours of a window in which its activity stayed below `below` (0-1)
    the whole time it held its devices; absent for a pod that was busy at any point."""
    allocated = pod_figure(ALLOCATED, window_s, resolution_s)
    peak = pod_figure(ACTIVITY_MAX, window_s, resolution_s)
    return f"(\n{allocated}\n)\nand\n(\n{peak}\n< {below!r})"


def idle_pods_from_rules(window_s: float, below: float) -> str:
    """As `idle_pods`, over the recording rules (the window a multiple of theirs)."""
    span = f"[{round(window_s * 1000) - 1}ms]"
    return (f"sum_over_time({ALLOCATED.rule}{span})\nand\n"
            f"(max_over_time({ACTIVITY_MAX.rule}{span}) < {below!r})")


def recording_rules(window_s: float = 3600.0, resolution_s: float = 60.0,
                    idle_below: float = DEFAULT_IDLE_BELOW) -> list[dict[str, Any]]:
    """The rule groups (a `groups:` list) recording every figure per pod once a window.

    `window_s` must be a multiple of `resolution_s`."""
    if round(window_s * 1000) % round(resolution_s * 1000):
        raise ValueError(f"the rules' window {duration(window_s)} is not a multiple of their "
                         f"resolution {duration(resolution_s)}")
    rules: list[dict[str, Any]] = [{"record": RULE_MARKER, "expr": f"vector({window_s:g})"}]
    rules += [{"record": f.rule, "expr": pod_figure(f, window_s, resolution_s)} for f in RULES]
    rules.append({"record": IDLE_RULE, "expr": idle_pods(window_s, resolution_s, idle_below)})
    return [{"name": RULE_GROUP, "interval": duration(window_s), "rules": rules}]

"""The report's figures per pod over a window: what the raw-series report asks the server for
each window, and what the hourly recording rules record (`exporter.promql.rules`).

Each figure is the sum, over the pod's holdings, of a range function of its labelled series
(exclusive holdings) and of a per-step join over its allocation rows (shared holdings),
sampled at a fixed resolution (subquery steps aligned to multiples of it), so consecutive
windows tile time and their sums add up (`exporter.promql.holdings`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from exporter.promql import holdings as h
from exporter.promql.holdings import Sampling, duration

__all__ = ["ALLOCATED", "RULES", "Figure", "duration", "idle_pods", "pod_figure"]

Aggregation = Literal["sum", "max"]


@dataclass(frozen=True, slots=True)
class Figure:
    """One per-pod figure: its recording rule's name and how windows combine."""

    key: str
    rule: str
    combine: Aggregation
    """How the figure of a long range follows from its windows': summed, or the maximum."""
    help: str

    @property
    def group_rule(self) -> str:
        """Return the name of the rule that records this figure per group
        (`exporter.promql.rules`)."""
        return "group:" + self.rule.split(":", 1)[1]


ALLOCATED = Figure("allocated_gpu_hours", "pod:gpu_usage_allocated_gpu_hours:window",
                   "sum", "GPU-hours held (whole GPU 1, MIG by compute slices, shared split)")
ACTIVE = Figure("active_gpu_hours", "pod:gpu_usage_active_gpu_hours:window", "sum",
                "GPU-hours weighted by activity, by `activity_source`")
ACTIVITY_MAX = Figure("activity_max", "pod:gpu_usage_activity:max_window", "max",
                      "highest activity (0-1) of the pod's devices while held")
ENERGY = Figure("energy_kwh", "pod:gpu_usage_energy_kwh:window", "sum",
                "energy, the GPU's counter rise times the holding's share (kWh)")
FB_MIB_HOURS = Figure("fb_mib_hours", "pod:gpu_usage_framebuffer_mib_hours:window", "sum",
                      "framebuffer in use integrated over time (MiB-hours)")
HELD_HOURS = Figure("held_hours", "pod:gpu_usage_held_hours:window", "sum",
                    "hours the pod held any GPU")
FB_PEAK = Figure("fb_peak_mib", "pod:gpu_usage_framebuffer_mib:max_window", "max",
                 "most framebuffer the pod's devices had in use (MiB; per device's peak)")

RULES: tuple[Figure, ...] = (ALLOCATED, ACTIVE, ACTIVITY_MAX, ENERGY, FB_MIB_HOURS,
                             HELD_HOURS, FB_PEAK)
IDLE = Figure("idle_gpu_hours", "pod:gpu_usage_idle_gpu_hours:window", "sum",
              "allocated GPU-hours of windows whose activity stayed under the threshold")
IDLE_RULE = IDLE.rule
"""GPU-hours of rule windows in which the pod's activity stayed below the rules' idle
threshold (for dashboards and the report's default threshold)."""
DEFAULT_IDLE_BELOW = 0.05


def _either(exclusive: str, shared: str) -> str:
    return f"(\n{exclusive}\n)\nor\n(\n{shared}\n)"


def _per_pod(expr: str, aggregation: str = "sum", drop: tuple[str, ...] = ()) -> str:
    """Return `expr`'s holdings folded into one series per pod."""
    return f"{aggregation} without ({', '.join((h.FOLDED, *drop))}) (\n{expr}\n)"


def _allocated(s: Sampling) -> str:
    exclusive = h.rows_win(h.shared_by_slices(
        lambda selector: h.labelled("count_over_time", h.FRAMEBUFFER, s, selector=selector)), s)
    rows = h.shared(f"sum_over_time((\n{h.row_fraction()}\n){s.steps()})", s)
    return _per_pod(_either(exclusive, rows)) + f" * {s.step_hours}"


def _active(s: Sampling) -> str:
    exclusive = h.rows_win(h.shared_by_slices(
        lambda selector: h.labelled_activity("sum_over_time", s, selector)), s)
    rows = h.slice_share(h.rows_activity("sum_over_time", s))
    return _per_pod(_either(exclusive, rows)) + f" * {s.step_hours}"


def _activity_max(s: Sampling) -> str:
    exclusive = h.rows_win(h.labelled_activity("max_over_time", s), s)
    rows = h.rows_activity("max_over_time", s, part=False)
    return _per_pod(_either(exclusive, rows), "max", drop=(h.ACTIVITY_SOURCE,))


def _energy(s: Sampling) -> str:
    whole = h.rows_win(h.labelled_energy_mj(s), s)
    mig = h.slice_share(h.rows_win(
        h.holders_energy_mj(f"count without () ({h.MIG_HOLDINGS})", h.MIG_HOLDINGS, s), s))
    rows = h.shared(h.holders_energy_mj(h.row_fraction(), h.ALLOCATION, s), s)
    return _per_pod(f"(\n{whole}\n)\nor\n{_either(mig, rows)}") + " / 3.6e9"


def _framebuffer(fn: str, s: Sampling) -> str:
    exclusive = h.rows_win(h.labelled(fn, h.FRAMEBUFFER, s), s)
    return _either(exclusive, h.rows_over(fn, h.FRAMEBUFFER + h.UNLABELLED, s))


def _held(s: Sampling) -> str:
    """Return the steps held: the most of any one device, exclusive and shared holdings apart (a
    pod's devices are held together; a time-sliced device may pass from one to the other)."""
    exclusive = h.rows_win(h.labelled("count_over_time", h.FRAMEBUFFER, s), s)
    rows = h.carried(f"count_over_time({h.ALLOCATION}{s.steps()})", s)
    kinds = " or ".join(
        f'label_replace({_per_pod(part, "max")}, "{h.KIND}", "{kind}", "", "")'
        for part, kind in ((exclusive, "exclusive"), (rows, "shared")))
    return f"sum without ({h.KIND}) (\n{kinds}\n) * {s.step_hours}"


def pod_figure(figure: Figure, window_s: float, resolution_s: float) -> str:
    """Return `figure` per pod over the `window_s` before each evaluation time."""
    s = Sampling(window_s, resolution_s)
    if figure is ALLOCATED:
        return _allocated(s)
    if figure is ACTIVE:
        return _active(s)
    if figure is ACTIVITY_MAX:
        return _activity_max(s)
    if figure is ENERGY:
        return _energy(s)
    if figure is FB_MIB_HOURS:
        return _per_pod(_framebuffer("sum_over_time", s)) + f" * {s.step_hours}"
    if figure is HELD_HOURS:
        return _held(s)
    if figure is FB_PEAK:
        return _per_pod(_framebuffer("max_over_time", s))
    raise ValueError(f"unknown figure {figure.key}")


def idle_pods(window_s: float, resolution_s: float, below: float) -> str:
    """Return, per pod, the GPU-hours of a window in which its activity stayed below `below` (0-1)
    the whole time it held its devices; absent for a pod that was busy at any point."""
    allocated = pod_figure(ALLOCATED, window_s, resolution_s)
    peak = pod_figure(ACTIVITY_MAX, window_s, resolution_s)
    return f"(\n{allocated}\n)\nand\n(\n{peak}\n< {below!r})"


def idle_pods_from_rules(window_s: float, below: float) -> str:
    """Return what `idle_pods` returns, over the recording rules (the window a multiple of
    theirs)."""
    span = h.short_range(window_s)
    return (f"sum_over_time({ALLOCATED.rule}{span})\nand\n"
            f"(max_over_time({ACTIVITY_MAX.rule}{span}) < {below!r})")

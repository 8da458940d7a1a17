"""The report's PromQL: each figure aggregated server-side to one series per group (and per
model or activity source where the report needs the split), over raw series, over the
per-pod recording rules, or over the rules of the report's grouping.
"""

from __future__ import annotations

from dataclasses import dataclass

from exporter.promql import RULE_MARKER, Figure, duration, pod_figure
from exporter.promql.figures import IDLE, idle_pods, idle_pods_from_rules
from exporter.promql.holdings import short_range
from exporter.promql.rules import GROUP_BY, GROUP_LAG_WINDOWS, GROUP_MARKER, IDLE_MARKER


@dataclass(frozen=True, slots=True)
class Source:
    """Where the report's figures are read from: the exporter's raw series or the usage
    recording rules (per pod, or per group of one grouping), and the time unit they come in."""

    rules: bool
    unit_s: float
    """Raw series: the sampling resolution. Rules: their window. Steps and idle windows are
    whole multiples of it."""
    grouping: str | None = None
    """Rules recorded per group of this grouping are read (else the per-pod rules)."""
    idle_below: float | None = None
    """The idle threshold (0-1) the grouping's idle rules were recorded at."""

    @property
    def lag_s(self) -> float:
        """Return how long after its window a group rule's sample is recorded: group rules read
        the per-pod rules' samples of the window before, so queries for a window run this much
        later. 0 when the per-pod rules or raw series are read."""
        return self.unit_s * GROUP_LAG_WINDOWS if self.grouping else 0.0

    def idle_recorded(self, idle_window_s: float, below: float) -> bool:
        """Tell whether the grouping's idle rules hold idle time as asked: the same threshold,
        windows of the rules' own length."""
        return (self.grouping is not None and self.idle_below is not None
                and abs(self.idle_below - below) < 1e-9
                and abs(idle_window_s - self.unit_s) < 1e-6)

    def describe(self) -> str:
        """Return where the figures are read from in words, for the report's heading and JSON:
        raw series at their resolution, or recording rules with their window and grouping."""
        if self.rules:
            per = f"per {self.grouping}" if self.grouping else "per pod"
            return f"recording rules (window {duration(self.unit_s)}, {per})"
        return f"raw series (resolution {duration(self.unit_s)})"


def _grouped(rule: str, grouping: str) -> str:
    return f'{rule}{{{GROUP_BY}="{grouping}"}}'


def per_window(figure: Figure, by: str, window_s: float, source: Source) -> str:
    """Return `figure` over the `window_s` before each evaluation time (plus the source's lag), one
    series per `by`."""
    over = "max_over_time" if figure.combine == "max" else "sum_over_time"
    if source.grouping is not None:
        inner = f"{over}({_grouped(figure.group_rule, source.grouping)}{short_range(window_s)})"
    elif source.rules:
        inner = f"{over}({figure.rule}{short_range(window_s)})"
    else:
        inner = pod_figure(figure, window_s, source.unit_s)
    return f"{figure.combine} by ({by}) (\n{inner}\n)"


def idle(by: str, span_s: float, window_s: float, below: float, source: Source) -> str:
    """Return the GPU-hours held in idle windows of `window_s` (aligned to multiples of it) over the
    `span_s` before the evaluation time, one series per `by`; from the grouping's idle rules
    where they hold it (evaluated a lag later)."""
    if source.idle_recorded(window_s, below):
        assert source.grouping is not None
        return (f"sum by ({by}) (\nsum_over_time("
                f"{_grouped(IDLE.group_rule, source.grouping)}{short_range(span_s)})\n)")
    return f"sum by ({by}) (\nsum_over_time((\n{_idle_pods(window_s, below, source)}\n)" \
           f"{short_range(span_s, window_s)})\n)"


def top_idle_pods(top: int, span_s: float, window_s: float, below: float,
                  source: Source) -> str:
    """Return the `top` pods with the most idle GPU-hours over the `span_s` before the evaluation
    time; from the per-pod idle rule where the grouping's rules hold idle time as asked
    (evaluated a lag later)."""
    if source.idle_recorded(window_s, below):
        inner = f"sum_over_time({IDLE.rule}{short_range(span_s)})"
    else:
        inner = (f"sum_over_time((\n{_idle_pods(window_s, below, source)}\n)"
                 f"{short_range(span_s, window_s)})")
    return f"topk({top}, sum by (namespace, pod) (\n{inner}\n) > 0)"


def _idle_pods(window_s: float, below: float, source: Source) -> str:
    if source.rules:
        return idle_pods_from_rules(window_s, below)
    return idle_pods(window_s, source.unit_s, below)


def rule_coverage(range_s: float, grouping: str | None = None) -> tuple[str, str]:
    """Return the queries of the samples of the rules' marker in the range and of the rules' window:
    the per-pod rules', or a grouping's."""
    marker = RULE_MARKER if grouping is None else _grouped(GROUP_MARKER, grouping)
    return (f"count_over_time({marker}{short_range(range_s)})",
            f"max_over_time({marker}{short_range(range_s)})")


def idle_threshold(range_s: float) -> str:
    """Return the idle threshold the idle rules were recorded at over the range."""
    return f"max_over_time({IDLE_MARKER}{short_range(range_s)})"

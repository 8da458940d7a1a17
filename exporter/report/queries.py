"""The report's PromQL: each figure aggregated server-side to one series per group (and per
model or activity source where the report needs the split), over raw series or over the
recording rules.
"""

from __future__ import annotations

from dataclasses import dataclass

from exporter.promql import RULE_MARKER, Figure, duration, pod_figure
from exporter.promql.figures import idle_pods, idle_pods_from_rules


@dataclass(frozen=True, slots=True)
class Source:
    """Where the figures come from."""

    rules: bool
    unit_s: float
    """Raw series: the sampling resolution. Rules: their window. Steps and idle windows are
    whole multiples of it."""

    def describe(self) -> str:
        if self.rules:
            return f"recording rules (window {duration(self.unit_s)})"
        return f"raw series (resolution {duration(self.unit_s)})"


def _short(window_s: float) -> str:
    """A range selector one millisecond short of the window (see exporter.promql.figures)."""
    return f"[{round(window_s * 1000) - 1}ms]"


def per_window(figure: Figure, by: str, window_s: float, source: Source) -> str:
    """`figure` over the `window_s` before each evaluation time, one series per `by`."""
    if source.rules:
        over = "max_over_time" if figure.combine == "max" else "sum_over_time"
        inner = f"{over}({figure.rule}{_short(window_s)})"
    else:
        inner = pod_figure(figure, window_s, source.unit_s)
    return f"{figure.combine} by ({by}) (\n{inner}\n)"


def idle(by: str, span_s: float, window_s: float, below: float, source: Source,
         only_idle: bool = False) -> str:
    """GPU-hours held in idle windows of `window_s` (aligned to multiples of it) over the
    `span_s` before the evaluation time, one series per `by`."""
    inner = (idle_pods_from_rules(window_s, below) if source.rules
             else idle_pods(window_s, source.unit_s, below))
    expr = (f"sum by ({by}) (\nsum_over_time((\n{inner}\n)"
            f"[{round(span_s * 1000) - 1}ms:{duration(window_s)}])\n)")
    return f"{expr} > 0" if only_idle else expr


def rule_coverage(range_s: float) -> tuple[str, str]:
    """(samples of the rules' marker in the range, the rules' window)."""
    return (f"count_over_time({RULE_MARKER}{_short(range_s)})",
            f"max_over_time({RULE_MARKER}{_short(range_s)})")

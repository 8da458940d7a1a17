"""The usage recording rules: every figure per pod once a window, then per group.

One rule group, evaluated once a *window* (an hour), in two tiers:

1. **Per pod**: each figure of `exporter.promql.figures` over the window just ended
   (`pod:gpu_usage_*:window`), with the marker `gpu_usage:rules_window_seconds`. These read
   the exporter's series, and are where the ruler spends its time.
2. **Per group and idle**, chained from tier 1: each figure summed per group of every
   grouping asked for (`group:gpu_usage_*:window{gpu_usage_group_by="namespace"}`), the
   idle GPU-hours per pod and per group at the rules' threshold, and their markers. These
   read tier 1's samples *of the window before* (`previous`): a ruler that writes its
   results asynchronously (vmalert, any remote-write ruler) has not stored tier 1's latest
   samples when tier 2 runs, so a chain on the same evaluation would depend on timing; one
   window back it does not, on every engine. A tier-2 sample at time t thus holds the
   window ending at t minus one window (`GROUP_LAG_WINDOWS`).

A report of 90 days per namespace then reads one sample per namespace, figure and hour;
the per-pod series stay for `--group-by pod` and for groupings without rules of their own.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from exporter.promql.figures import (
    ACTIVE,
    ACTIVITY_MAX,
    ALLOCATED,
    DEFAULT_IDLE_BELOW,
    ENERGY,
    FB_MIB_HOURS,
    FB_PEAK,
    HELD_HOURS,
    IDLE,
    RULES,
    Figure,
    pod_figure,
)
from exporter.promql.holdings import ACTIVITY_SOURCE, duration

RULE_GROUP = "gpu-exporter.usage"
RULE_MARKER = "gpu_usage:rules_window_seconds"
"""Recorded with the per-pod rules, always: their window in seconds. The report reads it to
know whether, and since when, the rules cover a range."""
GROUP_MARKER = "gpu_usage:group_rules_window_seconds"
"""Recorded with each grouping's rules (label `gpu_usage_group_by`): their window."""
IDLE_MARKER = "gpu_usage:rules_idle_below"
"""The activity (0-1) under which the idle rules count a held window as idle."""
GROUP_BY = "gpu_usage_group_by"
"""Label naming the grouping of a group rule's series (`namespace`, `label:team`)."""
GROUP_LAG_WINDOWS = 1
"""Tier-2 samples hold the window this many windows before their timestamp."""
BY_MODEL = {ALLOCATED.key: "modelName", ACTIVE.key: ACTIVITY_SOURCE}
"""Figures kept apart by one more label per group: GPU-hours by model (prices), active
GPU-hours by activity source."""


@dataclass(frozen=True, slots=True)
class GroupRules:
    """A grouping the rules record: its name (as `--group-by` spells it) and the labels
    aggregated by."""

    name: str
    labels: tuple[str, ...]


def previous(rule: str, window_s: float) -> str:
    """Return tier 1's sample of the window before: the one sample of `rule` in a window-long range
    centred one window back. An evaluation up to half a window late or early still finds
    it: vmalert's queries run at VictoriaMetrics' `-search.latencyOffset` (30 s) before the
    time they are recorded at."""
    return f"last_over_time({rule}[{duration(window_s)}] offset {duration(window_s / 2)})"


def idle_pods_chained(window_s: float, below: float) -> str:
    """Return, per pod, the GPU-hours of the window before if the pod's activity stayed under
    `below` all through it."""
    return (f"{previous(ALLOCATED.rule, window_s)}\nand\n"
            f"({previous(ACTIVITY_MAX.rule, window_s)} < {below!r})")


def _labelled(expr: str, grouping: GroupRules) -> str:
    return f'label_replace(\n{expr},\n"{GROUP_BY}", "{grouping.name}", "", "")'


def group_figure(figure: Figure, grouping: GroupRules, window_s: float, below: float) -> str:
    """Return `figure` of the window before, per group of `grouping`."""
    extra = (BY_MODEL[figure.key],) if figure.key in BY_MODEL else ()
    by = ", ".join((*grouping.labels, *extra))
    if figure is IDLE:
        inner = idle_pods_chained(window_s, below)
    else:
        inner = previous(figure.rule, window_s)
    return _labelled(f"{figure.combine} by ({by}) (\n{inner}\n)", grouping)


GROUP_FIGURES: tuple[Figure, ...] = (ALLOCATED, ACTIVE, ENERGY, FB_MIB_HOURS, HELD_HOURS,
                                     FB_PEAK, IDLE)
"""What each grouping records: what the report reads per group (activity peaks only matter
per pod, for idleness)."""


def recording_rules(window_s: float = 3600.0, resolution_s: float = 60.0,
                    groupings: Sequence[GroupRules] = (),
                    idle_below: float = DEFAULT_IDLE_BELOW) -> list[dict[str, Any]]:
    """Return the rule groups (a `groups:` list): every figure per pod once a window, then per group
    of each of `groupings`. `window_s` must be a multiple of `resolution_s`."""
    if round(window_s * 1000) % round(resolution_s * 1000):
        raise ValueError(f"the rules' window {duration(window_s)} is not a multiple of their "
                         f"resolution {duration(resolution_s)}")
    names = [g.name for g in groupings]
    if len(set(names)) != len(names):
        raise ValueError(f"a grouping is named twice: {', '.join(names)}")
    rules: list[dict[str, Any]] = [{"record": RULE_MARKER, "expr": f"vector({window_s:g})"}]
    rules += [{"record": f.rule, "expr": pod_figure(f, window_s, resolution_s)} for f in RULES]
    rules += [{"record": IDLE_MARKER, "expr": f"vector({idle_below!r})"},
              {"record": IDLE.rule, "expr": idle_pods_chained(window_s, idle_below)}]
    for grouping in groupings:
        rules.append({"record": GROUP_MARKER,
                      "expr": _labelled(f"vector({window_s:g})", grouping)})
        rules += [{"record": f.group_rule,
                   "expr": group_figure(f, grouping, window_s, idle_below)}
                  for f in GROUP_FIGURES]
    return [{"name": RULE_GROUP, "interval": duration(window_s), "rules": rules}]

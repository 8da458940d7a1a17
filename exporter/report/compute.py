"""Runs the report's queries and turns their answers into pandas frames: one row per group
and window (`steps`), one row per group over the whole range (`totals`), and the pods that
sat idle longest (`idle_pods`).

Only aggregated series come back from the server (one per group and window), so the frames
are as small as the report, whatever the size of the fleet.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime

import pandas as pd

from exporter.options.groupings import Grouping, grouping
from exporter.promql import RULE_MARKER, duration
from exporter.promql import figures as f
from exporter.report import queries as q
from exporter.report.connection import ReportError
from exporter.report.prices import Prices
from exporter.report.prometheus_api import PrometheusClient, Series
from exporter.report.query_plan import (
    Call,
    aligned_windows,
    auto_step,
    calls,
    multiple_of,
    windows,
)

GROUP = "group"
TIME = "time"
STEP_FIGURES = (f.ALLOCATED, f.ACTIVE, f.ENERGY, f.FB_MIB_HOURS, f.HELD_HOURS, f.FB_PEAK)
MIXED = "mixed"
RULES_CHUNK_S = 30 * 86400.0


@dataclass(frozen=True, slots=True)
class ReportRequest:
    """Everything a report depends on besides the server."""

    start: float
    end: float
    group_by: str = "namespace"
    step_s: float | None = None
    resolution_s: float = 60.0
    source: str = "auto"
    """auto, rules or raw."""
    max_chunk_s: float | None = None
    """None: a day over raw series, 30 days over the rules."""
    idle_below_pct: float = 5.0
    idle_window_s: float = 1800.0
    top: int = 10
    prices: Prices | None = None
    grid_intensity_g_per_kwh: float | None = None


@dataclass
class UsageReport:
    """A finished report: what was asked, the range and steps it covers, where its figures were
    read from (raw series or recording rules), the totals per group, the figures per step and the
    idle pods, with the queries and points it took and notes for the reader."""

    request: ReportRequest
    start: float
    end: float
    step_s: float
    idle_window_s: float
    source: q.Source
    totals: pd.DataFrame
    """Index: group. Columns: see `columns.COLUMNS`."""
    steps: pd.DataFrame
    """Columns: time (window end, UTC), group, allocated/active GPU-hours, energy."""
    idle_pods: pd.DataFrame
    """Columns: namespace, pod, idle_gpu_hours; the longest idle first."""
    queries: int = 0
    points: int = 0
    notes: list[str] = field(default_factory=list)


Progress = Callable[[int, int], None]
"""(calls done, calls planned)."""


class _Runner:
    def __init__(self, client: PrometheusClient, planned: int, progress: Progress | None
                 ) -> None:
        self.client, self.planned, self.done, self.progress = client, planned, 0, progress

    def run(self, expr: str, call: Call, lag_s: float = 0.0) -> list[Series]:
        """Return `expr` over `call`'s times, evaluated `lag_s` later (rules recorded a lag after
        their window); the points come back at the times of the call."""
        if call.instant:
            result = self.client.query(expr, call.last + lag_s)
        else:
            result = self.client.query_range(expr, call.first + lag_s, call.last + lag_s,
                                             call.step_s)
        self.done += 1
        if self.progress is not None:
            self.progress(self.done, max(self.planned, self.done))
        if lag_s:
            result = [(labels, [(t - lag_s, v) for t, v in points]) for labels, points in result]
        return result


def _covered(client: PrometheusClient, range_s: float, at: float, grouping: str | None
             ) -> tuple[float, float] | None:
    """Return the samples and the window of the rules' marker over the range ending at `at`; None
    without one."""
    count_expr, window_expr = q.rule_coverage(range_s, grouping)
    counted, window = client.query(count_expr, at), client.query(window_expr, at)
    if not counted or not window:
        return None
    return counted[0][1][0][1], window[0][1][0][1]


def _choose_source(client: PrometheusClient, request: ReportRequest) -> q.Source:
    raw = q.Source(rules=False, unit_s=request.resolution_s)
    if request.source == "raw":
        return raw
    range_s = request.end - request.start
    found = _covered(client, range_s, request.end, None)
    if found is None:
        if request.source == "rules":
            raise ReportError(f"no recording rules found ({RULE_MARKER} is absent): load "
                              "alerts/gpu-exporter.usage-rules.yml or use --source raw")
        return raw
    samples, window_s = found
    if not (window_s > 0 and samples * window_s >= range_s - 2 * window_s):
        if request.source == "rules":
            raise ReportError(f"the recording rules cover only {samples * window_s / 3600:.1f} h "
                              f"of the {range_s / 3600:.1f} h asked for; use --source raw or "
                              "a later --start")
        return raw
    per_pod = q.Source(rules=True, unit_s=window_s)
    if request.group_by == "pod":
        return per_pod
    # The grouping's own rules, recorded one window later, where they cover the range too.
    grouped = q.Source(rules=True, unit_s=window_s, grouping=request.group_by)
    found = _covered(client, range_s, request.end + grouped.lag_s, request.group_by)
    if found is None or found[1] != window_s or found[0] * window_s < range_s - 2 * window_s:
        return per_pod
    below = client.query(q.idle_threshold(range_s), request.end + grouped.lag_s)
    return q.Source(rules=True, unit_s=window_s, grouping=request.group_by,
                    idle_below=below[0][1][0][1] if below else None)


def _records(series: list[Series], group: Grouping, value: str, extra: str | None
             ) -> list[dict[str, object]]:
    rows: list[dict[str, object]] = []
    for labels, points in series:
        key = group.key(labels)
        for t, v in points:
            row: dict[str, object] = {TIME: t, GROUP: key, value: v}
            if extra is not None:
                row[extra] = labels.get(extra, "")
            rows.append(row)
    return rows


def build_report(client: PrometheusClient, request: ReportRequest,
                 progress: Progress | None = None) -> UsageReport:
    """Return the report for a request `exporter.report.request.build` made (it checked the range
    and the window counts before any query)."""
    source = _choose_source(client, request)
    unit = source.unit_s
    group = grouping(request.group_by)
    start = request.start
    end = start + max(unit, (request.end - start) // unit * unit)
    step = multiple_of(request.step_s or auto_step(end - start, unit), unit)
    idle_window = multiple_of(request.idle_window_s, unit)
    max_chunk = request.max_chunk_s or (RULES_CHUNK_S if source.rules else 86400.0)
    step_calls = calls(windows(start, end, step), max_chunk)
    idle_ends = aligned_windows(start, end, idle_window)
    per_idle_call = max(1, int(max_chunk // idle_window))
    idle_calls = [idle_ends[i:i + per_idle_call] for i in range(0, len(idle_ends),
                                                                 per_idle_call)]
    idle_queries = (2 if request.top > 0 else 1) * len(idle_calls)
    runner = _Runner(client, len(step_calls) * len(STEP_FIGURES) + idle_queries, progress)
    below = request.idle_below_pct / 100.0
    by_extra = {f.ALLOCATED.key: "modelName", f.ACTIVE.key: "activity_source"}

    rows: dict[str, list[dict[str, object]]] = {}
    for figure in STEP_FIGURES:
        extra = by_extra.get(figure.key)
        by = group.by + (f", {extra}" if extra else "")
        for call in step_calls:
            answer = runner.run(q.per_window(figure, by, call.step_s, source), call,
                                source.lag_s)
            rows.setdefault(figure.key, []).extend(_records(answer, group, figure.key, extra))

    idle_rows: list[dict[str, object]] = []
    pod_rows: list[dict[str, object]] = []
    # Idle time recorded per group is read a lag later, like the group's other figures.
    idle_lag = source.lag_s if source.idle_recorded(idle_window, below) else 0.0
    for ends in idle_calls:
        span = ends[-1] - ends[0] + idle_window
        call = Call(ends[-1], ends[-1], idle_window)
        idle_rows += _records(runner.run(q.idle(group.by, span, idle_window, below, source),
                                         call, idle_lag), group, "idle_gpu_hours", None)
        if request.top <= 0:
            continue
        for labels, points in runner.run(
                q.top_idle_pods(request.top, span, idle_window, below, source), call, idle_lag):
            pod_rows.append({"namespace": labels.get("namespace", ""),
                             "pod": labels.get("pod", ""), "idle_gpu_hours": points[0][1]})

    steps, totals = _frames(rows, idle_rows, request, start, end)
    idle_pods = pd.DataFrame(pod_rows, columns=["namespace", "pod", "idle_gpu_hours"])
    if not idle_pods.empty:
        idle_pods = (idle_pods.groupby(["namespace", "pod"])["idle_gpu_hours"].sum()
                     .reset_index().sort_values("idle_gpu_hours", ascending=False)
                     .head(request.top).reset_index(drop=True))
    report = UsageReport(request, start, end, step, idle_window, source, totals, steps,
                         idle_pods, client.stats.queries, client.stats.points)
    report.notes += _notes(report, request)
    return report


def _when(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _frames(rows: dict[str, list[dict[str, object]]], idle_rows: list[dict[str, object]],
            request: ReportRequest, start: float, end: float
            ) -> tuple[pd.DataFrame, pd.DataFrame]:
    def frame(key: str, *extra: str) -> pd.DataFrame:
        return pd.DataFrame(rows.get(key, []), columns=[TIME, GROUP, key, *extra])

    allocated = frame(f.ALLOCATED.key, "modelName")
    if allocated.empty or allocated[f.ALLOCATED.key].sum() <= 0:
        raise ReportError(f"no GPU was held by any pod between {_when(start)} and "
                          f"{_when(end)}: is the exporter scraped by this server, with "
                          "Kubernetes attribution (-k) on, over that range?")
    active = frame(f.ACTIVE.key, "activity_source")
    sums = {key: frame(key).groupby([TIME, GROUP])[key].sum()
            for key in (f.ENERGY.key, f.FB_MIB_HOURS.key, f.HELD_HOURS.key)}
    steps = pd.concat([allocated.groupby([TIME, GROUP])[f.ALLOCATED.key].sum(),
                       active.groupby([TIME, GROUP])[f.ACTIVE.key].sum(),
                       sums[f.ENERGY.key]], axis=1).fillna(0.0).reset_index()
    steps[TIME] = pd.to_datetime(steps[TIME], unit="s", utc=True)

    totals = pd.DataFrame(index=pd.Index(sorted(allocated[GROUP].unique()), name=GROUP))
    totals["allocated_gpu_hours"] = allocated.groupby(GROUP)[f.ALLOCATED.key].sum()
    totals["active_gpu_hours"] = active.groupby(GROUP)[f.ACTIVE.key].sum()
    totals["activity_source"] = active.groupby(GROUP)["activity_source"].agg(
        lambda s: s.iloc[0] if s.nunique() == 1 else MIXED)
    idle = pd.DataFrame(idle_rows, columns=[TIME, GROUP, "idle_gpu_hours"])
    totals["idle_gpu_hours"] = idle.groupby(GROUP)["idle_gpu_hours"].sum()
    totals["energy_kwh"] = sums[f.ENERGY.key].groupby(level=GROUP).sum()
    peak = frame(f.FB_PEAK.key).groupby(GROUP)[f.FB_PEAK.key].max()
    totals["fb_peak_gib"] = peak / 1024
    totals["fb_mib_hours"] = sums[f.FB_MIB_HOURS.key].groupby(level=GROUP).sum()
    totals["held_hours"] = sums[f.HELD_HOURS.key].groupby(level=GROUP).sum()
    totals["fb_mean_gib"] = totals["fb_mib_hours"] / totals["held_hours"] / 1024
    numeric = [c for c in totals.columns if c != "activity_source"]
    totals[numeric] = totals[numeric].astype(float).fillna(0.0)
    totals["activity_source"] = totals["activity_source"].fillna("none")
    if request.grid_intensity_g_per_kwh is not None:
        totals["co2_kg"] = totals["energy_kwh"] * request.grid_intensity_g_per_kwh / 1000
    if request.prices is not None:
        hours = allocated.groupby([GROUP, "modelName"])[f.ALLOCATED.key].sum().reset_index()
        cost = request.prices.cost(zip(hours[GROUP].astype(str), hours["modelName"].astype(str),
                                       hours[f.ALLOCATED.key].astype(float), strict=True))
        totals["cost"] = pd.Series(cost, dtype=float)
    return steps, totals


def _notes(report: UsageReport, request: ReportRequest) -> list[str]:
    notes = [f"source: {report.source.describe()}",
             f"idle: activity below {request.idle_below_pct:g} % for whole "
             f"{duration(report.idle_window_s)} windows aligned to multiples of it"]
    source = report.source
    if source.rules and source.grouping is None and request.group_by != "pod":
        notes.append(f"no rules per {request.group_by} cover the range: the per-pod rules were "
                     f"read (`gpu-exporter generate rules --group-by {request.group_by}` "
                     "records them)")
    if report.end < request.end - 1e-6:
        notes.append(f"range shortened to whole {duration(report.source.unit_s)} steps: "
                     f"ends {_when(report.end)}")
    return notes

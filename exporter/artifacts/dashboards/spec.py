"""Plain descriptions of the dashboards, independent of any Grafana library.

Content modules describe panels with these types; `render` turns them into Grafana JSON.
Queries name DCGM fields directly, or a GPM measure through `exporter.promql.measures` (read from
NVML's counterpart on GPUs before Hopper). A query is kept when its fields are enabled (for a
measure: any of its sources), read from those only; a panel left without a query is dropped
(and a section left empty disappears) rather than shipped as "No data".
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from enum import Enum

from exporter.artifacts.fieldset import FieldSet

HOST = "Hostname, hostname"
"""The node label in a `by`/`on` list: dcgm-exporter 4.8.3 and later (and this exporter by
default) write `hostname`, 4.8.2 and earlier `Hostname`. Grouping by both keeps whichever a
series has, so one dashboard serves either fleet, and a fleet in the middle of the change."""
HOST_LEGEND = "{{Hostname}}{{hostname}}"
"""The node in a legend: a missing label draws empty, so this draws the one a series has."""

HOPPER_ONLY = "Needs Hopper or newer: older GPUs have no GPM, and NVML nothing in its place"
"""What a panel over GPM fields with no NVML counterpart says instead of "No data"."""
NO_ACTIVITY = ("No activity: MIG instances of GPUs before Hopper report none (NVML has no "
               "utilisation under MIG)")
"""What a panel over a GPM measure with an NVML fallback says when even that is absent."""
NO_XID = "No XID events on the selected GPUs"


class Kind(Enum):
    """The kind of Grafana panel a panel is drawn as: a time series, a single stat or a table."""

    TIMESERIES = "timeseries"
    STAT = "stat"
    TABLE = "table"


@dataclass(frozen=True, slots=True)
class Query:
    """One PromQL query of a panel, with the legend its series are drawn under and whether it is
    asked as an instant query (a table's or stat's current value) rather than over a range."""

    expr: str
    legend: str = ""
    instant: bool = False


@dataclass(frozen=True, slots=True)
class Panel:
    """One dashboard panel: its title, kind, queries, unit and description for the reader, its
    size on the grid, its axis limits, and what it says when there is no data."""

    title: str
    kind: Kind
    queries: tuple[Query, ...]
    unit: str
    description: str
    width: int = 12
    height: int = 8
    min: float | None = None
    max: float | None = None
    external: bool = False
    """Reads metrics from outside this exporter (kube-state-metrics, KEDA, the app)."""
    no_value: str | None = None
    """What the panel says instead of "No data": which source or setting its data needs."""

    def restricted_to(self, fields: FieldSet) -> Panel | None:
        """Return the panel with only the queries whose fields are enabled, their measures resolved
        (None if no query is left)."""
        resolved = ((q, fields.resolve(q.expr)) for q in self.queries)
        queries = tuple(replace(q, expr=expr) for q, expr in resolved if expr is not None)
        if not queries:
            return None
        return replace(self, queries=queries)


@dataclass(frozen=True, slots=True)
class Section:
    """A titled row of panels on a dashboard."""

    title: str
    panels: tuple[Panel, ...]


@dataclass(frozen=True, slots=True)
class Variable:
    """A dashboard variable (a drop-down such as job or node) whose values a query lists."""

    name: str
    label: str
    query: str
    """A Grafana variable query against the datasource variable: `label_values(...)`, or
    `query_result(...)` whose text `regex` reads the value from."""
    multi: bool = True
    regex: str = ""


@dataclass(frozen=True, slots=True)
class Dashboard:
    """One dashboard as written before rendering: its uid, file name, title, description, tags,
    variables and sections of panels."""

    uid: str
    filename: str
    title: str
    description: str
    tags: tuple[str, ...]
    variables: tuple[Variable, ...]
    sections: tuple[Section, ...] = field(default_factory=tuple)

    def restricted_to(self, fields: FieldSet) -> Dashboard:
        """Return the dashboard with only the panels whose fields `fields` enables, sections left
        empty dropped, so no panel ships that could only show "No data"."""
        kept: list[Section] = []
        for section in self.sections:
            restricted = (p.restricted_to(fields) for p in section.panels)
            panels = tuple(p for p in restricted if p is not None)
            if panels:
                kept.append(Section(section.title, panels))
        return Dashboard(
            self.uid, self.filename, self.title, self.description, self.tags,
            self.variables, tuple(kept),
        )


def sel(*matchers: str) -> str:
    """Return a PromQL label-matcher block of `matchers` joined by commas, such as
    `{job=~"$job", gpu=~"$gpu"}`, to put after a metric name."""
    return "{" + ", ".join(matchers) + "}"


JOB = 'job=~"$job"'
HOSTS = 'Hostname=~"$Hostname|", hostname=~"$Hostname|"'
"""The chosen nodes under either label: a series passes where the label it has matches and
the one it lacks (which reads as "") is let through by the empty alternative."""
GPUS = 'gpu=~"$gpu"'
GPU_LEGEND = f"{HOST_LEGEND} gpu {{{{gpu}}}}"
INSTANCE_LEGEND = f"{GPU_LEGEND} {{{{GPU_I_PROFILE}}}} {{{{GPU_I_ID}}}}"
"""Unique per MIG instance across nodes; for whole GPUs the MIG labels render empty."""

JOB_VAR = Variable("job", "Job", "label_values(gpu_exporter_build_info, job)")
HOST_VAR = Variable("Hostname", "Node",
                    f'query_result(count by ({HOST}) ({{__name__=~"DCGM_F.+", {JOB}}}))',
                    regex='/[Hh]ostname="([^"]*)"/')
"""The nodes under either label name (`label_values` reads one label only)."""
GPU_VAR = Variable("gpu", "GPU", f'label_values({{__name__=~"DCGM_F.+", {JOB}, {HOSTS}}}, gpu)')

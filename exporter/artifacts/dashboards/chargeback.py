"""(f) GPU chargeback: GPU-hours, activity, idle time and energy per namespace and pod over
the dashboard's time range - the figures of `gpu-exporter report`.

Every query reads the usage recording rules (`alerts/gpu-exporter.usage-rules.yml`), each
sample of which is one pod's figure over one rule window, so a sum over `$__range` is the
figure over the range, exactly as the report adds it up. Without those rules loaded the
dashboard stays empty.
"""

from __future__ import annotations

from exporter.artifacts.dashboards.spec import (
    JOB,
    JOB_VAR,
    Dashboard,
    Kind,
    Panel,
    Query,
    Section,
    Variable,
    sel,
)
from exporter.promql.figures import ACTIVE, ALLOCATED, DEFAULT_IDLE_BELOW, ENERGY, IDLE_RULE

STAT, TABLE, TS = Kind.STAT, Kind.TABLE, Kind.TIMESERIES
MINE = sel(JOB, 'namespace=~"$namespace"')

NAMESPACE_VAR = Variable("namespace", "Namespace",
                         f"label_values({ALLOCATED.rule}{sel(JOB)}, namespace)")


def over(rule: str, window: str = "$__range", by: str | None = None) -> str:
    """Return the query summing the usage recording rule `rule` over `window` for the chosen job
    and namespaces, per the labels in `by` or in one total, which is the figure over the range
    since each sample is one pod's figure over one rule window."""
    total = f"sum_over_time({rule}{MINE}[{window}])"
    return f"sum by ({by}) ({total})" if by else f"sum({total})"


IDLE_NOTE = (f"Idle: whole rule windows (an hour) in which the pod's activity stayed under "
             f"{DEFAULT_IDLE_BELOW:.0%}.")

TOTALS = Section("Over the selected range", (
    Panel("GPU-hours allocated", STAT, (Query(over(ALLOCATED.rule)),), "none",
          "Whole GPUs count 1, MIG instances their compute slices over the GPU's, shared GPUs "
          "are split between their holders.", width=6, height=4),
    Panel("GPU-hours active", STAT, (Query(over(ACTIVE.rule)),), "none",
          "Allocated GPU-hours weighted by graphics-engine activity (utilisation where no "
          "profiling metric exists).", width=6, height=4),
    Panel("Idle-allocated GPU-hours", STAT, (Query(over(IDLE_RULE)),), "none", IDLE_NOTE,
          width=6, height=4),
    Panel("Energy", STAT, (Query(over(ENERGY.rule)),), "kwatth",
          "GPU energy apportioned to pods by their share (MIG by slices).", width=6, height=4),
    Panel("Per namespace: GPU-hours allocated, active, idle; energy", TABLE, (
        Query(over(ALLOCATED.rule, by="namespace"), instant=True),
        Query(over(ACTIVE.rule, by="namespace"), instant=True),
        Query(over(IDLE_RULE, by="namespace"), instant=True),
        Query(over(ENERGY.rule, by="namespace"), instant=True),
    ), "none", "A: allocated GPU-hours, B: active GPU-hours, C: idle-allocated GPU-hours, "
               "D: kWh - the numbers of `gpu-exporter report --group-by namespace`.",
          width=12, height=10),
    Panel("Top idle-allocated pods", TABLE, (Query(
        f"topk(10, {over(IDLE_RULE, by='namespace, pod')} > 0)", instant=True),), "none",
          IDLE_NOTE, width=12, height=10),
))

DAILY = Section("Per day", (
    Panel("GPU-hours allocated per namespace (last 24 h)", TS, (Query(
        over(ALLOCATED.rule, "1d", "namespace"), "{{namespace}}"),), "none",
          "GPU-hours held in the 24 hours before each point.", min=0),
    Panel("Active share per namespace (last 24 h)", TS, (Query(
        f"{over(ACTIVE.rule, '1d', 'namespace')} / {over(ALLOCATED.rule, '1d', 'namespace')}",
        "{{namespace}}"),), "percentunit",
          "Active over allocated GPU-hours: how much of what a team holds it uses.", min=0,
          max=1),
    Panel("Energy per namespace (last 24 h)", TS, (Query(
        over(ENERGY.rule, "1d", "namespace"), "{{namespace}}"),), "kwatth",
          "GPU energy of the 24 hours before each point, apportioned by share.", width=24,
          min=0),
))

CHARGEBACK = Dashboard(
    uid="gpu-exporter-chargeback",
    filename="gpu-chargeback.json",
    title="GPU chargeback",
    description="GPU-hours allocated and active, idle-allocated GPU-hours and energy per "
                "namespace and pod, from the usage recording rules.",
    tags=("gpu-exporter", "gpu", "nvidia", "kubernetes", "chargeback"),
    variables=(JOB_VAR, NAMESPACE_VAR),
    sections=(TOTALS, DAILY),
)

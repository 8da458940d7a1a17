"""The Grafana dashboards that read dcgm-exporter's series, run unchanged (variables set as
Grafana sets them for "All") against a real Prometheus on every simulated generation:
Kubecost's pod-utilization dashboard (its GPU panel) and dcgm-exporter's own dashboard."""

from __future__ import annotations

import pytest

from tests.artifacts.test_dashboards import substitute
from tests.consumers.consumer_queries import (
    DCGM_EXPORTER_DASHBOARD,
    KUBECOST_DASHBOARD,
    dashboard_dcgm_queries,
    kubecost_variables,
)
from tests.consumers.nodes import GENERATIONS, Generation, Node

pytestmark = pytest.mark.e2e

NOT_BEFORE_HOPPER = "DCGM_FI_PROF_PIPE_"
"""Pipe activity: NVML measures it only through GPM, which needs Hopper or newer."""


def test_kubecost_gpu_panel_is_the_one_dcgm_query() -> None:
    assert [title for title, _ in dashboard_dcgm_queries(*KUBECOST_DASHBOARD)] == ["GPU Usage"]
    assert {"namespace", "pod", "container"} <= set(kubecost_variables())


@pytest.mark.parametrize("generation", GENERATIONS, ids=lambda g: g.id)
def test_kubecost_gpu_panel_draws_each_pod(generation: Generation,
                                           nodes: dict[str, Node]) -> None:
    """With "All" selected, and with one pod's namespace, pod and container selected: the
    panel draws a GR_ENGINE_ACTIVE line (a ratio) for that pod."""
    node = nodes[generation.id]
    ((_, expr),) = dashboard_dcgm_queries(*KUBECOST_DASHBOARD)
    everything = node.query(substitute(expr))
    held = [s["metric"] for s in everything if s["metric"].get("container")]
    assert held, f"{generation.id}: no line for any pod"
    chosen = held[0]
    one = node.query(substitute(expr, {k: chosen[k] for k in ("namespace", "pod", "container")}))
    assert one, (generation.id, chosen)
    assert all(s["metric"]["pod"] == chosen["pod"] for s in one)
    assert all(0.0 <= float(s["value"][1]) <= 1.0 for s in everything), generation.id


@pytest.mark.parametrize("generation", GENERATIONS, ids=lambda g: g.id)
def test_dcgm_exporter_dashboard_answers(generation: Generation,
                                         nodes: dict[str, Node]) -> None:
    node = nodes[generation.id]
    queries = dashboard_dcgm_queries(*DCGM_EXPORTER_DASHBOARD)
    assert len(queries) == 8
    answered = [(f"{title}: {expr}", bool(node.query(
        substitute(expr, {"instance": ".*", "gpu": ".*"})))) for title, expr in queries]
    excused = {f"{title}: {expr}" for title, expr in queries
               if not generation.hopper and NOT_BEFORE_HOPPER in expr}
    print(f"dcgm-exporter dashboard on {generation.profile}: "
          f"{sum(ok for _, ok in answered)}/{len(queries)} answer")
    assert [q for q, ok in answered if not ok and q not in excused] == [], generation.id
    assert [q for q, ok in answered if ok and q in excused] == [], (
        f"{generation.id}: excused panels now answer; drop the excuse")

"""End to end: the simulated node, the exporter and a real Prometheus with our rules.

One Prometheus scrapes two exporters every second: one with scripted faults (XID 79, a lost
GPU, framebuffer ramping to 97 %, NVLink CRC errors on one link) and a healthy one, both
with the simulated pods' Dynamo, llm-d and KAI labels (`--kubernetes.pod-labels inference`).
A static target stands in for the model servers (vLLM's and Dynamo's serving metrics for the
simulated inference pods), so the panels and KEDA queries that pair serving metrics with GPU
series by pod are checked too. Then every generated dashboard query, every query of
dcgm-exporter's own dashboard and every KEDA query runs against it, and the alerts are read
from /api/v1/alerts.

VictoriaMetrics scrapes the same targets, and vmalert evaluates the same alert rules and
the usage recording rules against it: every dashboard and KEDA query must answer there as
well (one set of queries for both engines), the rules must load and evaluate without an
error, and the scripted faults must raise their alerts in vmalert too.

Not checked here, because no such source runs in the test: panels reading kube-state-metrics
(`kube_*`) or KEDA's operator metrics (`keda_*`). That the dashboards hold up without the
serving metrics is checked on their structure (tests/artifacts/test_dashboards.py).
"""

from __future__ import annotations

import json
import time
import urllib.parse
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from exporter.artifacts.keda import Pool
from exporter.k8s.inference_labels import ROLE
from exporter.promql.measures import DRAM, GR_ENGINE, NVLINK_BYTES, Enabled, Measure, everything
from tests.artifacts.committed import (
    DASHBOARDS,
    EXTERNAL,
    committed_keda_queries,
    dashboard_targets,
    keda_queries,
    legends,
    variable_queries,
    variable_values,
)
from tests.artifacts.conftest import run_generate
from tests.artifacts.e2e_stack import (
    DEPLOYMENT,
    HOST_LABELS,
    NAMESPACE,
    POLL_S,
    VARIABLES,
    WAIT_S,
    Stack,
    running_stack,
)
from tests.artifacts.test_dashboards import substitute
from tests.support.exporter_process import http_get
from tests.support.paths import ROOT, fixture_file
from tests.support.victoriametrics import (
    dry_run,
)
from tests.support.wait import wait_until

pytestmark = pytest.mark.e2e

@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with running_stack(tmp_path_factory.mktemp("e2e")) as running:
        yield running


def test_every_dashboard_query_returns_data(stack: Stack, engine: str) -> None:
    stack = stack.on(engine)
    empty, clashes, checked = [], [], 0
    for path in DASHBOARDS:
        drawn: dict[str, list[str]] = {}
        for title, expr, legend in dashboard_targets(path):
            if EXTERNAL.search(expr):
                continue
            checked += 1
            series = stack.query(substitute(expr, VARIABLES))
            if not series:
                empty.append(f"{path.name} / {title}: {expr}")
            if legend not in ("", "__auto"):
                drawn.setdefault(title, []).extend(legends(legend, series))
        clashes += [f"{path.name} / {title}: {sorted(legends)}"
                    for title, legends in drawn.items() if len(set(legends)) != len(legends)]
        for name, expr, _ in variable_queries(path):
            if EXTERNAL.search(expr):
                continue
            if not stack.query(substitute(expr, VARIABLES)):
                empty.append(f"{path.name} / variable {name}: {expr}")
    assert checked > 80
    assert empty == [], "queries without data:\n" + "\n".join(empty)
    # Two nodes, MIG instances and shared GPUs: every line must still be told apart.
    assert clashes == [], "legends that repeat:\n" + "\n".join(clashes)


def test_the_node_variable_reads_either_host_label(stack: Stack, engine: str) -> None:
    """Node a writes `Hostname`, node b `hostname`: the node variable lists both, and
    choosing one keeps exactly that node's series in every dashboard's node filter."""
    stack = stack.on(engine)
    fleet = ROOT / "dashboards" / "gpu-fleet-overview.json"
    ((_, expr, regex),) = [v for v in variable_queries(fleet) if v[0] == "Hostname"]
    values = variable_values(regex, stack.query(substitute(expr, VARIABLES)))
    assert sorted(values) == sorted(HOST_LABELS)
    everyone = stack.query("DCGM_FI_DEV_POWER_USAGE")
    assert {s["metric"].get(label) for s in everyone for label in ("Hostname", "hostname")
            } - {None} == set(HOST_LABELS)
    for node, label in HOST_LABELS.items():
        for title, query, _ in dashboard_targets(fleet):
            if title != "Power draw":
                continue
            chosen = stack.query(substitute(query, {**VARIABLES, "Hostname": node}))
            assert chosen, (node, query)
            assert {s["metric"].get(label) for s in chosen} == {node}, (node, query)
            assert all(set(s["metric"]) & {"Hostname", "hostname"} == {label}
                       for s in chosen), (node, query)


def test_dcgm_exporter_dashboard_works_unchanged(stack: Stack, engine: str) -> None:
    stack = stack.on(engine)
    path = fixture_file("dcgm-exporter", "dcgm-exporter-dashboard.json")
    queries = [(title, expr) for title, expr, _ in dashboard_targets(path)]
    assert queries
    empty = [f"{title}: {expr}" for title, expr in queries
             if not stack.query(substitute(expr, {"instance": ".*", "gpu": ".*"}))]
    assert empty == [], "queries without data:\n" + "\n".join(empty)


@pytest.mark.parametrize("metric", ["util", "gr-engine", "fb", "dram"])
def test_generated_keda_query_returns_one_series(stack: Stack, metric: str, engine: str
                                                 ) -> None:
    stack = stack.on(engine)
    result = run_generate("keda", "--namespace", NAMESPACE, "--deployment", DEPLOYMENT,
                          "--metric", metric, "--target", "50")
    assert result.returncode == 0, result.stderr
    (query,) = keda_queries(yaml.safe_load(result.stdout))
    series = stack.query(query)
    assert len(series) == 1, (query, series)
    assert 0 <= float(series[0]["value"][1]) <= 100


@pytest.mark.parametrize(("role", "metric"), [("prefill", "gr-engine"), ("decode", "dram"),
                                              ("prefill", "fb"), ("decode", "gr-engine")])
def test_generated_role_pool_queries_return_one_series(stack: Stack, role: str,
                                                       metric: str, engine: str) -> None:
    """A prefill or decode pool: its GPU trigger and its queue trigger, each one series, over
    that role's pods only (Dynamo's and llm-d's alike)."""
    stack = stack.on(engine)
    result = run_generate("keda", "--namespace", NAMESPACE, "--deployment", f"llm-{role}",
                          "--role", role, "--metric", metric, "--target", "50",
                          "--queue-target", "4")
    assert result.returncode == 0, result.stderr
    queue, gpu = keda_queries(yaml.safe_load(result.stdout))
    for query in (queue, gpu):
        series = stack.query(query)
        assert len(series) == 1, (query, series)
    # The pool's selector takes exactly the pods whose labels give that role, Dynamo's and
    # llm-d's alike, with none of the other role's.
    everyone = stack.query(f'DCGM_FI_DEV_FB_USED{{namespace="{NAMESPACE}"}}')
    expected = {s["metric"]["pod"] for s in everyone if ROLE.value_of(s["metric"]) == role}
    pool = Pool(NAMESPACE, role=role).series("DCGM_FI_DEV_FB_USED")
    selected = {s["metric"]["pod"] for s in stack.query(pool)}
    assert selected == expected
    assert len(expected) >= 3
    stacks = {"llm_d_ai_role" in s["metric"] for s in stack.query(pool)}
    assert stacks == {True, False}


def test_example_keda_queries_return_at_most_one_series(stack: Stack, engine: str) -> None:
    """The committed examples, pointed at the simulated Deployment."""
    stack = stack.on(engine)
    for name, query in committed_keda_queries(NAMESPACE, DEPLOYMENT):
        series = stack.query(query)
        assert len(series) == 1, (name, query, series)


def _alerts_of(stack: Stack, instance: str) -> list[dict[str, Any]]:
    return [a for a in stack.alerts() if a["labels"].get("instance") == instance]


def test_scripted_faults_raise_their_alerts(stack: Stack, engine: str) -> None:
    stack = stack.on(engine)

    def raised() -> set[str]:
        found = set()
        for a in _alerts_of(stack, stack.faulty):
            labels = a["labels"]
            if labels["alertname"] == "GpuFellOffTheBus" and labels.get("xid") == "79" \
                    and labels.get("gpu") == "3":
                found.add("xid79")
            if labels["alertname"] == "GpuLost":
                found.add("lost")
            if labels["alertname"] == "GpuFramebufferNearFull" and labels.get("gpu") == "2":
                found.add("fb")
            if labels["alertname"] == "GpuNvlinkErrorsGrowing" and labels.get("gpu") == "4":
                found.add("nvlink")
        return found if found == {"xid79", "lost", "fb", "nvlink"} else set()

    wait_until(raised, WAIT_S, POLL_S,
               what="XID 79, lost GPU, framebuffer and NVLink error alerts")


def test_healthy_node_fires_nothing(stack: Stack, engine: str) -> None:
    stack = stack.on(engine)
    # The faulty exporter's alerts prove the rules are evaluated by now.
    wait_until(lambda: _alerts_of(stack, stack.faulty), WAIT_S, POLL_S,
               what="the faulty node's alerts")
    alerts = _alerts_of(stack, stack.healthy)
    firing = [a["labels"] for a in alerts if a["state"] == "firing"]
    pending = [a["labels"] for a in alerts
               if a["state"] == "pending" and a["labels"]["alertname"] != "GpuIdleButAllocated"]
    assert firing == []
    assert pending == []


def test_rules_load_and_evaluate_in_vmalert(stack: Stack) -> None:
    """Every alert and usage recording rule, as committed (MetricsQL parses them: vmalert
    -dryRun), then evaluated against VictoriaMetrics without an error."""
    committed = [ROOT / "alerts" / "gpu-exporter.rules.yml",
                 ROOT / "alerts" / "gpu-exporter.usage-rules.yml"]
    checked = dry_run(committed)
    assert checked.returncode == 0, checked.stdout + checked.stderr

    def evaluated() -> list[dict[str, Any]]:
        rules = stack.vmalert.rules()
        return rules if all(not r["lastEvaluation"].startswith("0001") for r in rules) else []

    rules = wait_until(evaluated, WAIT_S, POLL_S, what="every rule evaluated by vmalert")
    failed = [(r["group"], r["name"], r["lastError"]) for r in rules
              if r["lastError"] or r["health"] != "ok"]
    assert failed == []
    names = [r.get("record") or r.get("alert") for path in committed
             for group in yaml.safe_load(path.read_text())["groups"] for r in group["rules"]]
    assert sorted(r["name"] for r in rules) == sorted(names)


def test_prometheus_records_dcgm_counters_as_counters(stack: Stack) -> None:
    """Prometheus asks for OpenMetrics first; with default settings it gets text 0.0.4, so
    dcgm's counters keep their names and are recorded as counters, as from dcgm-exporter."""
    metric = "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"
    assert stack.query(metric)
    status, _, body = http_get(
        f"{stack.prometheus}/api/v1/metadata?" + urllib.parse.urlencode({"metric": metric}),
        timeout=10.0)
    assert status == 200
    assert {m["type"] for m in json.loads(body)["data"][metric]} == {"counter"}


def test_role_and_queue_panels_split_the_fleet(stack: Stack) -> None:
    """On the simulated pods, every per-role line is prefill or decode (both present), and
    every per-queue line one of the demo's KAI queues."""
    path = ROOT / "dashboards" / "gpu-inference-autoscaling.json"
    seen: dict[str, set[str]] = {"role": set(), "kai_scheduler_queue": set()}
    for title, expr, legend in dashboard_targets(path):
        label = next((name for name in seen if f"{{{{{name}}}}}" in legend), None)
        if label is None:
            continue
        values = {s["metric"].get(label, "") for s in stack.query(substitute(expr, VARIABLES))}
        expected = ({"prefill", "decode"} if label == "role"
                    else {"chat", "search", "research"})
        assert values, (title, legend, values)
        assert values <= expected, (title, legend, values)
        seen[label] |= values
    assert seen == {"role": {"prefill", "decode"},
                    "kai_scheduler_queue": {"chat", "search", "research"}}



def _by_labels(series: list[dict[str, Any]]) -> dict[tuple[tuple[str, str], ...], float]:
    return {tuple(sorted(s["metric"].items())): float(s["value"][1]) for s in series}


@pytest.mark.parametrize("measure", [GR_ENGINE, DRAM, NVLINK_BYTES], ids=lambda m: m.key)
def test_a_gpu_with_gpm_and_nvml_is_counted_once(stack: Stack, measure: Measure) -> None:
    """The H200s serve each GPM field and its NVML counterpart at once: the fallback reads
    every GPU and MIG instance once, from GPM, and adds nothing from NVML."""
    counterpart = measure.facts.nvml
    assert counterpart is not None
    node = f'{{instance="{stack.healthy}"}}'
    at = time.time() - 2  # one instant for every query, so all read the same samples

    def values(enabled: Enabled) -> dict[tuple[tuple[str, str], ...], float]:
        query = measure.promql(node, window="15s", enabled=enabled)
        assert query is not None
        return _by_labels(stack.query(query, at))

    from_gpm = values(lambda f: f in measure.facts.gpm)
    from_nvml = values(lambda f: f == counterpart.field)
    assert from_gpm
    assert from_nvml
    assert values(everything) == from_gpm

"""How Kubecost's bundled Prometheus and OpenCost's own collector find dcgm-exporter, proven
against the chart rendered by Helm's engine with its default values, and what OpenCost's
collector keeps of each node's scrape.

Kubecost (tests/fixtures/consumers/kubecost/dcgm-scrape-config.EXCERPT.yaml): an `endpoints`
job keeping targets whose pod labels `app`, `app.kubernetes.io/component` and
`app.kubernetes.io/name`, joined by `;`, match its regex; every endpoint port, path /metrics.
OpenCost (opencost/modules/collector-source/pkg/scrape/dcgm.go): running pods any of whose
labels `app`, `app.kubernetes.io/name`, `app.kubernetes.io/component` matches its regex,
scraped at `http://<pod IP>:9400/metrics`, keeping two metrics.
"""

from __future__ import annotations

import re
import textwrap
from typing import Any

import pytest

from tests.consumers.nodes import GENERATIONS, Generation, Node
from tests.support.paths import fixture_file

pytestmark = pytest.mark.e2e

DCGM_GO = ("consumers", "opencost", "modules", "collector-source", "pkg", "scrape", "dcgm.go")
RELEASE, NAMESPACE = "gpu-exporter", "monitoring"
"""A release name other than dcgm-exporter, so the match owes nothing to it."""


def kubecost_job() -> dict[str, Any]:
    """Return Kubecost's dcgm-exporter scrape job, parsed from the excerpt of its values."""
    import yaml

    text = fixture_file("consumers", "kubecost", "dcgm-scrape-config.EXCERPT.yaml").read_text()
    job_lines = text.split("# --- lines 939-952")[1].split("# --- line 2241")[0]
    (job,) = yaml.safe_load(textwrap.dedent(job_lines.split("\n", 1)[1]))
    assert job["job_name"] == "kubecost-dcgm-exporter"
    return dict(job)


def go_string(source: str, pattern: str) -> str:
    """Return the one match of `pattern`'s group in OpenCost's dcgm.go."""
    (found,) = re.findall(pattern, source)
    return str(found)


@pytest.fixture(scope="module")
def chart() -> dict[str, Any]:
    """The chart's DaemonSet and Service, rendered with default values."""
    from tests.chart._chart import objects, of_kind

    rendered = objects(name=RELEASE, namespace=NAMESPACE)
    (daemonset,) = of_kind(rendered, "DaemonSet")
    (service,) = of_kind(rendered, "Service")
    return {"daemonset": daemonset, "service": service}


def pod_labels(chart: dict[str, Any]) -> dict[str, str]:
    labels: dict[str, str] = chart["daemonset"]["spec"]["template"]["metadata"]["labels"]
    return labels


def test_service_endpoints_are_the_exporter_pods(chart: dict[str, Any]) -> None:
    """Kubecost's job discovers endpoints: a Service must select the exporter's pods, and
    each of its ports (all are scraped) must reach the metrics port."""
    selector = chart["service"]["spec"]["selector"]
    assert selector, "the Service selects nothing"
    assert selector.items() <= pod_labels(chart).items(), (selector, pod_labels(chart))
    (container,) = [c for c in chart["daemonset"]["spec"]["template"]["spec"]["containers"]
                    if c["name"] == "exporter"]
    metrics_port = {p["name"]: p["containerPort"] for p in container["ports"]}["metrics"]
    assert [p["targetPort"] for p in chart["service"]["spec"]["ports"]] in (
        [metrics_port], ["metrics"])


def test_kubecost_job_keeps_the_exporter_pods(chart: dict[str, Any]) -> None:
    (keep,) = [r for r in kubecost_job()["relabel_configs"] if r["action"] == "keep"]
    prefix = "__meta_kubernetes_pod_label_"
    names = [s.removeprefix(prefix) for s in keep["source_labels"]]
    assert names == ["app", "app_kubernetes_io_component", "app_kubernetes_io_name"]
    # Prometheus writes a label name's `.` and `/` as `_` in its discovery labels.
    by_meta_name = {re.sub(r"[^A-Za-z0-9_]", "_", k): v for k, v in pod_labels(chart).items()}
    joined = ";".join(by_meta_name.get(n, "") for n in names)
    # Prometheus anchors a relabel regex at both ends.
    assert re.fullmatch(keep["regex"], joined), (keep["regex"], joined)
    assert "metrics_path" not in kubecost_job()


def test_opencost_collector_finds_the_exporter_pods(chart: dict[str, Any]) -> None:
    source = fixture_file(*DCGM_GO).read_text()
    pattern = go_string(source, r'dcgmRegex = regexp\.MustCompile\("([^"]+)"\)')
    port = int(go_string(source, r"port:\s+(\d+),"))
    keys = re.findall(r'"(app[^"]*)",', source.split("func isDCGM")[1])
    assert keys == ["app", "app.kubernetes.io/name", "app.kubernetes.io/component"]
    # Go's MatchString finds the pattern anywhere in the value.
    assert any(re.search(pattern, pod_labels(chart).get(k, "")) for k in keys), pod_labels(chart)
    (container,) = [c for c in chart["daemonset"]["spec"]["template"]["spec"]["containers"]
                    if c["name"] == "exporter"]
    assert port in [p["containerPort"] for p in container["ports"]]
    assert "/metrics" in go_string(source, r'NewUrlTarget\(fmt\.Sprintf\("([^"]+)"')


@pytest.mark.parametrize("generation", GENERATIONS, ids=lambda g: g.id)
def test_opencost_collector_gets_its_two_metrics_with_pods(
        generation: Generation, nodes: dict[str, Node]) -> None:
    """The collector keeps only the metrics dcgm.go names (Go constants, the DCGM name without
    its underscores) and attributes them by namespace and pod: each must be on the page
    /metrics serves, on a GPU a pod holds."""
    from prometheus_client.parser import text_string_to_metric_families

    constants = re.findall(r"metric\.(DCGMFI\w+),", fixture_file(*DCGM_GO).read_text())
    assert len(constants) == 2
    families = {f.name: f for f in text_string_to_metric_families(
        nodes[generation.id].exporter.metrics())}
    for constant in constants:
        (name,) = [n for n in families if n.replace("_", "") == constant]
        held = [s for s in families[name].samples if s.labels.get("namespace")
                and s.labels.get("pod") and s.labels.get("container")]
        assert held, f"{generation.id}: {name} on no pod's GPU"

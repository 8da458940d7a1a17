"""What the monitors' scrape settings do to the exporter's labels, in a real Prometheus.

The Prometheus Operator turns a monitor endpoint into a scrape config whose targets carry
the scraped pod's own `namespace`, `pod` and `container`, then applies the endpoint's
`relabelings`. This test gives a real Prometheus targets labelled the same way, with the
endpoints' honorLabels and relabelings translated verbatim, scraping a local server that
serves one GPU held by a pod and one GPU held by nobody.
"""

from __future__ import annotations

import json
import subprocess
import threading
import urllib.parse
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.exporter_process import free_port
from tests.support.requirements import require_tool
from tests.support.wait import wait_until

from ._manifests import Obj, load_tree, of_kind

OBJECTS = [d.obj for d in load_tree().objects]

NODE = "gpu-node-1"
# The labels the operator gives each target: the scraped pod's own identity.
EXPORTER_TARGET = {
    "namespace": "gpu-exporter",
    "pod": "gpu-exporter-x7k2p",
    "container": "gpu-exporter",
}
SIDECAR_TARGET = {
    "namespace": "inference-demo",
    "pod": "llm-inference-7f9c-qz2lm",
    "container": "gpu-exporter",
}
_HELD = 'container="main",namespace="ml",pod="trainer-0"'
_TENANT = 'container="vllm",namespace="inference-demo",pod="llm-inference-7f9c-qz2lm"'
EXPOSITION = f"""\
# HELP DCGM_FI_DEV_GPU_UTIL GPU utilization (in %).
# TYPE DCGM_FI_DEV_GPU_UTIL gauge
DCGM_FI_DEV_GPU_UTIL{{gpu="0",UUID="GPU-held",Hostname="{NODE}",{_HELD}}} 93
DCGM_FI_DEV_GPU_UTIL{{gpu="1",UUID="GPU-idle",Hostname="{NODE}"}} 0
DCGM_FI_DEV_GPU_UTIL{{gpu="2",UUID="GPU-tenant",Hostname="{NODE}",{_TENANT}}} 41
"""
Series = dict[str, list[dict[str, str]]]

RELABEL_KEYS = {
    "sourceLabels": "source_labels",
    "targetLabel": "target_label",
    "regex": "regex",
    "replacement": "replacement",
    "separator": "separator",
    "modulus": "modulus",
    "action": "action",
}


def relabel_configs(endpoint: Obj) -> list[dict[str, Any]]:
    """A monitor endpoint's `relabelings` as Prometheus relabel_configs."""
    out = []
    for rule in endpoint.get("relabelings", []):
        unknown = set(rule) - set(RELABEL_KEYS)
        assert not unknown, f"relabeling keys this test cannot translate: {unknown}"
        converted = {RELABEL_KEYS[k]: v for k, v in rule.items()}
        if "action" in converted:
            converted["action"] = str(converted["action"]).lower()
        out.append(converted)
    return out


def scrape_job(
    name: str, endpoint: Obj, target: str, target_labels: dict[str, str], relabel: bool = True
) -> dict[str, Any]:
    return {
        "job_name": name,
        "scrape_interval": "1s",
        "scrape_timeout": "900ms",
        "metrics_path": endpoint.get("path", "/metrics"),
        "scheme": endpoint.get("scheme", "http"),
        "honor_labels": bool(endpoint.get("honorLabels", False)),
        "static_configs": [
            {
                "targets": [target],
                "labels": {**target_labels, "__meta_kubernetes_pod_node_name": NODE},
            }
        ],
        "relabel_configs": relabel_configs(endpoint) if relabel else [],
    }


class _Exposition(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = EXPOSITION.encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def exporter_address() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Exposition)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


@pytest.fixture(scope="module")
def series(exporter_address: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Series]:
    """job -> label sets of DCGM_FI_DEV_GPU_UTIL once every job has been scraped."""
    prometheus = require_tool("prometheus", "prometheus")
    sm_endpoint = of_kind(OBJECTS, "ServiceMonitor")[0]["spec"]["endpoints"][0]
    pm_endpoint = of_kind(OBJECTS, "PodMonitor")[0]["spec"]["podMetricsEndpoints"][0]
    jobs = [
        scrape_job("servicemonitor", sm_endpoint, exporter_address, EXPORTER_TARGET),
        scrape_job(
            "servicemonitor-unrelabelled",
            sm_endpoint,
            exporter_address,
            EXPORTER_TARGET,
            relabel=False,
        ),
        scrape_job("podmonitor", pm_endpoint, exporter_address, SIDECAR_TARGET),
    ]
    work = tmp_path_factory.mktemp("prometheus")
    config = work / "prometheus.yml"
    config.write_text(yaml.safe_dump({"global": {"scrape_interval": "1s"}, "scrape_configs": jobs}))
    port = free_port()
    log = (work / "prometheus.log").open("w")
    proc = subprocess.Popen(
        [
            prometheus,
            f"--config.file={config}",
            f"--storage.tsdb.path={work / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        yield _wait_for_jobs(port, {j["job_name"] for j in jobs}, proc, work / "prometheus.log")
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=15)
        log.close()


def _query(port: int, promql: str) -> list[dict[str, Any]]:
    url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
    with urllib.request.urlopen(url, timeout=5) as resp:
        result: list[dict[str, Any]] = json.load(resp)["data"]["result"]
        return result


def _wait_for_jobs(port: int, jobs: set[str], proc: subprocess.Popen[bytes], log: Path) -> Series:
    def scraped() -> Series | None:
        if proc.poll() is not None:
            pytest.fail(f"prometheus exited {proc.returncode}: {log.read_text()[-2000:]}")
        try:
            result = _query(port, "DCGM_FI_DEV_GPU_UTIL")
        except OSError:
            result = []
        by_job: dict[str, list[dict[str, str]]] = {}
        for sample in result:
            by_job.setdefault(sample["metric"].get("job", ""), []).append(sample["metric"])
        return by_job if all(len(by_job.get(job, [])) == 3 for job in jobs) else None

    try:
        return wait_until(scraped, 60, interval=0.25, what="every job scraped")
    except AssertionError as exc:
        pytest.fail(f"{exc}; prometheus log: {log.read_text()[-2000:]}")


def _one(series: Series, job: str, uuid: str) -> dict[str, str]:
    (found,) = [s for s in series[job] if s["UUID"] == uuid]
    return found


OWNER = ("namespace", "pod", "container")


def test_daemonset_keeps_the_owner_of_a_held_gpu(series: Series) -> None:
    held = _one(series, "servicemonitor", "GPU-held")
    assert {k: held.get(k) for k in OWNER} == {
        "namespace": "ml",
        "pod": "trainer-0",
        "container": "main",
    }
    assert not any(k.startswith("exported_") for k in held)
    assert held["node"] == NODE


def test_daemonset_leaves_an_unheld_gpu_without_owner(series: Series) -> None:
    idle = _one(series, "servicemonitor", "GPU-idle")
    assert {k: idle.get(k) for k in OWNER} == dict.fromkeys(OWNER)
    assert idle["node"] == NODE


def test_without_the_relabelings_the_exporter_pod_owns_idle_gpus(
    series: Series,
) -> None:
    """The failure the ServiceMonitor's labeldrop exists for."""
    idle = _one(series, "servicemonitor-unrelabelled", "GPU-idle")
    assert {k: idle.get(k) for k in OWNER} == EXPORTER_TARGET


def test_sidecar_keeps_the_inference_container_as_owner(series: Series) -> None:
    tenant = _one(series, "podmonitor", "GPU-tenant")
    assert {k: tenant.get(k) for k in OWNER} == {
        "namespace": "inference-demo",
        "pod": SIDECAR_TARGET["pod"],
        "container": "vllm",
    }
    assert "exported_container" not in tenant
    assert tenant["node"] == NODE


def test_sidecar_leaves_a_shared_gpu_without_owner(series: Series) -> None:
    """A series without owner labels (a shared GPU in pod scope) gets none from the
    sidecar's target: not container="gpu-exporter"."""
    shared = _one(series, "podmonitor", "GPU-idle")
    assert {k: shared.get(k) for k in OWNER} == dict.fromkeys(OWNER)
    assert shared["node"] == NODE

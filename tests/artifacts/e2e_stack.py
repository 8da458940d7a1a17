"""The artifacts' end-to-end stack (tests/artifacts/test_e2e.py): two simulated nodes'
exporters, the serving-metrics stand-in, a real Prometheus with the committed alert rules,
and VictoriaMetrics scraping the same targets with vmalert evaluating the same alert rules
and the usage rules.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import yaml

from exporter.devices.enumerate import enumerate_devices
from exporter.devices.filter import ALL_DEVICES
from exporter.simulated.kubelet import plan_allocations
from exporter.simulated.node import SimNvml
from tests.artifacts.serving_target import ServingTarget
from tests.support.exporter_process import ExporterProcess, http_get
from tests.support.paths import ROOT
from tests.support.prometheus import PrometheusProcess
from tests.support.victoriametrics import AlertSink, VictoriaMetricsProcess, VmalertProcess
from tests.support.wait import wait_until

NAMESPACE, DEPLOYMENT = "inference", "llm-inference"
"""Where the simulated kubelet puts its inference pods."""
FAULTS = ("xid,code=79,gpu=3,at=6s", "lost,gpu=6,at=6s", "fb-ramp,gpu=2,at=2s,over=8s,to=97",
          "nvlink,gpu=4,link=3,at=2s,rate=50")
VARIABLES = {"job": "gpu-exporter", "namespace": NAMESPACE, "deployment": DEPLOYMENT,
             "__rate_interval": "15s", "__range": "1h", "__interval": "1s",
             "__interval_ms": "1000"}
HOST_LABELS = {"gpu-node-a": "Hostname", "gpu-node-b": "hostname"}
"""Each node's host label (node b's by default)."""
WAIT_S = 90.0
POLL_S = 0.5


@dataclass
class Stack:
    prometheus: str
    """The query API's URL (Prometheus, or VictoriaMetrics in `on`'s copy)."""
    ruler: str
    """Where the alerts are read: Prometheus, or vmalert."""
    faulty: str
    healthy: str
    victoria: VictoriaMetricsProcess
    vmalert: VmalertProcess

    def on(self, engine: str) -> Stack:
        """The same stack, queried on `engine` (VictoriaMetrics, with vmalert's alerts)."""
        if engine == "prometheus":
            return self
        return Stack(self.victoria.url, self.vmalert.url, self.faulty, self.healthy,
                     self.victoria, self.vmalert)

    def query(self, expr: str, at: float | None = None) -> list[dict[str, Any]]:
        params = {"query": expr, **({"time": f"{at:.3f}"} if at is not None else {})}
        url = f"{self.prometheus}/api/v1/query?" + urllib.parse.urlencode(params)
        status, _, body = http_get(url, timeout=10.0)
        payload = json.loads(body)
        assert status == 200, (expr, payload)
        assert payload["status"] == "success", (expr, payload)
        result: list[dict[str, Any]] = payload["data"]["result"]
        return result

    def alerts(self) -> list[dict[str, Any]]:
        status, _, body = http_get(f"{self.ruler}/api/v1/alerts", timeout=10.0)
        assert status == 200
        alerts: list[dict[str, Any]] = json.loads(body)["data"]["alerts"] or []
        return alerts


def _test_rules(tmp: Path) -> Path:
    """The committed rules with `for` cut to 0s so alerts show within the test.

    GpuIdleButAllocated keeps its duration: "idle" only means something over time, and the
    simulated load legitimately dips for a moment.
    """
    rules = yaml.safe_load((ROOT / "alerts" / "gpu-exporter.rules.yml").read_text())
    for group in rules["groups"]:
        for rule in group["rules"]:
            if rule["alert"] != "GpuIdleButAllocated":
                rule["for"] = "0s"
    path = tmp / "rules.yml"
    path.write_text(yaml.safe_dump(rules))
    return path


def _usage_rules(tmp: Path) -> Path:
    """The committed usage rules, evaluated every 5 s rather than hourly (vmalert starts a
    group at a random point of its first interval)."""
    rules = yaml.safe_load((ROOT / "alerts" / "gpu-exporter.usage-rules.yml").read_text())
    for group in rules["groups"]:
        group["interval"] = "5s"
    path = tmp / "usage-rules.yml"
    path.write_text(yaml.safe_dump(rules))
    return path


@contextlib.contextmanager
def running_stack(tmp: Path) -> Iterator[Stack]:
    """The stack of the module's docstring, stopped on exit."""
    status = subprocess.run([sys.executable, "-m", "exporter", "serve", "--help"], cwd=ROOT,
                            capture_output=True, text=True, timeout=60)
    assert status.returncode == 0, f"the exporter CLI does not start:\n{status.stderr}"
    common = ["--backend", "sim", "--sim.profile", "h200-mig", "-c", "1s", "--sim.kubelet",
              "--kubernetes.pod-labels", "inference"]
    exporters: list[ExporterProcess] = []
    prometheus: PrometheusProcess | None = None
    serving = ServingTarget(_model_server_pods()).start()
    victoria: VictoriaMetricsProcess | None = None
    vmalert: VmalertProcess | None = None
    sink = AlertSink()
    try:
        # Node a writes 4.8.2's `Hostname`, node b the default `hostname` (4.8.3 and later):
        # every artifact is read over a fleet with both at once.
        exporters.append(ExporterProcess(
            [*common, "--hostname-label", HOST_LABELS["gpu-node-a"],
             *(a for f in FAULTS for a in ("--sim.fault", f))],
            env={"NODE_NAME": "gpu-node-a"}))
        exporters.append(ExporterProcess(common, env={"NODE_NAME": "gpu-node-b"}))
        for e in exporters:
            e.wait_ready()
        scrape_configs: list[dict[str, Any]] = [
            {"job_name": "gpu-exporter", "static_configs": [
                {"targets": [f"127.0.0.1:{e.port}" for e in exporters]}]},
            # Keeps the served namespace/pod, as a PodMonitor's target labels would be.
            {"job_name": "serving", "honor_labels": True, "static_configs": [
                {"targets": [f"127.0.0.1:{serving.port}"]}]},
        ]
        config = {
            "global": {"scrape_interval": "1s", "scrape_timeout": "1s",
                       "evaluation_interval": "1s"},
            "rule_files": [str(_test_rules(tmp))],
            "scrape_configs": scrape_configs,
        }
        victoria = VictoriaMetricsProcess(tmp / "victoria-metrics", scrape_configs).wait_ready()
        vmalert = VmalertProcess(tmp / "vmalert", [_test_rules(tmp), _usage_rules(tmp)],
                                 victoria.url, remote_write=victoria.url,
                                 notifier=sink.url).wait_ready()
        prometheus = PrometheusProcess(tmp / "prometheus", config).wait_ready()
        s = Stack(prometheus.url, prometheus.url,
                  f"127.0.0.1:{exporters[0].port}", f"127.0.0.1:{exporters[1].port}",
                  victoria, vmalert)
        # Enough samples for rate windows: both targets up for a while.
        wait_until(lambda: len(s.query("up == 1")) == 3, WAIT_S, POLL_S,
                   what="both exporters and the serving target scraped")
        for server in (s, s.on("victoria-metrics")):
            wait_until(partial(server.query, "min(count_over_time(up[15s])) >= 12"),
                       60.0, POLL_S, what=f"15s of samples at {server.prometheus}")
        yield s
    finally:
        if vmalert is not None:
            vmalert.stop()
        if victoria is not None:
            victoria.stop()
        sink.stop()
        if prometheus is not None:
            prometheus.stop()
        for e in exporters:
            e.stop()
        serving.stop()


def _model_server_pods() -> list[tuple[str, str]]:
    """The simulated kubelet's inference pods (what the exporters attribute GPUs to)."""
    lib = SimNvml("h200-mig")
    lib.nvmlInit()
    inventory = enumerate_devices(lib, ALL_DEVICES).inventory
    return [(p.namespace, p.name) for p in plan_allocations(inventory)
            if p.namespace == NAMESPACE]

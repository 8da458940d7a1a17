"""The applied config, end to end: a real Prometheus records the simulated node while the
simulated kubelet hands its GPUs to pods; `gpu-exporter advise --format mig-parted` turns that
history into a MIG layout; the file passes the mig-parted checks; a simulated node started
with it (`--sim.mig-config`) gets the new instances, the simulated kubelet hands each holder
the instance of its advised profile, and each holder's recorded framebuffer peak fits the
memory its new instance has, as the exporter reports it from the simulated NVML.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from exporter.partitions.mig_profiles import MODELS
from exporter.partitions.migparted import parse
from exporter.partitions.migparted_layout import check_layouts
from exporter.simulated.kubelet import SimKubeletServicer, pod_resources, serve_pod_resources
from exporter.simulated.node import SimNvml
from tests.support.exporter_process import ExporterProcess
from tests.support.paths import ROOT
from tests.support.prometheus import PrometheusProcess
from tests.support.wait import wait_until

pytestmark = pytest.mark.e2e

PROFILE = "h100-8"
NODE = "gpu-node-a"
MODEL = MODELS["NVIDIA H100 80GB HBM3"]
SCRAPE_S = 0.5
RECORD_S = 30.0
ADVISE_ARGS = ("--step", "1s", "--min-samples", "10", "--min-hours", "0", "--headroom", "0",
               "--progress", "off", "--resolution", "1s")


@dataclass
class Recorded:
    prometheus: PrometheusProcess
    start: float
    end: float
    tmp: Path

    def advise(self, fmt: str) -> str:
        result = subprocess.run(
            [sys.executable, "-m", "exporter", "advise", "--prometheus", self.prometheus.url,
             "--start", f"{self.start:.3f}", "--end", f"{self.end:.3f}", "--format", fmt,
             *ADVISE_ARGS], cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)
        if result.returncode == 2 and "unknown command 'advise'" in result.stderr:
            pytest.skip("this tree has no `gpu-exporter advise` yet")
        assert result.returncode == 0, result.stderr
        return result.stdout

    def peak_mib(self, namespace: str, pod: str) -> float:
        """The highest framebuffer use recorded on the devices the pod held."""
        window = f"{int(self.end - self.start) + 1}s"
        rows = self.prometheus.query(
            f'max(max_over_time(DCGM_FI_DEV_FB_USED{{namespace="{namespace}",pod="{pod}"}}'
            f"[{window}]))", at=self.end)
        assert rows, f"no framebuffer history for {namespace}/{pod}"
        return float(rows[0]["value"][1])


def _record(prometheus: PrometheusProcess, start: float) -> None:
    """Wait until Prometheus holds RECORD_S of successful scrapes since `start`: counted, so
    that a slow machine records as much history as a quick one."""
    scrapes = int(RECORD_S / SCRAPE_S)

    def scraped() -> float | None:
        window = f"{int(time.time() - start) + 1}s"
        rows = prometheus.query(f'sum_over_time(up{{job="gpu-exporter"}}[{window}])')
        count = float(rows[0]["value"][1]) if rows else 0.0
        return count if count >= scrapes else None
    wait_until(scraped, RECORD_S * 4, interval=1.0, what=f"{scrapes} scrapes recorded")


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Recorded]:
    tmp = tmp_path_factory.mktemp("applied-config")
    exporter = ExporterProcess(["--backend", "sim", "--sim.profile", PROFILE, "--sim.kubelet",
                                "-c", "500ms"], env={"NODE_NAME": NODE})
    prometheus: PrometheusProcess | None = None
    try:
        exporter.wait_ready()
        interval = f"{int(SCRAPE_S * 1000)}ms"
        config = {"global": {"scrape_interval": interval, "scrape_timeout": interval},
                  "scrape_configs": [{"job_name": "gpu-exporter", "static_configs": [
                      {"targets": [f"127.0.0.1:{exporter.port}"]}]}]}
        prometheus = PrometheusProcess(tmp / "prometheus", config,
                                       args=("--query.lookback-delta=2s",)).wait_ready()
        start = time.time()
        _record(prometheus, start)
        end = time.time()
        exporter.stop()
        yield Recorded(prometheus, start, end, tmp)
    finally:
        exporter.close()
        if prometheus is not None:
            prometheus.stop()


def _instances(config_arg: str) -> dict[str, list[str]]:
    """Profile -> UUIDs of the new node's MIG devices of that profile, as it enumerates."""
    sim = SimNvml(PROFILE, mig_config=config_arg)
    out: dict[str, list[str]] = {}
    for gpu in sim.layout:
        for mig in gpu.mig_devices:
            out.setdefault(mig.profile, []).append(mig.uuid)
    return out


def _instance_memory(metrics: str) -> dict[tuple[str, str], tuple[str, float]]:
    """(namespace, pod) -> (GPU-instance profile, used + free + reserved MiB) of each MIG
    device the exporter attributes to a pod."""
    totals: dict[tuple[str, str, str, str], float] = {}
    for family in text_string_to_metric_families(metrics):
        if family.name not in ("DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE",
                               "DCGM_FI_DEV_FB_RESERVED"):
            continue
        for sample in family.samples:
            labels = sample.labels
            if not labels.get("pod") or not labels.get("GPU_I_PROFILE"):
                continue
            key = (labels["namespace"], labels["pod"], labels["GPU_I_PROFILE"], labels["UUID"]
                   + "/" + labels["GPU_I_ID"])
            totals[key] = totals.get(key, 0.0) + sample.value
    return {(ns, pod): (profile, mib) for (ns, pod, profile, _), mib in totals.items()}


def test_the_advised_layout_holds_every_holder(recorded: Recorded) -> None:
    text = recorded.advise("mig-parted")
    # The file passes mig-parted's rules and lays out on the model it is for.
    config = parse(text, "advise --format mig-parted")
    check_layouts(config, [MODEL])
    advice: dict[str, Any] = json.loads(recorded.advise("json"))
    (pool,) = [p for p in advice["pools"] if p["gpu_model"] == MODEL.names[0]]
    (node,) = [n for n in pool["nodes"] if n["node"] == NODE]
    assert node["mig_config"] in config.mig_configs
    holders = [w for w in advice["workloads"] if w["node"] == NODE
               and w["advice"] and MODEL.has_profile(w["advice"])]
    assert holders, advice

    config_file = recorded.tmp / "advised.yaml"
    config_file.write_text(text)
    config_arg = f"{config_file}:{node['mig_config']}"
    free = _instances(config_arg)
    servicer = SimKubeletServicer()
    pods = []
    for holder in holders:
        advised = MODEL.profile(holder["advice"])
        assert free.get(advised.name), (holder, free)
        pods.append(pod_resources(holder["namespace"], holder["pod"], {
            "server": [(advised.resource_name, [free[advised.name].pop(0)])]}))
    servicer.set_pods(pods)
    socket = recorded.tmp / "new-node.sock"
    kubelet = serve_pod_resources(str(socket), servicer)
    new_node = ExporterProcess(["--backend", "sim", "--sim.profile", PROFILE,
                                "--sim.mig-config", config_arg, "-c", "500ms", "-k",
                                "--kubernetes.pod-resources-socket", str(socket)],
                               env={"NODE_NAME": NODE})
    try:
        new_node.wait_ready()
        memory = wait_until(lambda: (m if len(m := _instance_memory(new_node.metrics()))
                                     >= len(holders) else None), 30.0,
                            what="every holder attributed on the new node")
    finally:
        new_node.close()
        kubelet.stop()
    for holder in holders:
        key = (holder["namespace"], holder["pod"])
        profile, total_mib = memory[key]
        assert profile == holder["advice"]
        # Used, free and reserved are each whole MiB, rounded down: the sum may fall short
        # of the instance's memory by a MiB or two.
        assert 0 <= MODEL.profile(profile).memory_mib - total_mib <= 2
        assert recorded.peak_mib(*key) <= total_mib, (holder, total_mib)

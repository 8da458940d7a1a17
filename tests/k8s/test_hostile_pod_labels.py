"""One pod's labels cannot blind the node: a real Prometheus keeps scraping it.

The case as a user meets it: the simulated 8x H100 node with a per-link NVLink field and
GPU-pair P2P status, dcgm-exporter's `--kubernetes-enable-pod-labels`, and one pod holding
GPU 0 labelled `model-name: llama-3-8b` (and names the link and pair series write). The link
series already carry dcgm-exporter's `model_name`: copied as it is, the pod label would
repeat it, promtool would fail the body and Prometheus would mark the target down, every GPU
with it. As dcgm-exporter 4.8.3 does, it is copied as `pod_label_model_name` instead.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from exporter.devices.enumerate import enumerate_devices
from exporter.devices.filter import ALL_DEVICES
from exporter.simulated.kubelet import SimKubeletHandle, pod_resources
from exporter.simulated.node import SimNvml
from tests.support.apiserver import FakeApiServer, pod
from tests.support.exporter_process import ExporterProcess
from tests.support.prometheus import PrometheusProcess
from tests.support.promtool import promtool_problems
from tests.support.wait import wait_until

CSV = """\
DCGM_FI_DEV_GPU_TEMP, gauge, temperature
DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_PER_LINK_TOTAL, counter, per-link CRC flit errors
DCGM_EXP_P2P_STATUS, gauge, P2P status per GPU pair
DCGM_EXP_CLOCK_EVENTS_COUNT, counter, clock events in the window
"""
HOSTILE = {"model-name": "llama-3-8b", "link_status": "up", "peer-gpu": "7", "nvlink": "x",
           "gpu_uuid": "u", "clock_event": "c", "window-size-in-ms": "1", "team": "ml"}


def test_a_hostile_pod_label_leaves_the_target_up(
        exporter: type[ExporterProcess], api: FakeApiServer, kubeconfig: str,
        kubelet: SimKubeletHandle, socket_path: str, tmp_path: Path) -> None:
    lib = SimNvml("h100-8")
    lib.nvmlInit()
    gpu0 = enumerate_devices(lib, ALL_DEVICES).inventory.gpus[0]
    api.state.pods = [pod("inference", "llm-0", "uid-llm-0", HOSTILE)]
    kubelet.servicer.set_pods([
        pod_resources("inference", "llm-0", {"server": [("nvidia.com/gpu", [gpu0.uuid])]})])
    csv = tmp_path / "fields.csv"
    csv.write_text(CSV)
    proc = exporter(["--backend", "sim", "--sim.profile", "h100-8", "-f", str(csv),
                     "-c", "500ms", "-k", "--pod-resources-kubelet-socket", socket_path,
                     "--kubernetes-enable-pod-labels"],
                    env={"KUBECONFIG": kubeconfig, "NODE_NAME": "node-a"})
    proc.wait_ready()

    def copied() -> str | None:
        text = proc.metrics()
        return text if 'team="ml"' in text else None

    text = wait_until(copied, 30, what="the pod's labels on its series")
    link_lines = [line for line in text.splitlines()
                  if line.startswith("DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_PER_LINK_TOTAL{")
                  and 'gpu="0"' in line]
    assert link_lines
    for line in link_lines:
        assert line.count(",model_name=") + line.startswith("model_name=") == 1, line
        assert 'model_name="NVIDIA H100 80GB HBM3"' in line
        assert 'pod_label_model_name="llama-3-8b"' in line
        assert 'team="ml"' in line
    pair_lines = [line for line in text.splitlines()
                  if line.startswith("DCGM_EXP_P2P_STATUS{") and 'pod="llm-0"' in line]
    assert pair_lines
    for line in pair_lines:
        assert line.count(",link_status=") == 1, line
        assert line.count(",peer_gpu=") == 1, line
        assert 'pod_label_link_status="up"' in line
        assert 'pod_label_peer_gpu="7"' in line
    assert not promtool_problems(text)
    renamed = [line for line in text.splitlines()
               if line.startswith("gpu_exporter_pod_labels_renamed_total ")]
    assert renamed
    assert float(renamed[0].split()[-1]) >= 6

    prometheus = PrometheusProcess(tmp_path / "prometheus", {
        "global": {"scrape_interval": "1s", "scrape_timeout": "1s"},
        "scrape_configs": [{"job_name": "node", "honor_labels": True, "static_configs": [
            {"targets": [f"127.0.0.1:{proc.port}"]}]}],
    }).wait_ready()
    try:
        def scraped_twice() -> list[dict[str, Any]] | None:
            result = prometheus.query("count_over_time(up[1m])")
            return result if result and float(result[0]["value"][1]) >= 3 else None

        wait_until(scraped_twice, 60, 0.5, what="three scrapes of the node")
        up = prometheus.query("up")
        assert [r["value"][1] for r in up] == ["1"]
        flits = prometheus.query(
            'count(DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_PER_LINK_TOTAL{team="ml"})')
        assert flits
        assert int(flits[0]["value"][1]) == len(link_lines)
    finally:
        prometheus.stop()


def test_the_label_budget_keeps_a_store_with_a_label_limit_scraping(
        exporter: type[ExporterProcess], api: FakeApiServer, kubeconfig: str,
        kubelet: SimKubeletHandle, socket_path: str, tmp_path: Path) -> None:
    # Prometheus' `label_limit` counts the name and the target's `job` and `instance`: a
    # budget of 14 leaves room for both under a limit of 17. Without the budget the pod's
    # 30 labels fail every scrape.
    lib = SimNvml("h100-8")
    lib.nvmlInit()
    gpu0 = enumerate_devices(lib, ALL_DEVICES).inventory.gpus[0]
    many = {f"team-{n:02d}": f"v{n}" for n in range(30)}
    api.state.pods = [pod("inference", "llm-0", "uid-llm-0", many)]
    kubelet.servicer.set_pods([
        pod_resources("inference", "llm-0", {"server": [("nvidia.com/gpu", [gpu0.uuid])]})])
    csv = tmp_path / "fields.csv"
    csv.write_text(CSV)
    common = ["--backend", "sim", "--sim.profile", "h100-8", "-f", str(csv), "-c", "500ms",
              "-k", "--pod-resources-kubelet-socket", socket_path,
              "--kubernetes-enable-pod-labels", "--kubernetes-enable-pod-uid"]
    env = {"KUBECONFIG": kubeconfig, "NODE_NAME": "node-a"}
    trimmed = exporter([*common, "--label-limit", "14"], env=env)
    whole = exporter(common, env=env)
    for proc in (trimmed, whole):
        proc.wait_ready()

        def copied(proc: ExporterProcess = proc) -> bool:
            return 'team_00="v0"' in proc.metrics()

        wait_until(copied, 30, what="pod labels copied")
    text = trimmed.metrics()
    held = [line for line in text.splitlines() if 'pod="llm-0"' in line]
    assert held
    for line in held:
        assert line.count('="') + 1 <= 14, line
        assert 'pod_uid="uid-llm-0"' in line  # the exporter's own labels stay
        assert 'team_00="v0"' in line  # cut from the end: the first by name stays
        assert 'team_29=' not in line
    count = [line for line in text.splitlines()
             if line.startswith("gpu_exporter_label_limit_trimmed_series ")]
    assert count
    assert float(count[0].split()[1]) >= len(held)
    assert not promtool_problems(text)

    prometheus = PrometheusProcess(tmp_path / "prometheus", {
        "global": {"scrape_interval": "1s", "scrape_timeout": "1s"},
        "scrape_configs": [{"job_name": name, "honor_labels": True, "label_limit": 16,
                            "static_configs": [{"targets": [f"127.0.0.1:{proc.port}"]}]}
                           for name, proc in (("trimmed", trimmed), ("whole", whole))],
    }).wait_ready()
    try:
        def scraped() -> list[dict[str, Any]] | None:
            result = prometheus.query("count_over_time(up[1m]) >= 3")
            return result if len(result) == 2 else None

        wait_until(scraped, 60, 0.5, what="three scrapes of each target")
        up = {r["metric"]["job"]: r["value"][1] for r in prometheus.query("up")}
        assert up == {"trimmed": "1", "whole": "0"}
    finally:
        prometheus.stop()

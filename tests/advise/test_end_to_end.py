"""`gpu-exporter advise` against a real Prometheus (blocks backfilled by promtool) and a real
VictoriaMetrics (samples imported) holding the same synthetic day, whose best partitioning
is worked out by hand in `tests/advise/history.py`: both give that answer, byte for byte the
same on a second run; every output format is written and parses."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.advise import history
from tests.report.history import backfill_file, write_openmetrics, write_vm_json
from tests.support.prometheus import PrometheusProcess
from tests.support.victoriametrics import VictoriaMetricsProcess
from tests.support.wait import wait_until

ROOT = Path(__file__).resolve().parents[2]
WINDOW = ("--start", f"{history.START}", "--end", f"{history.END}")


@dataclass
class Stores:
    prometheus: PrometheusProcess
    victoria: VictoriaMetricsProcess

    def url(self, which: str) -> str:
        return self.prometheus.url if which == "prometheus" else self.victoria.url


@pytest.fixture(scope="module")
def stores(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stores]:
    tmp = tmp_path_factory.mktemp("advise-stores")
    source = tmp / "history.om"
    with source.open("w") as out:
        write_openmetrics(history.series(), out)
        out.write("# EOF\n")
    backfill_file(source, tmp / "tsdb", 48)
    prometheus = PrometheusProcess(tmp / "prometheus", {"global": {}}, tsdb=tmp / "tsdb",
                                   args=("--query.lookback-delta=90s",)).wait_ready()
    victoria = VictoriaMetricsProcess(tmp / "victoria-metrics").wait_ready()
    try:
        lines = tmp / "history.jsonl"
        with lines.open("w") as out:
            write_vm_json(history.series(), out)
        request = urllib.request.Request(f"{victoria.url}/api/v1/import",
                                         data=lines.read_bytes(), method="POST")
        with urllib.request.urlopen(request, timeout=120) as answer:
            answer.read()
        with urllib.request.urlopen(f"{victoria.url}/internal/force_flush", timeout=60) as a:
            a.read()
        for store in (prometheus, victoria):
            wait_until(lambda s=store: s.query("count(DCGM_FI_DEV_FB_USED)",  # type: ignore[misc]
                                               history.END), 60.0, 0.2, what="samples loaded")
        yield Stores(prometheus, victoria)
    finally:
        prometheus.stop()
        victoria.stop()


def run_advise(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "exporter", "advise", "--progress", "off",
                           *args], cwd=ROOT, capture_output=True, text=True, timeout=180)


def advise_json(url: str, *args: str) -> dict[str, Any]:
    result = run_advise("--prometheus", url, *WINDOW, "--format", "json", "--all", *args)
    assert result.returncode == 0, result.stderr
    document: dict[str, Any] = json.loads(result.stdout)
    return document


@pytest.mark.parametrize("which", ["prometheus", "victoria"])
def test_the_known_optimum(stores: Stores, which: str) -> None:
    document = advise_json(stores.url(which), "--price", "2")
    advice = {w["pod"]: w["advice"] for w in document["workloads"]}
    assert advice == history.EXPECTED_ADVICE
    assert [(n["pod"], n["reason"]) for n in document["not_advised"]] == [
        ("brief", "15 samples, fewer than --min-samples 30")]
    pools = {p["gpu_model"]: p for p in document["pools"]}
    assert (pools[history.H100]["gpus_now"], pools[history.H100]["gpus_needed"]) == (9, 4)
    assert pools[history.H100]["packing"]["optimal"]
    assert (pools[history.L4]["gpus_now"], pools[history.L4]["gpus_needed"]) == (4, 1)
    assert pools[history.L4]["time_slicing_replicas"] == 4
    summary = document["summary"]
    assert (summary["gpus_now"], summary["gpus_needed"], summary["gpus_freed"]) == (13, 5, 8)
    assert summary["money_per_month"] == pytest.approx(8 * 2 * 730.5)
    workloads = {w["pod"]: w for w in document["workloads"]}
    assert workloads["spiky"]["peak_framebuffer_mib"] == 15_000  # the hourly spike is kept
    assert workloads["big-a"]["now"] == "whole"
    assert workloads["steady"]["now"] == "1g.10gb"
    assert workloads["big-a"]["resource"] == "nvidia.com/mig-3g.40gb"
    assert workloads["big-a"]["activity_source"] == "profiling"
    assert workloads["infer-0"]["activity_source"] == "utilisation"
    assert workloads["infer-0"]["compute_need"] == pytest.approx(0.15)
    nodes = {n["node"]: n for n in pools[history.H100]["nodes"]}
    assert nodes["h100-b"]["gpus"] == 5  # the idle GPU is counted on its node
    assert nodes["h100-a"]["mig_config"] == "h100-80gb-advised-1"


def test_unchanged_holders_are_counted_not_listed(stores: Stores) -> None:
    result = run_advise("--prometheus", stores.prometheus.url, *WINDOW, "--format", "json")
    document = json.loads(result.stdout)
    listed = {w["pod"] for w in document["workloads"]}
    assert "steady" not in listed  # on 1g.10gb, advised 1g.10gb
    assert "trainer" not in listed  # on a whole GPU, advised the whole GPU
    assert document["summary"]["unchanged"] == 2
    assert len(listed) == len(history.EXPECTED_ADVICE) - 2


def test_same_history_same_bytes_from_both_stores(stores: Stores) -> None:
    texts = [run_advise("--prometheus", stores.url(which), *WINDOW, "--format", fmt).stdout
             for which in ("prometheus", "prometheus", "victoria") for fmt in ("table",)]
    assert texts[0] == texts[1]
    assert texts[0] == texts[2]
    assert "kubectl label node h100-a nvidia.com/mig.config=h100-80gb-advised-1" in texts[0]


def test_mig_parted_and_device_plugin_files(stores: Stores, tmp_path: Path) -> None:
    mig = tmp_path / "mig.yaml"
    result = run_advise("--prometheus", stores.prometheus.url, *WINDOW, "--format",
                        "mig-parted", "-o", str(mig))
    assert result.returncode == 0, result.stderr
    text = mig.read_text()
    assert "#   kubectl label node h100-a nvidia.com/mig.config=h100-80gb-advised-1" in text
    config = yaml.safe_load(text)
    assert config["version"] == "v1"
    selections = config["mig-configs"]["h100-80gb-advised-1"]
    instances: dict[str, int] = {}
    for selection in selections:
        for name, count in (selection.get("mig-devices") or {}).items():
            instances[name] = instances.get(name, 0) + count * len(selection["devices"])
    assert instances == {"3g.40gb": 2, "2g.20gb": 2, "1g.20gb": 1, "1g.10gb": 4}
    assert config["mig-configs"]["all-disabled"] == [{"devices": "all", "mig-enabled": False}]

    plugin = tmp_path / "plugin.yaml"
    result = run_advise("--prometheus", stores.prometheus.url, *WINDOW, "--format",
                        "device-plugin", "-o", str(plugin))
    assert result.returncode == 0, result.stderr
    text = plugin.read_text()
    assert "#   kubectl label node l4-a nvidia.com/device-plugin.config=time-slicing-4" in text
    configmap = yaml.safe_load(text)
    assert configmap["kind"] == "ConfigMap"
    inner = yaml.safe_load(configmap["data"]["time-slicing-4"])
    assert inner["version"] == "v1"
    assert inner["sharing"]["timeSlicing"]["resources"] == [
        {"name": "nvidia.com/gpu", "replicas": 4}]

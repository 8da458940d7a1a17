"""`gpu-exporter advise` against a real Prometheus (blocks backfilled by promtool) and a real
VictoriaMetrics (samples imported) holding the same synthetic day, whose best partitioning
is worked out by hand in `tests/advise/history.py`: both give that answer, byte for byte the
same on a second run; every output format is written and parses."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from exporter.partitions.mig_profiles import MODELS
from exporter.partitions.migparted import parse
from exporter.partitions.migparted_layout import PCI_DEVICE_IDS, check_layouts, entry_layout
from tests.advise import history
from tests.report.history import backfill_file, write_openmetrics, write_vm_json
from tests.support.chromium import browser_page, chromium_port
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
    assert (pools[history.L4]["gpus_now"], pools[history.L4]["gpus_needed"]) == (5, 2)
    assert pools[history.L4]["time_slicing_replicas"] == 3
    summary = document["summary"]
    assert (summary["gpus_now"], summary["gpus_needed"], summary["gpus_freed"]) == (14, 6, 8)
    assert summary["money_per_month"] == pytest.approx(8 * 2 * 730.5)
    workloads = {w["pod"]: w for w in document["workloads"]}
    assert workloads["spiky"]["peak_framebuffer_mib"] == 15_000  # the hourly spike is kept
    assert workloads["big-a"]["now"] == "whole"
    assert workloads["steady"]["now"] == "1g.10gb"
    assert workloads["big-a"]["resource"] == "nvidia.com/mig-3g.40gb"
    assert workloads["big-a"]["activity_source"] == "profiling"
    assert workloads["infer-0"]["activity_source"] == "utilisation"
    assert workloads["infer-0"]["compute_need"] == pytest.approx(0.15)
    # The time-sliced device's figures, split between its two pods at each step.
    assert (workloads["pair-a"]["now"], workloads["pair-a"]["sharers"]) == ("shared", 2)
    assert workloads["pair-a"]["peak_framebuffer_mib"] == 4_000
    assert workloads["pair-a"]["compute_need"] == pytest.approx(0.15)
    nodes = {n["node"]: n for n in pools[history.H100]["nodes"]}
    assert nodes["h100-b"]["gpus"] == 5  # the idle GPU is counted on its node
    assert nodes["h100-a"]["mig_config"] == "h100-80gb-advised-1"


def test_unchanged_holders_are_counted_not_listed(stores: Stores) -> None:
    result = run_advise("--prometheus", stores.prometheus.url, *WINDOW, "--format", "json")
    document = json.loads(result.stdout)
    listed = {w["pod"] for w in document["workloads"]}
    assert "steady" not in listed  # on 1g.10gb, advised 1g.10gb
    assert "trainer" not in listed  # on a whole GPU, advised the whole GPU
    assert "pair-a" not in listed  # time-sliced, advised time-slicing
    assert document["summary"]["unchanged"] == 4
    assert len(listed) == len(history.EXPECTED_ADVICE) - 4


def test_same_history_same_bytes_from_both_stores(stores: Stores) -> None:
    for fmt in ("table", "json", "mig-parted"):
        texts = [run_advise("--prometheus", stores.url(which), *WINDOW, "--format", fmt).stdout
                 for which in ("prometheus", "prometheus", "victoria")]
        assert texts[0], fmt
        assert texts[0] == texts[1], fmt
        assert texts[0] == texts[2], fmt
        if fmt == "table":
            assert "kubectl label node h100-a nvidia.com/mig.config=h100-80gb-advised-1" in \
                texts[0]


def test_mig_parted_and_device_plugin_files(stores: Stores, tmp_path: Path) -> None:
    mig = tmp_path / "mig.yaml"
    result = run_advise("--prometheus", stores.prometheus.url, *WINDOW, "--format",
                        "mig-parted", "-o", str(mig))
    assert result.returncode == 0, result.stderr
    text = mig.read_text()
    assert "#   kubectl label node h100-a nvidia.com/mig.config=h100-80gb-advised-1" in text
    # Read by mig-parted's rules (exporter.partitions.migparted): every MIG entry is for
    # the H100 alone (its PCI id) and lays out on it.
    parsed = parse(text, str(mig))
    check_layouts(parsed)
    h100 = MODELS[history.H100]
    entries = [e for e in parsed.mig_configs["h100-80gb-advised-1"] if e.mig_enabled]
    assert len(entries) == 3
    for entry in entries:
        assert entry.devices != "all"
        first = entry.devices[0]
        assert entry.applies_to(first, PCI_DEVICE_IDS[history.H100])
        assert not entry.applies_to(first, PCI_DEVICE_IDS["NVIDIA A100-SXM4-80GB"])
        assert entry_layout(h100, entry.mig_devices or {}, "advised")
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
    assert "#   kubectl label node l4-a nvidia.com/device-plugin.config=time-slicing-3" in text
    assert "l4-b nvidia.com/device-plugin.config" not in text  # its GPU is freed
    configmap = yaml.safe_load(text)
    assert configmap["kind"] == "ConfigMap"
    kubernetes_validate.validate(configmap, "1.33", strict=True)
    inner = yaml.safe_load(configmap["data"]["time-slicing-3"])
    assert inner["version"] == "v1"
    assert inner["sharing"]["timeSlicing"]["resources"] == [
        {"name": "nvidia.com/gpu", "replicas": 3}]


LAYOUTS_JS = """JSON.stringify(Array.from(document.querySelectorAll('section.node')).map(n => ({
  node: n.dataset.node,
  grids: Array.from(n.querySelectorAll('.mig')).map(g => ({
    label: g.getAttribute('aria-label'), cols: Number(g.dataset.cols),
    width: g.clientWidth - 6,
    blocks: Array.from(g.children).map(b => ({slices: Number(b.dataset.slices),
                                              width: b.getBoundingClientRect().width,
                                              text: b.innerText}))}))})))"""
DOCS_SCREENSHOT = ROOT / "docs" / "advise.png"


def test_html_draws_each_node_to_scale_in_a_real_browser(stores: Stores, tmp_path: Path
                                                         ) -> None:
    page = tmp_path / "advice.html"
    result = run_advise("--prometheus", stores.prometheus.url, *WINDOW, "--format", "html",
                        "--price", "2", "-o", str(page))
    assert result.returncode == 0, result.stderr
    text = page.read_text()
    assert "<script" not in text
    assert "<link" not in text
    assert 'src="http' not in text

    async def look(port: int) -> tuple[list[dict[str, Any]], list[str]]:
        async with browser_page(port, width=1400, height=900) as tab:
            await tab.open(page.resolve().as_uri())
            nodes = json.loads(await tab.value(LAYOUTS_JS))
            await tab.screenshot(tmp_path / "advise.png")
            return nodes, tab.errors()

    with chromium_port() as port:
        nodes, errors = asyncio.run(look(port))
    assert errors == []
    by_node = {n["node"]: n for n in nodes}
    assert set(by_node) == {"h100-a", "h100-b", "h100-c", "l4-a", "l4-b"}
    # h100-a: 4 GPUs today, 4 advised (three MIG layouts and the whole one).
    assert len(by_node["h100-a"]["grids"]) == 8
    for node in nodes:
        for grid in node["grids"]:
            gaps = 3 * (grid["cols"] - 1)
            for block in grid["blocks"]:
                # Each block covers its compute slices of the GPU's width, gaps aside.
                share = block["slices"] / grid["cols"]
                assert abs(block["width"] - share * (grid["width"] - gaps)
                           - 3 * (block["slices"] - 1)) <= 2, (node["node"], grid, block)
    advised = [g for g in by_node["h100-a"]["grids"] if g["label"].startswith("advised")]
    assert sorted(b["text"].strip() for g in advised for b in g["blocks"]) == sorted(
        ["3g.40gb", "3g.40gb", "2g.20gb", "2g.20gb", "1g.20gb", "1g.10gb", "1g.10gb",
         "1g.10gb", "1g.10gb", "whole", *[b["text"].strip() for g in advised
                                          for b in g["blocks"] if "free" in b["text"]]])
    assert (tmp_path / "advise.png").stat().st_size > 10_000
    if os.environ.get("GPU_EXPORTER_WRITE_DOCS"):
        shutil.copyfile(tmp_path / "advise.png", DOCS_SCREENSHOT)

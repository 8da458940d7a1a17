"""The device labels in the order dcgm-exporter 4.8.4's renderer writes them, `hostname` last,
read from upstream's own renderer test (render_metrics_test.go in tests/fixtures): a whole
GPU's series and a MIG instance's, rendered by a serve configuration left at its defaults and
by one under `--hostname-label Hostname` (4.8.2's name, in the same place)."""

from __future__ import annotations

import re

import pytest

from exporter.config import parse_serve_args
from exporter.devices.model import Entity, Inventory, Readings
from exporter.exposition.render import device_families, render
from exporter.fields.csv import parse_collectors
from exporter.sampling.snapshot import HostLabel, Snapshot
from tests.support.paths import fixture_file

TEST_GO = ("dcgm-exporter-4.8.4", "internal", "pkg", "rendermetrics", "render_metrics_test.go")


def upstream_sample(variable: str) -> list[tuple[str, str]]:
    """The labels of the Go string `variable := `...` + `...`` in upstream's test, in order."""
    source = fixture_file(*TEST_GO).read_text(encoding="utf-8")
    found = re.search(rf"\b{variable} := ((?:`[^`]*`(?:\s*\+\s*)?)+)", source)
    assert found, f"{variable}: not in render_metrics_test.go"
    line = "".join(re.findall(r"`([^`]*)`", found.group(1)))
    inside = re.fullmatch(r"TEST_METRIC\{(.*)\} \d+", line)
    assert inside, line
    return re.findall(r'(\w+)="([^"]*)"', inside.group(1))


PARENT = upstream_sample("parentSample")
MIG = upstream_sample("migSample")


def test_upstream_states_the_order() -> None:
    assert [k for k, _ in PARENT] == ["gpu", "UUID", "pci_bus_id", "device", "modelName",
                                      "hostname"]
    assert [k for k, _ in MIG] == ["gpu", "UUID", "pci_bus_id", "device", "modelName",
                                   "GPU_I_PROFILE", "GPU_I_ID", "hostname"]


def _rendered(host: HostLabel) -> dict[str, list[tuple[str, str]]]:
    """Upstream's parent GPU and MIG instance as this exporter renders them, by GPU_I_ID."""
    labels = dict(MIG)
    gpu = Entity(int(labels["gpu"]), labels["UUID"], labels["pci_bus_id"], labels["device"],
                 labels["modelName"])
    mig = Entity(gpu.gpu, gpu.uuid, gpu.pci_bus_id, gpu.device, gpu.model,
                 int(labels["GPU_I_ID"]), labels["GPU_I_PROFILE"])
    readings = Readings(values={(gpu.gpu, -1): {"DCGM_FI_DEV_GPU_TEMP": 42.0},
                                (gpu.gpu, mig.gpu_instance_id or 0):
                                    {"DCGM_FI_DEV_GPU_TEMP": 24.0}})
    collectors = parse_collectors("DCGM_FI_DEV_GPU_TEMP, gauge, temperature\n", "t.csv")
    text = render(device_families(Snapshot(Inventory((gpu,), (mig,), "590.48.01"), readings,
                                           collectors, host))).text.decode()
    out = {}
    for line in text.splitlines():
        if line.startswith("DCGM_FI_DEV_GPU_TEMP{"):
            pairs = re.findall(r'(\w+)="([^"]*)"', line.split("{", 1)[1].rsplit("}", 1)[0])
            out[dict(pairs).get("GPU_I_ID", "")] = pairs
    return out


@pytest.mark.parametrize(("argv", "name"), [([], "hostname"),
                                            (["--hostname-label", "Hostname"], "Hostname")])
def test_the_serve_default_renders_upstreams_labels(argv: list[str], name: str) -> None:
    cfg = parse_serve_args(argv, env={})
    assert cfg.sampler.host.name == name
    rendered = _rendered(HostLabel(cfg.sampler.host.name, dict(PARENT)["hostname"]))
    expected = {"": PARENT, dict(MIG)["GPU_I_ID"]: MIG}
    for key, pairs in expected.items():
        renamed = [(name if k == "hostname" else k, v) for k, v in pairs]
        assert rendered[key] == renamed, (name, key)

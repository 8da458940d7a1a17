"""The image's other commands: `doctor` on the node, `generate` and `report --help`.

`generate` in the image writes the same dashboards, rules and KEDA objects the repository
commits (its generator tests keep those current), given the repository's collectors.csv.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from tests.deploy.operator_render import helm_default_policy
from tests.support.container import Bind, ContainerSpec, run_once
from tests.support.paths import ROOT

from .node import ContainerNode, operator_container

pytestmark = pytest.mark.timeout(1800)  # the first test may build the image

GENERATED_DIRS = ("dashboards", "alerts", "deploy/keda")
"""Every JSON and YAML file in these is generated (deploy/keda/README.md is not)."""


def test_doctor_on_the_operators_node_finds_nothing_wrong(node: ContainerNode,
                                                         built_image: str) -> None:
    spec = dataclasses.replace(operator_container(node, helm_default_policy().with_our_image(),
                                                  built_image), args=("doctor",))
    code, output = run_once(spec)
    assert code == 0, output
    lines = output.strip().splitlines()
    for check in ("[  OK] NVML: loaded libnvidia-ml.so.1",
                  "[  OK] GPUs: 3 visible: 3x NVIDIA H200",
                  "[  OK] pod-resources permission: uid 0 may connect",
                  "[  OK] kubelet List: answered: 4 pods, 3 holding devices"):
        assert check in lines, output
    assert not [line for line in lines if line.startswith(("[FAIL]", "[WARN]"))], output
    assert lines[-1].endswith("all checks passed"), output


def test_generate_writes_the_committed_artifacts(built_image: str, tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir(mode=0o777)
    out.chmod(0o777)
    collectors = tmp_path / "collectors.csv"
    collectors.write_bytes((ROOT / "collectors.csv").read_bytes())
    collectors.chmod(0o644)
    spec = dataclasses.replace(
        operator_container_free(built_image),
        args=("generate", "all", "--collectors", "/in/collectors.csv", "--out", "/out"),
        binds=(Bind(collectors, "/in/collectors.csv"), Bind(out, "/out", read_only=False)))
    code, output = run_once(spec)
    assert code == 0, output
    written = sorted(p.relative_to(out) for p in out.rglob("*") if p.is_file())
    committed = sorted(p.relative_to(ROOT) for d in GENERATED_DIRS
                       for p in (ROOT / d).iterdir() if p.suffix in (".json", ".yaml", ".yml"))
    assert written == committed
    for rel in written:
        assert (out / rel).read_bytes() == (ROOT / rel).read_bytes(), rel


def test_report_help(built_image: str) -> None:
    code, output = run_once(dataclasses.replace(operator_container_free(built_image),
                                                args=("report", "--help")))
    assert code == 0, output
    assert output.startswith("usage: gpu-exporter report ")
    assert "--prometheus URL" in output


def operator_container_free(image: str) -> ContainerSpec:
    """The image alone: read-only, no capabilities, no network, nothing mounted."""
    return ContainerSpec(image=image, read_only=True, cap_drop_all=True, port=None)

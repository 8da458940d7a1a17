"""The image's other commands: `doctor` on the node; `report`, `generate` (and any other
command whose libraries the image leaves out) answering one line that says where to get
them, in the bare image and run as the GPU Operator, the chart and the sidecar run it.
"""

from __future__ import annotations

import dataclasses

import pytest

from exporter.cli import COMMANDS, NODE_COMMANDS
from tests.deploy.operator_render import helm_default_policy
from tests.support.container import ContainerSpec, run_once

from .node import ContainerNode, operator_container

pytestmark = pytest.mark.timeout(1800)  # the first test may build the image


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


TOOLS = sorted(set(COMMANDS) - NODE_COMMANDS)
"""`report`, `generate` and whatever else does not run on a node: not in the image."""
TOOL_ARGS = {"generate": ("generate", "all", "--out", "/tmp/out"),
             "report": ("report", "--prometheus", "http://prometheus:9090")}


def _answers_one_line(spec: ContainerSpec, command: str) -> None:
    code, output = run_once(spec)
    assert code == 1, output
    (line,) = output.strip().splitlines()
    assert line.startswith(f"gpu-exporter: `{command}` is not in this installation ("), line
    assert line.endswith(f"run `{command}` from `pip install gpu-exporter`, which installs "
                         "every command"), line
    assert "Traceback" not in output


@pytest.mark.parametrize("command", TOOLS)
def test_a_tool_answers_one_line_in_the_bare_image(built_image: str, command: str) -> None:
    for argv in ((command,), (command, "--help"), TOOL_ARGS.get(command, (command,))):
        _answers_one_line(dataclasses.replace(operator_container_free(built_image), args=argv),
                          command)


@pytest.mark.parametrize("command", TOOLS)
def test_a_tool_answers_one_line_as_the_operator_runs_the_image(
        node: ContainerNode, built_image: str, command: str) -> None:
    spec = operator_container(node, helm_default_policy().with_our_image(), built_image)
    _answers_one_line(dataclasses.replace(spec, args=TOOL_ARGS.get(command, (command,))),
                      command)


@pytest.mark.parametrize("command", TOOLS)
def test_a_tool_answers_one_line_as_the_chart_runs_the_image(
        node: ContainerNode, built_image: str, command: str) -> None:
    """`helm install ... --set arguments={report}`: the chart's container with those args."""
    from tests.chart._chart import objects, one

    daemonset = one(objects({"arguments": list(TOOL_ARGS.get(command, (command,)))}),
                    "DaemonSet")
    pod = daemonset["spec"]["template"]["spec"]
    _answers_one_line(node.spec(pod, pod["containers"][0], built_image), command)


@pytest.mark.parametrize("command", TOOLS)
def test_a_tool_answers_one_line_as_the_sidecar_runs_the_image(
        node: ContainerNode, built_image: str, command: str) -> None:
    from .test_sidecar_image import sidecar_spec

    spec = sidecar_spec(node, built_image)
    _answers_one_line(dataclasses.replace(spec, args=TOOL_ARGS.get(command, (command,))),
                      command)


def test_the_tools_libraries_are_not_in_the_image(built_image: str) -> None:
    from scripts.podman import mounted_image

    from .test_node_dependencies import node_dependencies, tools_only

    with mounted_image(built_image) as rootfs:
        site = rootfs / "usr" / "local" / "lib" / "python3.11" / "dist-packages"
        present = {p.name.split("-")[0].replace("_", "-").lower()
                   for p in site.glob("*.dist-info")}
    assert not present & (tools_only() | {"numpy", "pillow", "fonttools", "contourpy"})
    assert node_dependencies() <= present


def operator_container_free(image: str) -> ContainerSpec:
    """The image alone: read-only, no capabilities, no network, nothing mounted."""
    return ContainerSpec(image=image, read_only=True, cap_drop_all=True, port=None)

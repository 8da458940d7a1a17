"""The values files for the EKS node types, and the overlays that add a feature to one
(charts/gpu-exporter/examples): each passes the schema and `helm lint --strict` clean,
renders objects valid on every supported Kubernetes version, says in its comments what it
changes and why, and renders what those comments say."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from ._chart import CHART, Obj, exporter, helm, objects, one, validation_problems

EXAMPLES = CHART / "examples"
NODE_TYPES = ("eks-auto-mode", "eks-karpenter-al2023", "eks-managed-node-groups",
              "eks-bottlerocket", "eks-hybrid-nodes")
OVERLAYS = ("eks-node-auto-repair",)
"""Files that add one feature, given after a node type's file (`-f <type> -f <overlay>`)."""
NAMES = NODE_TYPES + OVERLAYS


def _values(name: str) -> Obj:
    loaded: Obj = yaml.safe_load((EXAMPLES / f"{name}.yaml").read_text(encoding="utf-8"))
    return loaded


def _pod(name: str) -> Obj:
    spec: Obj = one(objects(_values(name)), "DaemonSet")["spec"]["template"]["spec"]
    return spec


def _required_terms(pod: Obj) -> list[Any]:
    affinity = pod.get("affinity", {}).get("nodeAffinity", {})
    terms: list[Any] = affinity.get("requiredDuringSchedulingIgnoredDuringExecution", {}).get(
        "nodeSelectorTerms", [])
    return terms


def test_there_is_one_file_per_node_type() -> None:
    assert sorted(p.stem for p in EXAMPLES.glob("*.yaml")) == sorted(NAMES)


@pytest.mark.parametrize("name", NAMES)
def test_the_example_validates_lints_and_renders_valid_objects(name: str) -> None:
    helm_python = helm()
    values = _values(name)
    with helm_python.Chart.load(CHART) as chart:
        chart.validate_schema(values)
    report = helm_python.lint(CHART, values, strict=True)
    assert (report["messages"], report["errors"]) == ([], []), report
    assert validation_problems(objects(values)) == []


@pytest.mark.parametrize("name", NAMES)
def test_the_example_says_how_to_install_it_and_why_it_differs(name: str) -> None:
    text = (EXAMPLES / f"{name}.yaml").read_text(encoding="utf-8")
    header = [line for line in text.splitlines() if line.startswith("#")]
    assert f"-f charts/gpu-exporter/examples/{name}.yaml" in text
    assert "# What differs from the chart's defaults, and why:" in header
    # Every value it sets is a key the header talks about.
    for key in _values(name):
        assert any(key in line for line in header), key


@pytest.mark.parametrize("name", NODE_TYPES)
def test_the_example_keeps_to_gpu_nodes_and_their_taint(name: str) -> None:
    pod = _pod(name)
    assert pod.get("nodeSelector") or _required_terms(pod), "runs on every node"
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in \
        pod["tolerations"]
    volume = next(v for v in pod["volumes"] if v["name"] == "pod-gpu-resources")
    assert volume["hostPath"]["path"] == "/var/lib/kubelet/pod-resources"


def test_auto_mode_selects_auto_mode_nvidia_nodes() -> None:
    pod = _pod("eks-auto-mode")
    assert pod["nodeSelector"] == {"eks.amazonaws.com/compute-type": "auto"}
    assert _required_terms(pod) == [{"matchExpressions": [{
        "key": "eks.amazonaws.com/instance-gpu-manufacturer", "operator": "In",
        "values": ["nvidia"]}]}]


def test_karpenter_selects_by_the_gpu_makers_label() -> None:
    (term,) = _required_terms(_pod("eks-karpenter-al2023"))
    assert term["matchExpressions"][0]["key"] == "karpenter.k8s.aws/instance-gpu-manufacturer"


def test_bottlerocket_adds_sys_admin_and_keeps_the_rest_dropped() -> None:
    container = exporter(objects(_values("eks-bottlerocket")))
    security = container["securityContext"]
    assert security["capabilities"] == {"add": ["SYS_ADMIN"], "drop": ["ALL"]}
    assert security["privileged"] is False
    assert security["readOnlyRootFilesystem"] is True
    assert security["allowPrivilegeEscalation"] is False
    # The other examples add nothing.
    for name in set(NAMES) - {"eks-bottlerocket"}:
        assert "add" not in exporter(objects(_values(name)))["securityContext"]["capabilities"]


def test_hybrid_nodes_need_the_hybrid_label_and_a_gpu() -> None:
    assert _pod("eks-hybrid-nodes")["nodeSelector"] == {
        "eks.amazonaws.com/compute-type": "hybrid", "nvidia.com/gpu.present": "true"}


def test_node_auto_repair_writes_accelerated_hardware_ready_with_its_own_access_only() -> None:
    values = {**_values("eks-auto-mode"), **_values("eks-node-auto-repair")}
    objs = objects(values)
    variables = {e["name"]: e.get("value") for e in exporter(objs)["env"]}
    assert variables["GPU_EXPORTER_FAULTS_NODE_CONDITION"] == "true"
    assert variables["GPU_EXPORTER_FAULTS_CONDITION_TYPE"] == "AcceleratedHardwareReady"
    assert variables["GPU_EXPORTER_FAULTS_EVENTS"] == "true"
    assert "GPU_EXPORTER_FAULTS_TAINT" not in variables
    (role,) = [o for o in objs if o["kind"] == "ClusterRole"]
    assert role["rules"] == [
        {"apiGroups": [""], "resources": ["nodes/status"], "verbs": ["get", "patch"]},
        {"apiGroups": [""], "resources": ["events"], "verbs": ["create", "patch"]}]
    # The node type's placement is kept.
    assert one(objs, "DaemonSet")["spec"]["template"]["spec"]["nodeSelector"] == {
        "eks.amazonaws.com/compute-type": "auto"}

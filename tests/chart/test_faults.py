"""The chart's `faults.*` values: each option grants only the RBAC it needs (reads only in a
dry run), sets the exporter's variables, and those variables resolve to the same settings
in the exporter itself; all off, nothing about faults is rendered."""

from __future__ import annotations

import pytest

from exporter.config import parse_serve_args
from exporter.nodefaults.config import NodeFaultsConfig

from ._chart import Obj, env, exporter, objects, of_kind, one, values_file

CONDITION = {"apiGroups": [""], "resources": ["nodes/status"], "verbs": ["get", "patch"]}
EVENTS = {"apiGroups": [""], "resources": ["events"], "verbs": ["create", "patch"]}
TAINT = {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "patch"]}


def _fault_rules(objs: list[Obj]) -> list[Obj]:
    (role,) = [r for r in of_kind(objs, "ClusterRole")
               if r["metadata"]["name"].endswith("-node-faults")]
    (binding,) = [b for b in of_kind(objs, "ClusterRoleBinding")
                  if b["roleRef"]["name"] == role["metadata"]["name"]]
    account = one(objs, "ServiceAccount")["metadata"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": account["name"],
                                    "namespace": account["namespace"]}]
    assert one(objs, "DaemonSet")["spec"]["template"]["spec"][
        "automountServiceAccountToken"] is True
    rules: list[Obj] = role["rules"]
    return rules


@pytest.mark.parametrize(("option", "rules"), [
    ("nodeCondition", [CONDITION]),
    ("events", [EVENTS]),
    ("taint", [TAINT]),
])
def test_each_option_grants_only_its_own_access(option: str, rules: list[Obj]) -> None:
    assert _fault_rules(objects({"faults": {option: True}})) == rules


def test_all_on_grants_each_and_sets_every_variable() -> None:
    objs = objects(values_file("faults"))
    assert _fault_rules(objs) == [CONDITION, EVENTS, TAINT]
    variables = {k: v for k, v in env(exporter(objs)).items() if "FAULTS" in k}
    assert variables == {
        "GPU_EXPORTER_FAULTS_NODE_CONDITION": "true",
        "GPU_EXPORTER_FAULTS_CONDITION_TYPE": "AcceleratedHardwareReady",
        "GPU_EXPORTER_FAULTS_EVENTS": "true",
        "GPU_EXPORTER_FAULTS_TAINT": "true",
        "GPU_EXPORTER_FAULTS_TAINT_KEY": "example.com/gpu-fault",
        "GPU_EXPORTER_FAULTS_TAINT_MAX_SHARE": "0.25",
        "GPU_EXPORTER_FAULTS_NODE_SELECTOR": "node.kubernetes.io/instance-type=p5.48xlarge",
    }
    # The exporter reads them as the values meant.
    config = parse_serve_args([], {**variables, "NODE_NAME": "n1"}).faults
    assert config == NodeFaultsConfig(
        node_condition=True, condition_type="AcceleratedHardwareReady", events=True,
        taint=True, taint_key="example.com/gpu-fault", taint_max_share=0.25,
        node_selector="node.kubernetes.io/instance-type=p5.48xlarge", node_name="n1")


def test_dry_run_grants_reads_only() -> None:
    objs = objects(values_file("faults-dry-run"))
    assert _fault_rules(objs) == [
        {"apiGroups": [""], "resources": ["nodes/status"], "verbs": ["get"]},
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list"]}]
    assert env(exporter(objs))["GPU_EXPORTER_FAULTS_DRY_RUN"] == "true"


def test_all_off_renders_what_no_faults_value_renders() -> None:
    off = {"faults": {"nodeCondition": False, "events": False, "taint": False,
                      "dryRun": True, "conditionType": "AcceleratedHardwareReady"}}
    assert objects(off) == objects()


def test_rbac_create_false_grants_nothing_but_mounts_the_token() -> None:
    objs = objects({"faults": {"nodeCondition": True}, "kubernetes": {"rbac": {"create": False}}})
    assert of_kind(objs, "ClusterRole") == []
    assert one(objs, "DaemonSet")["spec"]["template"]["spec"][
        "automountServiceAccountToken"] is True

"""The chart rendered by Helm's engine with its defaults, dcgm-exporter's values.yaml and one
values file per feature: every object is valid on each supported Kubernetes version
(kubernetes-validate, strict) or against its CRD, and each feature renders what it says."""

from __future__ import annotations

import base64
from pathlib import Path

import bcrypt
import pytest
import yaml

from exporter.web.webconfig import parse_web_config

from ._chart import (
    Obj,
    env,
    exporter,
    feature_values,
    objects,
    of_kind,
    one,
    upstream_values,
    validation_problems,
    values_file,
)

CASES = ["defaults", "upstream", *feature_values()]


def _values(name: str) -> Obj | None:
    if name == "defaults":
        return None
    if name == "upstream":
        return upstream_values()
    return values_file(name)


@pytest.fixture(scope="module", params=CASES)
def rendered(request: pytest.FixtureRequest) -> tuple[str, list[Obj]]:
    name: str = request.param
    return name, objects(_values(name))


def test_every_object_validates(rendered: tuple[str, list[Obj]]) -> None:
    _, objs = rendered
    assert objs
    assert validation_problems(objs) == []


def test_the_validation_can_fail() -> None:
    objs = objects()
    exporter(objs)["securityContext"]["readOnlyRootFileSystem"] = True
    one(objs, "ServiceMonitor")["spec"]["endpoints"][0]["honorLabel"] = True
    problems = validation_problems(objs)
    assert any("readOnlyRootFileSystem" in p for p in problems)
    assert any("honorLabel" in p for p in problems)


def _pod(objs: list[Obj]) -> Obj:
    spec: Obj = one(objs, "DaemonSet")["spec"]["template"]["spec"]
    return spec


def _volumes(objs: list[Obj]) -> dict[str, Obj]:
    return {v["name"]: v for v in _pod(objs)["volumes"]}


def _mounts(objs: list[Obj]) -> dict[str, str]:
    return {m["name"]: m["mountPath"] for m in exporter(objs)["volumeMounts"]}


def test_defaults_need_no_api_access() -> None:
    objs = objects()
    assert _pod(objs)["automountServiceAccountToken"] is False
    assert one(objs, "ServiceAccount")["automountServiceAccountToken"] is False
    assert of_kind(objs, "ClusterRole") == of_kind(objs, "Role") == []
    assert {o["kind"] for o in objs} == {"ServiceAccount", "Service", "DaemonSet",
                                         "ServiceMonitor"}
    assert env(exporter(objs))["DCGM_EXPORTER_KUBERNETES"] == "true"
    assert "args" not in exporter(objs)


def test_tls_serves_a_certificate_the_chart_made() -> None:
    objs = objects(values_file("tls"))
    secret = one(objs, "Secret")
    assert set(secret["data"]) == {"tls.crt", "tls.key", "ca.crt"}
    config = one(objs, "ConfigMap")
    path = env(exporter(objs))["DCGM_EXPORTER_WEB_CONFIG_FILE"]
    folder, _, key = path.rpartition("/")
    assert _mounts(objs)["web-config"] == folder
    assert _volumes(objs)["web-config"]["configMap"]["name"] == config["metadata"]["name"]
    tls = parse_web_config(config["data"][key], Path(path)).tls
    assert tls is not None
    assert str(tls.cert_file).startswith(_mounts(objs)["tls"] + "/")
    assert _volumes(objs)["tls"]["secret"]["secretName"] == secret["metadata"]["name"]
    endpoint = one(objs, "ServiceMonitor")["spec"]["endpoints"][0]
    assert endpoint["scheme"] == "https"
    assert endpoint["tlsConfig"]["ca"]["secret"] == {"name": secret["metadata"]["name"],
                                                     "key": "ca.crt"}
    # The probes stay plain HTTP: the exporter answers them without TLS.
    assert exporter(objs)["readinessProbe"]["httpGet"].get("scheme", "HTTP") == "HTTP"


def test_basic_auth_keeps_hashes_that_match_the_passwords() -> None:
    values = values_file("basic-auth")
    objs = objects(values)
    text = one(objs, "ConfigMap")["data"]["web-config.yaml"]
    config = parse_web_config(text, Path("/etc/dcgm-exporter/web/web-config.yaml"))
    assert config.tls is None
    for user, password in values["basicAuth"]["users"].items():
        assert password not in text
        assert bcrypt.checkpw(password.encode(), config.users[user].encode())
    assert not bcrypt.checkpw(b"wrong", config.users["prometheus"].encode())
    assert one(objs, "ServiceMonitor")["spec"]["endpoints"][0]["scheme"] == "http"


def _read_pods_rules(objs: list[Obj]) -> list[Obj]:
    role, binding = one(objs, "ClusterRole"), one(objs, "ClusterRoleBinding")
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    account = one(objs, "ServiceAccount")["metadata"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": account["name"],
                                    "namespace": account["namespace"]}]
    assert _pod(objs)["automountServiceAccountToken"] is True
    rules: list[Obj] = role["rules"]
    return rules


POD_RULE = {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}


def test_pod_labels_set_dcgm_exporters_variables_and_read_access() -> None:
    objs = objects(values_file("pod-labels"))
    assert _read_pods_rules(objs) == [POD_RULE]
    variables = env(exporter(objs))
    assert variables["DCGM_EXPORTER_KUBERNETES_ENABLE_POD_LABELS"] == "true"
    assert variables["DCGM_EXPORTER_KUBERNETES_ENABLE_POD_UID"] == "true"
    assert variables["DCGM_EXPORTER_KUBERNETES_POD_LABEL_ALLOWLIST_REGEX"] == \
        r"^app$,^llm-d\.ai/.*$"


def test_presets_name_the_exporters_preset() -> None:
    objs = objects(values_file("presets"))
    assert _read_pods_rules(objs) == [POD_RULE]
    assert env(exporter(objs))["GPU_EXPORTER_POD_LABELS"] == "inference"


def test_dra_reads_resource_slices_too() -> None:
    objs = objects(values_file("dra"))
    assert _read_pods_rules(objs) == [POD_RULE, {
        "apiGroups": ["resource.k8s.io"], "resources": ["resourceslices"],
        "verbs": ["get", "list", "watch"]}]
    assert env(exporter(objs))["KUBERNETES_ENABLE_DRA"] == "true"


def test_rbac_create_false_leaves_rbac_to_the_user_but_mounts_the_token() -> None:
    objs = objects({"kubernetes": {"enablePodLabels": True, "rbac": {"create": False}}})
    assert of_kind(objs, "ClusterRole") == []
    assert _pod(objs)["automountServiceAccountToken"] is True


def test_podmonitor_scrapes_the_pods() -> None:
    objs = objects(values_file("podmonitor"))
    assert of_kind(objs, "Service") == of_kind(objs, "ServiceMonitor") == []
    monitor = one(objs, "PodMonitor")
    assert monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    assert monitor["spec"]["selector"]["matchLabels"].items() <= \
        one(objs, "DaemonSet")["spec"]["template"]["metadata"]["labels"].items()
    endpoint = monitor["spec"]["podMetricsEndpoints"][0]
    assert endpoint["port"] == exporter(objs)["ports"][0]["name"]
    assert endpoint["honorLabels"] is True


def test_custom_metrics_are_mounted_and_named() -> None:
    values = values_file("custom-metrics")
    objs = objects(values)
    config_map = one(objs, "ConfigMap")
    assert config_map["metadata"]["name"] == "exporter-metrics-config-map"
    assert config_map["data"]["metrics"] == values["customMetrics"]
    path = env(exporter(objs))["GPU_EXPORTER_COLLECTORS"]
    folder, _, file_name = path.rpartition("/")
    assert _mounts(objs)["collectors"] == folder
    items = _volumes(objs)["collectors"]["configMap"]["items"]
    assert items == [{"key": "metrics", "path": file_name}]


def test_configmap_data_reads_one_configmap() -> None:
    objs = objects(values_file("configmap-data"))
    role, binding = one(objs, "Role"), one(objs, "RoleBinding")
    assert role["metadata"]["namespace"] == "gpu-monitoring"
    assert role["rules"] == [{"apiGroups": [""], "resources": ["configmaps"],
                              "resourceNames": ["exporter-metrics-config-map"],
                              "verbs": ["get"]}]
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert _pod(objs)["automountServiceAccountToken"] is True
    assert of_kind(objs, "ClusterRole") == []


def test_network_policy_opens_the_metrics_port_to_the_monitoring_namespace() -> None:
    objs = objects(values_file("network-policy"))
    policy = one(objs, "NetworkPolicy")["spec"]
    assert policy["podSelector"]["matchLabels"].items() <= \
        one(objs, "DaemonSet")["spec"]["template"]["metadata"]["labels"].items()
    assert policy["ingress"] == [{
        "ports": [{"port": "metrics", "protocol": "TCP"}],
        "from": [{"namespaceSelector": {"matchLabels": {
            "kubernetes.io/metadata.name": "monitoring"}}}]}]
    assert policy["policyTypes"] == ["Ingress", "Egress"]
    open_egress = one(objects({"networkPolicy": {"enabled": True}}), "NetworkPolicy")["spec"]
    assert open_egress["policyTypes"] == ["Ingress"]
    assert "egress" not in open_egress
    assert "from" not in open_egress["ingress"][0]


def test_rules_and_dashboards_go_where_asked() -> None:
    rules = of_kind(objects(values_file("rules")), "PrometheusRule")
    assert [r["metadata"]["name"] for r in rules] == ["dcgm-exporter-alerts",
                                                      "dcgm-exporter-usage"]
    assert all(r["metadata"]["labels"]["release"] == "kube-prometheus-stack" for r in rules)
    boards = of_kind(objects(values_file("dashboards")), "ConfigMap")
    assert len(boards) == 6
    for board in boards:
        assert board["metadata"]["namespace"] == "monitoring"
        assert board["metadata"]["labels"]["grafana_dashboard"] == "1"
        assert board["metadata"]["annotations"] == {"grafana_folder": "GPU"}
    only = of_kind(objects({"dashboards": {"enabled": True, "include": ["gpu-mig"],
                                           "folder": ""}}), "ConfigMap")
    assert [list(b["data"]) for b in only] == [["gpu-mig.json"]]
    assert "annotations" not in only[0]["metadata"]


def test_probe_timing_and_upstream_probe_values() -> None:
    objs = objects(upstream_values())
    container = exporter(objs)
    assert container["livenessProbe"]["initialDelaySeconds"] == 45
    assert container["livenessProbe"]["periodSeconds"] == 5
    assert container["readinessProbe"]["initialDelaySeconds"] == 45
    assert container["livenessProbe"]["httpGet"] == {"path": "/health", "port": "metrics"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/ready", "port": "metrics"}


def test_secret_pem_values_are_encoded() -> None:
    objs = objects({"tlsServerConfig": {"enabled": True, "autoGenerated": False,
                                        "cert": "CERT", "key": "KEY"}})
    data = one(objs, "Secret")["data"]
    assert {k: base64.b64decode(v).decode() for k, v in data.items()} == \
        {"tls.crt": "CERT", "tls.key": "KEY"}


def test_the_rendered_yaml_has_no_duplicate_keys() -> None:
    """PyYAML keeps the last of two equal keys; Kubernetes' strict decoding refuses them."""
    from tests.chart._chart import render

    class Strict(yaml.SafeLoader):
        pass

    def construct(loader: Strict, node: yaml.MappingNode) -> Obj:
        keys = [loader.construct_object(k) for k, _ in node.value]
        assert len(keys) == len(set(keys)), keys
        return dict(loader.construct_pairs(node))

    Strict.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, construct)
    for name in CASES:
        for template, text in render(_values(name)).items():
            if template.endswith(".yaml"):
                list(yaml.load_all(text, Loader=Strict))  # a SafeLoader

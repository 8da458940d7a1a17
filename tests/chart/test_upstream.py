"""dcgm-exporter's chart (4.8.2, tests/fixtures/dcgm-exporter-chart) next to ours, both
rendered by Helm's engine: its values.yaml installs ours with the same meaning, and a release
moved from it keeps the Service, selectors and scrape settings that monitors, dashboards and
alerts rely on."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from ._chart import (
    CHART,
    NAMESPACE,
    UPSTREAM_CHART,
    Obj,
    env,
    exporter,
    merged,
    objects,
    of_kind,
    one,
    upstream_values,
)

# Variations of dcgm-exporter's values.yaml a user may have, each with only `image` changed
# for ours.
UPSTREAM_CASES: dict[str, Obj] = {
    "as-shipped": {},
    "pod-labels": {"kubernetes": {"enablePodLabels": True, "enablePodUID": True,
                                  "podLabelAllowlistRegex": ["^app$", "^team$"]}},
    "pod-labels-own-rbac": {"kubernetes": {"enablePodLabels": True, "rbac": {"create": False}}},
    "dra": {"kubernetesDRA": {"enabled": True}},
    "tuned-monitor": {"serviceMonitor": {
        "interval": "30s", "scrapeTimeout": "20s", "honorLabels": True,
        "additionalLabels": {"release": "kube-prometheus-stack"},
        "relabelings": [{"sourceLabels": ["__meta_kubernetes_pod_node_name"],
                         "targetLabel": "nodename", "action": "replace"}],
        "metricRelabelings": [{"action": "drop", "regex": "DCGM_FI_DEV_ENC_UTIL",
                               "sourceLabels": ["__name__"]}]}},
    "service-tuned": {"service": {"type": "NodePort", "internalTrafficPolicy": "Local",
                                  "port": 9500, "address": ":9500",
                                  "annotations": {"prometheus.io/scrape": "true"}}},
    "placement": {"nodeSelector": {"gpu": "true"}, "priorityClassName": "",
                  "runtimeClassName": "nvidia", "hostPID": True, "hostNetwork": True,
                  "podLabels": {"team": "ml"}, "podAnnotations": {"a": "b"},
                  "tolerations": [{"operator": "Exists"}],
                  "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                      "nodeSelectorTerms": [{"matchExpressions": [
                          {"key": "nvidia-gpu", "operator": "Exists"}]}]}}},
                  "extraEnv": [{"name": "DCGM_EXPORTER_INTERVAL", "value": "10000"}],
                  "extraHostVolumes": [{"name": "host-binaries", "hostPath": "/opt/bin"}],
                  "kubeletPath": "/var/lib/k0s/kubelet/pod-resources",
                  "arguments": ["-f", "/etc/dcgm-exporter/default-counters.csv", "-n"]},
    "custom-metrics": {"customMetrics": "DCGM_FI_DEV_GPU_TEMP, gauge, GPU temperature (C).\n"},
    "fullname": {"fullnameOverride": "gpu-metrics", "namespaceOverride": "telemetry"},
}


def _upstream(values: Obj, name: str = "dcgm-exporter") -> list[Obj]:
    raw = yaml.safe_load((UPSTREAM_CHART / "values.yaml").read_text(encoding="utf-8"))
    return objects(merged(raw, values), name=name, chart=UPSTREAM_CHART)


def _ours(values: Obj, name: str = "dcgm-exporter") -> list[Obj]:
    return objects(merged(upstream_values(), values), name=name)


# ----------------------------------------------------------------------------- migration


MOVES = [("dcgm-exporter", "dcgm-exporter"), ("gpu-metrics", "gpu-metrics-dcgm-exporter"),
         ("prod", "dcgm-exporter")]


@pytest.mark.parametrize(("release", "fullname"), MOVES)
def test_a_moved_release_keeps_its_service_and_selectors(release: str, fullname: str) -> None:
    values = {"fullnameOverride": fullname}
    theirs, ours = _upstream(values, release), _ours(values, release)
    their_svc, our_svc = one(theirs, "Service"), one(ours, "Service")
    for key in ("name", "namespace"):
        assert our_svc["metadata"][key] == their_svc["metadata"][key]
    assert our_svc["spec"]["ports"] == their_svc["spec"]["ports"]
    assert our_svc["spec"]["selector"] == their_svc["spec"]["selector"]
    # Labels of theirs that a selector may use are all on ours.
    their_labels = {k: v for k, v in their_svc["metadata"]["labels"].items()
                    if not k.startswith(("helm.sh/", "app.kubernetes.io/version"))}
    assert their_labels.items() <= our_svc["metadata"]["labels"].items()
    # A DaemonSet's selector cannot change: `helm upgrade` would be refused.
    their_ds, our_ds = one(theirs, "DaemonSet"), one(ours, "DaemonSet")
    assert our_ds["metadata"]["name"] == their_ds["metadata"]["name"]
    assert our_ds["spec"]["selector"] == their_ds["spec"]["selector"]
    # Their ServiceMonitor (or one a user wrote like it) selects our Service; ours is the
    # same object, scraping the same port.
    their_sm, our_sm = one(theirs, "ServiceMonitor"), one(ours, "ServiceMonitor")
    assert our_sm["metadata"]["name"] == their_sm["metadata"]["name"]
    assert their_sm["spec"]["selector"]["matchLabels"].items() <= \
        our_svc["metadata"]["labels"].items()
    assert our_sm["spec"]["namespaceSelector"] == their_sm["spec"]["namespaceSelector"]
    assert exporter(ours)["ports"] == [
        {"name": p["name"], "containerPort": p["containerPort"], "protocol": "TCP"}
        for p in exporter(theirs)["ports"]]


def test_without_fullname_override_the_name_differs() -> None:
    """Why the README says to set fullnameOverride: the derived name uses the chart's name."""
    assert one(_upstream({}, "metrics"), "Service")["metadata"]["name"] == \
        "metrics-dcgm-exporter"
    assert one(_ours({}, "metrics"), "Service")["metadata"]["name"] == "metrics-gpu-exporter"


def test_the_alerts_job_regex_matches_the_default_names() -> None:
    """GpuExporterDown watches `up{job=~...}`; a ServiceMonitor's job is the Service's name."""
    import re

    from exporter.artifacts.alerts import AlertConfig

    pattern = re.compile(AlertConfig().job_regex)
    for release, fullname in [*MOVES, ("gpu-exporter", None), ("metrics", None)]:
        values = {} if fullname is None else {"fullnameOverride": fullname}
        name = one(_ours(values, release), "Service")["metadata"]["name"]
        assert pattern.fullmatch(name), name


# ----------------------------------------------------------------------------- same meaning


def _endpoint(objs: list[Obj]) -> Obj:
    endpoint: Obj = one(objs, "ServiceMonitor")["spec"]["endpoints"][0]
    return endpoint


def _env_vars(objs: list[Obj]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom"))
            for e in exporter(objs).get("env", [])}


@pytest.fixture(scope="module", params=sorted(UPSTREAM_CASES))
def pair(request: pytest.FixtureRequest) -> tuple[str, list[Obj], list[Obj]]:
    name: str = request.param
    # As a moved release has it (the derived full names differ: the charts' names do).
    values = {"fullnameOverride": "dcgm-exporter", **UPSTREAM_CASES[name]}
    return name, _upstream(values), _ours(values)


def test_the_container_gets_their_args_and_env(pair: tuple[str, list[Obj], list[Obj]]) -> None:
    _, theirs, ours = pair
    assert exporter(ours).get("args", []) == [str(a) for a in exporter(theirs)["args"]]
    their_env, our_env = _env_vars(theirs), _env_vars(ours)
    their_env.pop("DCGM_EXPORTER_WEB_CONFIG_FILE", None)  # ours mounts it elsewhere
    assert their_env.items() <= our_env.items()


def test_the_pod_gets_their_placement_and_volumes(pair: tuple[str, list[Obj], list[Obj]]) -> None:
    _, theirs, ours = pair
    their_pod = one(theirs, "DaemonSet")["spec"]["template"]
    our_pod = one(ours, "DaemonSet")["spec"]["template"]
    assert their_pod["metadata"]["labels"].items() <= our_pod["metadata"]["labels"].items()
    assert our_pod["metadata"].get("annotations") == their_pod["metadata"].get("annotations")
    for key in ("nodeSelector", "tolerations", "affinity", "runtimeClassName",
                "priorityClassName", "hostPID", "hostNetwork", "dnsPolicy",
                "automountServiceAccountToken", "serviceAccountName"):
        if key == "automountServiceAccountToken" and "own-rbac" in pair[0]:
            continue  # theirs mounts no token without their RBAC, so pod labels cannot work
        assert our_pod["spec"].get(key) == their_pod["spec"].get(key), key
    our_volumes = {v["name"]: v for v in our_pod["spec"]["volumes"]}
    for volume in their_pod["spec"]["volumes"]:
        if volume["name"] in ("web-config-yaml", "tls"):
            continue
        ours_of = our_volumes[volume["name"]]
        if "hostPath" in volume:
            assert ours_of["hostPath"]["path"] == volume["hostPath"]["path"]
        else:
            assert ours_of == volume
    our_mounts = {m["mountPath"]: m for m in exporter(ours)["volumeMounts"]}
    for mount in exporter(theirs)["volumeMounts"]:
        if mount["name"] in ("web-config-yaml", "tls"):
            continue
        assert our_mounts[mount["mountPath"]]["name"] == mount["name"]


def test_the_monitor_and_service_say_what_theirs_say(
        pair: tuple[str, list[Obj], list[Obj]]) -> None:
    _, theirs, ours = pair
    their_ep, our_ep = _endpoint(theirs), _endpoint(ours)
    for key in ("port", "path", "interval", "scrapeTimeout", "honorLabels"):
        assert our_ep[key] == their_ep[key], key
    for key in ("relabelings", "metricRelabelings"):
        assert our_ep.get(key, []) == (their_ep[key] or []), key
    their_labels = one(theirs, "ServiceMonitor")["metadata"]["labels"]
    assert their_labels.items() - {("helm.sh/chart", their_labels["helm.sh/chart"]),
                                   ("app.kubernetes.io/version", '4.8.2')} <= \
        one(ours, "ServiceMonitor")["metadata"]["labels"].items()
    their_svc, our_svc = one(theirs, "Service"), one(ours, "Service")
    assert our_svc["spec"] == their_svc["spec"]
    assert our_svc["metadata"].get("annotations") == their_svc["metadata"].get("annotations")


def test_pod_access_is_granted_when_theirs_grants_it(
        pair: tuple[str, list[Obj], list[Obj]]) -> None:
    _, theirs, ours = pair
    their_roles, our_roles = of_kind(theirs, "ClusterRole"), of_kind(ours, "ClusterRole")
    assert len(our_roles) == len(their_roles)
    for their_role, our_role in zip(their_roles, our_roles, strict=True):
        granted = {(group, resource, verb) for rule in their_role["rules"]
                   for group in rule["apiGroups"] for resource in rule["resources"]
                   for verb in rule["verbs"]}
        ours_granted = {(group, resource, verb) for rule in our_role["rules"]
                        for group in rule["apiGroups"] for resource in rule["resources"]
                        for verb in rule["verbs"]}
        # Ours is narrower (ResourceSlices only with DRA), never wider, and covers pods.
        assert ours_granted <= granted
        assert {("", "pods", v) for v in ("get", "list", "watch")} <= ours_granted
        binding = one(ours, "ClusterRoleBinding")
        assert binding["roleRef"]["name"] == our_role["metadata"]["name"]


def test_the_metrics_configmap_holds_their_list(pair: tuple[str, list[Obj], list[Obj]]) -> None:
    _, theirs, ours = pair
    their_cm = next(c for c in of_kind(theirs, "ConfigMap")
                    if c["metadata"]["name"] == "exporter-metrics-config-map")
    our_cm = next(c for c in of_kind(ours, "ConfigMap")
                  if c["metadata"]["name"] == "exporter-metrics-config-map")
    assert our_cm["metadata"]["namespace"] == their_cm["metadata"]["namespace"]
    assert _fields(our_cm["data"]["metrics"]) == _fields(their_cm["data"]["metrics"])


# ----------------------------------------------------------------------------- the list


def _rows(text: str) -> Iterator[list[str]]:
    lines = [line for line in text.splitlines()
             if line.strip() and not line.lstrip().startswith("#")]
    for row in csv.reader(io.StringIO("\n".join(lines)), skipinitialspace=True):
        yield [cell.strip() for cell in row]


def _fields(text: str) -> list[tuple[str, str]]:
    """(field, type) in order, as the exporter reads the CSV."""
    return [(row[0], row[1]) for row in _rows(text)]


def test_the_default_list_has_their_fields_and_our_help_texts() -> None:
    ours = (CHART / "files" / "dcgm-exporter-chart-counters.csv").read_text(encoding="utf-8")
    theirs = one([o for o in _upstream({}) if o["metadata"]["name"] ==
                  "exporter-metrics-config-map"], "ConfigMap")["data"]["metrics"]
    assert _fields(ours) == _fields(theirs)
    assert all(row[2] for row in _rows(ours))  # every field has a help text


# ----------------------------------------------------------------------------- the keys


def _leaf_paths(values: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    if isinstance(values, dict) and values:
        for key, value in values.items():
            yield from _leaf_paths(value, (*path, str(key)))
    else:
        yield path


def test_every_key_of_theirs_is_accepted_and_documented() -> None:
    """Each key of their values.yaml is in our schema with a description (the values table of
    the chart's README is generated from those), down to where a value is free-form."""
    schema = json.loads((CHART / "values.schema.json").read_text(encoding="utf-8"))
    theirs = yaml.safe_load((UPSTREAM_CHART / "values.yaml").read_text(encoding="utf-8"))
    # customMetrics is commented out in theirs; initContainers is read by their template.
    theirs.update(customMetrics="", initContainers=[])
    undocumented = []
    for path in _leaf_paths(theirs):
        node: Obj | None = schema
        for key in path:
            assert node is not None
            if "properties" not in node:
                break  # free-form below: labels, a securityContext, ...
            node = node["properties"].get(key)
            if node is None or not node.get("description"):
                undocumented.append(".".join(path))
                break
    assert undocumented == []


_MISSING = object()


def test_keys_beyond_theirs_are_marked_and_theirs_are_not() -> None:
    schema = json.loads((CHART / "values.schema.json").read_text(encoding="utf-8"))
    theirs = yaml.safe_load((UPSTREAM_CHART / "values.yaml").read_text(encoding="utf-8"))
    theirs.update(customMetrics="", initContainers=[])

    def walk(node: Obj, path: tuple[str, ...]) -> Iterator[tuple[tuple[str, ...], Obj]]:
        for key, child in node.get("properties", {}).items():
            yield (*path, key), child
            yield from walk(child, (*path, key))

    wrong = []
    for path, node in walk(schema, ()):
        if path == ("global",) or path[0] in ("livenessProbe", "readinessProbe"):
            continue  # Helm's own key; probe timings are Kubernetes' fields
        known: Any = theirs
        for key in path:
            known = known.get(key, _MISSING) if isinstance(known, dict) else _MISSING
        ours_only = known is _MISSING
        marked = node.get("description", "").startswith("(gpu-exporter)")
        if ours_only != marked:
            wrong.append(".".join(path))
    assert wrong == []


def test_the_namespace_override_moves_every_namespaced_object() -> None:
    objs = _ours({"namespaceOverride": "telemetry", "kubernetes": {"enablePodLabels": True}})
    for obj in objs:
        if obj["kind"] in ("ClusterRole", "ClusterRoleBinding"):
            assert "namespace" not in obj["metadata"]
        else:
            assert obj["metadata"]["namespace"] == "telemetry", obj["kind"]
    assert one(objs, "ClusterRoleBinding")["subjects"][0]["namespace"] == "telemetry"
    assert NAMESPACE != "telemetry"


def test_env_of_ours_names_the_mounted_web_config() -> None:
    ours = _ours({"tlsServerConfig": {"enabled": True}})
    path = env(exporter(ours))["DCGM_EXPORTER_WEB_CONFIG_FILE"]
    mounts = {m["mountPath"] for m in exporter(ours)["volumeMounts"]}
    assert path.rpartition("/")[0] in mounts

"""dcgm-exporter's chart (4.8.2, tests/fixtures/dcgm-exporter-chart, and 4.8.4 as far as its
files were copied, tests/fixtures/dcgm-exporter-4.8.4) next to ours, both rendered by Helm's
engine: its values.yaml installs ours with the same meaning, and a release moved from it
keeps the Service, selectors and scrape settings that monitors, dashboards and alerts rely
on."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from ._chart import (
    CHART,
    NAMESPACE,
    OUR_IMAGE,
    UPSTREAM_484,
    UPSTREAM_CHART,
    Obj,
    env,
    exporter,
    helm,
    merged,
    objects,
    of_kind,
    one,
    upstream_484_chart,
    upstream_objects,
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

# The values 4.8.4 added (tests/fixtures/dcgm-exporter-4.8.4/values.yaml), each set as a
# user of that chart would.
UPSTREAM_484_CASES: dict[str, Obj] = {
    "config": {"config": {"enabled": True}},
    "config-own": {"config": {"enabled": True, "create": False, "name": "site-config",
                              "key": "exporter.yaml", "mountPath": "/etc/site/exporter.yaml"}},
    "digest": {"image": {"digest": "sha256:" + "ab" * 32}},
    "timeouts": {"service": {"webReadTimeout": "5s", "webWriteTimeout": "1m"}},
    "annotations": {"daemonSetAnnotations": {"configmap.reloader.stakater.com/reload":
                                             "dcgm-exporter-config"}},
    "probes": {"livenessProbe": {"timeoutSeconds": 3, "failureThreshold": 6},
               "readinessProbe": {"periodSeconds": 10, "timeoutSeconds": 2,
                                  "failureThreshold": 4}},
    "debug-dump": {"debugDump": {"enabled": True, "compression": False, "retention": 6}},
    "token-set": {"serviceAccount": {"automountServiceAccountToken": True}},
    "token-refused": {"serviceAccount": {"automountServiceAccountToken": False},
                      "kubernetes": {"enablePodLabels": True}},
    "arguments": {"arguments": ["-c", "10000", "--dump-compression"]},
}

VERSIONS = ("4.8.2", "4.8.4")


def _values_yaml(version: str) -> Obj:
    folder = UPSTREAM_CHART if version == "4.8.2" else UPSTREAM_484
    values: Obj = yaml.safe_load((folder / "values.yaml").read_text(encoding="utf-8"))
    return values


def _their_chart(version: str) -> Path:
    return UPSTREAM_CHART if version == "4.8.2" else upstream_484_chart()


def _upstream(values: Obj, name: str = "dcgm-exporter", version: str = "4.8.2") -> list[Obj]:
    return upstream_objects(merged(_values_yaml(version), values), name=name,
                            chart=_their_chart(version))


def _ours(values: Obj, name: str = "dcgm-exporter", version: str = "4.8.2") -> list[Obj]:
    """Ours with their values.yaml, `image` changed (a digest of theirs kept)."""
    mine = merged(_values_yaml(version), values)
    mine["image"] = {**OUR_IMAGE, **({"digest": mine["image"]["digest"]}
                                     if mine["image"].get("digest") else {})}
    return objects(mine, name=name)


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


RELEASES_NAMED_AS_THEIRS = ("dcgm-exporter", "prod-dcgm-exporter", "dcgm-exporter-a100")
NAMED_CASES = [(version, case) for version in VERSIONS
               for case in ("as-shipped", "pod-labels", "dra", "tls")] + [("4.8.4", "config")]


@pytest.mark.parametrize(("version", "case"), NAMED_CASES)
@pytest.mark.parametrize("release", RELEASES_NAMED_AS_THEIRS)
def test_a_release_named_as_theirs_keeps_every_objects_name(release: str, version: str,
                                                            case: str) -> None:
    """`helm upgrade <release> charts/gpu-exporter -f their-values.yaml`, no extra value:
    each object of ours replaces theirs of the same kind and name."""
    values = {**UPSTREAM_CASES, **UPSTREAM_484_CASES,
              "tls": {"tlsServerConfig": {"enabled": True}}}[case]
    theirs = {(o["kind"], o["metadata"]["name"]) for o in _upstream(values, release, version)}
    ours = {(o["kind"], o["metadata"]["name"]) for o in _ours(values, release, version)}
    assert ("Service", release) in ours
    assert ours <= theirs
    # What theirs always makes and ours only when `-m` asks for it: the Role reading the
    # metrics ConfigMap and its binding (`helm upgrade` deletes both).
    assert theirs - ours == {("Role", "dcgm-exporter-read-cm"), ("RoleBinding", release)}


def test_the_config_configmap_is_named_as_their_values_say() -> None:
    """4.8.4's values.yaml: `name` "Defaults to <release-name>-dcgm-exporter-config"."""
    comment = (UPSTREAM_484 / "values.yaml").read_text(encoding="utf-8")
    assert '"<release-name>-dcgm-exporter-config"' in comment
    for release in ("prod", "prod-dcgm-exporter"):
        full = release if "dcgm-exporter" in release else f"{release}-dcgm-exporter"
        theirs = [o["metadata"]["name"] for o in of_kind(_upstream(
            {"config": {"enabled": True}}, release, "4.8.4"), "ConfigMap")]
        assert f"{full}-config" in theirs
    ours = [o["metadata"]["name"] for o in of_kind(_ours(
        {"config": {"enabled": True}}, "prod-dcgm-exporter", "4.8.4"), "ConfigMap")]
    assert "prod-dcgm-exporter-config" in ours


def test_without_fullname_override_the_name_differs() -> None:
    """Why the README says to set fullnameOverride where the release's name does not contain
    dcgm-exporter: the derived name uses the chart's name."""
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


PAIRS = [(version, name) for version in VERSIONS for name in sorted(UPSTREAM_CASES)] + \
    [("4.8.4", name) for name in sorted(UPSTREAM_484_CASES)]


@pytest.fixture(scope="module", params=PAIRS, ids=[f"{v}-{n}" for v, n in PAIRS])
def pair(request: pytest.FixtureRequest) -> tuple[str, list[Obj], list[Obj]]:
    version, name = request.param
    # As a moved release has it (the derived full names differ: the charts' names do).
    values = {"fullnameOverride": "dcgm-exporter",
              **UPSTREAM_CASES.get(name, UPSTREAM_484_CASES.get(name, {}))}
    return name, _upstream(values, version=version), _ours(values, version=version)


def test_the_container_gets_their_args_and_env(pair: tuple[str, list[Obj], list[Obj]]) -> None:
    _, theirs, ours = pair
    # No args stanza where theirs has none (4.8.4 with `arguments: []`).
    assert exporter(ours).get("args") == (
        [str(a) for a in exporter(theirs)["args"]] if "args" in exporter(theirs) else None)
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
        # Ours mounts the web config elsewhere, and no host directory for debug dumps (it
        # writes none).
        if volume["name"] in ("web-config-yaml", "tls", "debug-dumps"):
            continue
        ours_of = our_volumes[volume["name"]]
        if "hostPath" in volume:
            assert ours_of["hostPath"]["path"] == volume["hostPath"]["path"]
        elif volume["name"] == "dcgm-exporter-config":
            # Read-only to everyone in ours; 0664 in theirs.
            assert ours_of["configMap"]["name"] == volume["configMap"]["name"]
        else:
            assert ours_of == volume
    our_mounts = {m["mountPath"]: m for m in exporter(ours)["volumeMounts"]}
    for mount in exporter(theirs)["volumeMounts"]:
        if mount["name"] in ("web-config-yaml", "tls", "debug-dumps"):
            continue
        assert our_mounts[mount["mountPath"]]["name"] == mount["name"]
        assert our_mounts[mount["mountPath"]].get("subPath") == mount.get("subPath")
    their_ds, our_ds = one(theirs, "DaemonSet"), one(ours, "DaemonSet")
    assert our_ds["metadata"].get("annotations") == their_ds["metadata"].get("annotations")
    assert exporter(ours)["image"].partition("@")[2] == exporter(theirs)["image"].partition("@")[2]


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
                                   ("app.kubernetes.io/version",
                                    their_labels["app.kubernetes.io/version"])} <= \
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


def _their_keys(version: str) -> Obj:
    theirs = _values_yaml(version)
    # customMetrics is commented out in theirs; initContainers is read by their template.
    theirs.update(customMetrics="", initContainers=[])
    return theirs


def _only(path: tuple[str, ...], value: Any) -> Obj:
    for key in reversed(path):
        value = {key: value}
    out: Obj = value
    return out


@pytest.mark.parametrize("version", VERSIONS)
def test_our_schema_takes_every_value_of_theirs(version: str) -> None:
    """Each key path of their values.yaml, alone with their value, passes our schema (Helm's
    validation): a newer values.yaml fails here with exactly its new keys listed."""
    helm_python = helm()
    refused = []
    with helm_python.Chart.load(CHART) as chart:
        for path in _leaf_paths(_their_keys(version)):
            value: Any = _values_yaml(version)
            for key in path:
                value = value.get(key) if isinstance(value, dict) else None
            try:
                chart.validate_schema(_only(path, value))
            except helm_python.HelmValuesError as err:
                refused.append(f"{'.'.join(path)}: {err}")
        # The probes' optional fields that 4.8.4's values.yaml has commented out.
        for path in (("livenessProbe", "timeoutSeconds"), ("livenessProbe", "failureThreshold"),
                     ("readinessProbe", "periodSeconds"), ("readinessProbe", "timeoutSeconds"),
                     ("readinessProbe", "failureThreshold")):
            chart.validate_schema(_only(path, 3))
    assert refused == []


def test_the_schema_check_lists_a_key_ours_lacks() -> None:
    """The check above can fail: a key of a later values.yaml is refused by name."""
    helm_python = helm()
    with helm_python.Chart.load(CHART) as chart, pytest.raises(helm_python.HelmValuesError,
                                                               match="webIdleTimeout"):
        chart.validate_schema(_only(("service", "webIdleTimeout"), "60s"))


@pytest.mark.parametrize("version", VERSIONS)
def test_every_key_of_theirs_is_accepted_and_documented(version: str) -> None:
    """Each key of their values.yaml is in our schema with a description (the values table of
    the chart's README is generated from those), down to where a value is free-form."""
    schema = json.loads((CHART / "values.schema.json").read_text(encoding="utf-8"))
    theirs = _their_keys(version)
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
    # Keys of either release of theirs.
    theirs = merged(_their_keys("4.8.2"), _their_keys("4.8.4"))

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

"""The manifests under deploy/daemonset and deploy/sidecar: schema validity (built-in kinds
with kubernetes-validate --strict, ServiceMonitor/PodMonitor against the Prometheus Operator
CRDs) and the properties that make them work, each shown to catch a broken copy."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest

from exporter import __version__

from ._manifests import (
    ALL_CHECKS,
    DEPLOY_DIR,
    EXPORTER_IMAGE,
    KUBERNETES_VERSIONS,
    MANIFEST_DIRS,
    REPO_ROOT,
    Document,
    Obj,
    check_daemonset,
    check_hardening,
    check_monitor_targets,
    check_monitors_honor_labels,
    check_native_sidecar,
    check_pod_resources_mount,
    check_pod_security,
    deepcopy_objs,
    exporter_containers,
    find_privileged,
    is_custom_kind,
    load_tree,
    of_kind,
    pod_spec,
    validate_builtin,
    validate_custom,
)

TREE = load_tree()
OBJECTS = [d.obj for d in TREE.objects]
BUILTIN_DOCS = [d for d in TREE.objects if not is_custom_kind(d.obj)]
CUSTOM_DOCS = [d for d in TREE.objects if is_custom_kind(d.obj)]

def _ids(docs: list[Document]) -> list[str]:
    return [d.where for d in docs]


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kubernetes_validate", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


# ------------------------------------------------------------------------ inventory


@pytest.mark.parametrize("root", MANIFEST_DIRS, ids=lambda p: p.name)
def test_each_example_has_a_workload_and_a_monitor(root: Path) -> None:
    kinds = {d.obj["kind"] for d in TREE.objects if d.path.is_relative_to(root)}
    assert kinds & {"DaemonSet", "Deployment"}, f"{root}: no workload"
    assert kinds & {"ServiceMonitor", "PodMonitor"}, f"{root}: no monitor"
    assert "Namespace" in kinds, f"{root}: no Namespace carrying the Pod Security level"


def test_every_exporter_uses_the_placeholder_image_named_in_the_readme() -> None:
    images = {
        c["image"]
        for wl in OBJECTS
        if wl.get("kind") in ("DaemonSet", "Deployment")
        for c, _ in exporter_containers(wl)
    }
    assert images == {f"{EXPORTER_IMAGE}:{__version__}"}
    readme = (DEPLOY_DIR / "README.md").read_text(encoding="utf-8")
    assert f"{EXPORTER_IMAGE}:{__version__}" in readme


# ----------------------------------------------------------------- schema validation


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
@pytest.mark.parametrize("doc", BUILTIN_DOCS, ids=_ids(BUILTIN_DOCS))
def test_builtin_objects_validate_strictly(doc: Document, version: str) -> None:
    assert validate_builtin(doc.obj, version) == []


@pytest.mark.parametrize("doc", CUSTOM_DOCS, ids=_ids(CUSTOM_DOCS))
def test_monitors_validate_against_their_crds(doc: Document) -> None:
    assert validate_custom(doc.obj) == []


def test_cli_validates_every_builtin_object() -> None:
    """The command a user would run, over every file holding complete objects: each
    built-in object must be reported as validated (INFO), none as an ERROR."""
    files = sorted({str(d.path) for d in TREE.objects})
    done = _cli("--strict", "-k", "1.33", *files)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "ERROR" not in done.stdout
    assert done.stdout.count("INFO ") == len(BUILTIN_DOCS), done.stdout


# ------------------------------------------------- the validators do reject bad copies


def _daemonset() -> Obj:
    return deepcopy_objs(of_kind(OBJECTS, "DaemonSet"))[0]


def test_strict_validation_rejects_a_misspelt_field() -> None:
    ds = _daemonset()
    ctx = pod_spec(ds)["containers"][0]["securityContext"]
    ctx["readOnlyRootFileSystem"] = ctx.pop("readOnlyRootFilesystem")
    problems = validate_builtin(ds, "1.33")
    assert problems
    assert "readOnlyRootFileSystem" in problems[0]
    # The lenient schema would have let the typo through, leaving the root writable.
    kubernetes_validate.validate(ds, "1.33", strict=False)


def test_builtin_validation_rejects_a_wrong_type() -> None:
    svc = deepcopy_objs(of_kind(OBJECTS, "Service"))[0]
    svc["spec"]["ports"][0]["port"] = "9400"
    assert validate_builtin(svc, "1.33")


def test_cli_rejects_a_broken_copy(tmp_path: Path) -> None:
    source = next(d.path for d in TREE.objects if d.obj["kind"] == "DaemonSet")
    text = source.read_text(encoding="utf-8")
    assert "allowPrivilegeEscalation:" in text
    broken = tmp_path / "daemonset.yaml"
    broken.write_text(text.replace("allowPrivilegeEscalation:", "allowPrivilegeEscalatoin:"))
    done = _cli("--strict", "-k", "1.33", str(broken))
    assert done.returncode != 0
    assert "ERROR" in done.stdout
    assert "allowPrivilegeEscalatoin" in done.stdout


def test_crd_validation_rejects_a_misspelt_field() -> None:
    mon = deepcopy_objs(of_kind(OBJECTS, "ServiceMonitor"))[0]
    endpoint = mon["spec"]["endpoints"][0]
    endpoint["honorLabel"] = endpoint.pop("honorLabels")
    problems = validate_custom(mon)
    assert any("honorLabel" in p for p in problems), problems


@pytest.mark.parametrize(
    ("field", "value"),
    [("interval", 15), ("honorLabels", "true"), ("scheme", "gopher")],
)
def test_crd_validation_rejects_a_bad_value(field: str, value: Any) -> None:
    mon = deepcopy_objs(of_kind(OBJECTS, "PodMonitor"))[0]
    mon["spec"]["podMetricsEndpoints"][0][field] = value
    assert validate_custom(mon)


def test_crd_validation_rejects_a_bad_relabel_action() -> None:
    mon = deepcopy_objs(of_kind(OBJECTS, "ServiceMonitor"))[0]
    mon["spec"]["endpoints"][0]["relabelings"][-1]["action"] = "labeldelete"
    assert validate_custom(mon)


def test_monitor_metadata_is_checked_as_object_meta() -> None:
    mon = deepcopy_objs(of_kind(OBJECTS, "PodMonitor"))[0]
    mon["metadata"]["labels"]["release"] = 7
    assert any(p.startswith("metadata:") for p in validate_custom(mon))


# ------------------------------------------------------------- the properties that matter


@pytest.mark.parametrize("check", ALL_CHECKS, ids=lambda c: c.__name__)
def test_manifests_have_the_property(check: Callable[[list[Obj]], list[str]]) -> None:
    assert check(OBJECTS) == []


def _ds_exporter(objs: list[Obj]) -> Obj:
    container: Obj = pod_spec(of_kind(objs, "DaemonSet")[0])["containers"][0]
    return container


def _sidecar(objs: list[Obj]) -> Obj:
    container: Obj = pod_spec(of_kind(objs, "Deployment")[0])["initContainers"][0]
    return container


def _volume(objs: list[Obj], kind: str, name: str) -> Obj:
    volumes = pod_spec(of_kind(objs, kind)[0])["volumes"]
    found: Obj = next(v for v in volumes if v["name"] == name)
    return found


def _env(container: Obj, name: str) -> Obj:
    found: Obj = next(e for e in container["env"] if e["name"] == name)
    return found


def _set_socket_path(objs: list[Obj]) -> None:
    host_path = _volume(objs, "DaemonSet", "pod-gpu-resources")["hostPath"]
    host_path.update(path="/var/lib/kubelet/pod-resources/kubelet.sock", type="Socket")


def _make_plain_container(objs: list[Obj]) -> None:
    spec = pod_spec(of_kind(objs, "Deployment")[0])
    sidecar = spec.pop("initContainers")[0]
    del sidecar["restartPolicy"]
    spec["containers"].append(sidecar)


def _monitor_endpoint(objs: list[Obj], kind: str) -> Obj:
    mon = of_kind(objs, kind)[0]
    key = "endpoints" if kind == "ServiceMonitor" else "podMetricsEndpoints"
    endpoint: Obj = mon["spec"][key][0]
    return endpoint


Mutation = Callable[[list[Obj]], None]

BROKEN_COPIES: list[tuple[str, Mutation, Callable[[list[Obj]], list[str]]]] = [
    (
        "servicemonitor-honorlabels-false",
        lambda o: _monitor_endpoint(o, "ServiceMonitor").update(honorLabels=False),
        check_monitors_honor_labels,
    ),
    (
        "podmonitor-honorlabels-missing",
        lambda o: _monitor_endpoint(o, "PodMonitor").pop("honorLabels"),
        check_monitors_honor_labels,
    ),
    ("hostpath-is-the-socket", _set_socket_path, check_pod_resources_mount),
    (
        "mount-writable",
        lambda o: _sidecar(o)["volumeMounts"][0].pop("readOnly"),
        check_pod_resources_mount,
    ),
    (
        "mounted-elsewhere",
        lambda o: _ds_exporter(o)["volumeMounts"][0].update(mountPath="/kubelet"),
        check_pod_resources_mount,
    ),
    ("sidecar-as-plain-container", _make_plain_container, check_native_sidecar),
    (
        "sidecar-plain-init-container",
        lambda o: _sidecar(o).pop("restartPolicy"),
        check_native_sidecar,
    ),
    (
        "pod-namespace-from-name",
        lambda o: _env(_sidecar(o), "POD_NAMESPACE")["valueFrom"]["fieldRef"].update(
            fieldPath="metadata.name"
        ),
        check_native_sidecar,
    ),
    (
        "pod-name-missing",
        lambda o: _sidecar(o)["env"].remove(_env(_sidecar(o), "POD_NAME")),
        check_native_sidecar,
    ),
    (
        "sidecar-node-scope",
        lambda o: _sidecar(o).update(args=["serve", "-k"]),
        check_native_sidecar,
    ),
    (
        "sidecar-readiness-probe",
        lambda o: _sidecar(o).update(readinessProbe=_ds_exporter(o)["readinessProbe"]),
        check_native_sidecar,
    ),
    (
        "sidecar-requests-a-gpu",
        lambda o: _sidecar(o)["resources"]["limits"].update({"nvidia.com/gpu": 1}),
        check_native_sidecar,
    ),
    (
        "sidecar-without-visible-devices",
        lambda o: _sidecar(o)["env"].remove(_env(_sidecar(o), "NVIDIA_VISIBLE_DEVICES")),
        check_native_sidecar,
    ),
    (
        "capabilities-not-dropped",
        lambda o: _sidecar(o)["securityContext"]["capabilities"].update(drop=["NET_RAW"]),
        check_hardening,
    ),
    (
        "capability-added",
        lambda o: _ds_exporter(o)["securityContext"]["capabilities"].update(add=["SYS_ADMIN"]),
        check_hardening,
    ),
    (
        "privilege-escalation",
        lambda o: _ds_exporter(o)["securityContext"].pop("allowPrivilegeEscalation"),
        check_hardening,
    ),
    (
        "writable-root",
        lambda o: _sidecar(o)["securityContext"].update(readOnlyRootFilesystem=False),
        check_hardening,
    ),
    (
        "non-root",
        lambda o: _ds_exporter(o)["securityContext"].update(runAsUser=65534),
        check_hardening,
    ),
    (
        "privileged-container",
        lambda o: _ds_exporter(o)["securityContext"].update(privileged=True),
        find_privileged,
    ),
    (
        "privileged-inference-container",
        lambda o: pod_spec(of_kind(o, "Deployment")[0])["containers"][0].update(
            securityContext={"privileged": True}
        ),
        find_privileged,
    ),
    (
        "servicemonitor-selects-nothing",
        lambda o: of_kind(o, "ServiceMonitor")[0]["spec"]["selector"]["matchLabels"].update(
            {"app.kubernetes.io/name": "gpu-exporter"}
        ),
        check_monitor_targets,
    ),
    (
        "service-port-renamed",
        lambda o: of_kind(o, "Service")[0]["spec"]["ports"][0].update(name="http-metrics"),
        check_monitor_targets,
    ),
    (
        "service-targets-wrong-port",
        lambda o: of_kind(o, "Service")[0]["spec"]["ports"][0].update(targetPort=9401),
        check_monitor_targets,
    ),
    (
        "service-selects-no-pod",
        lambda o: of_kind(o, "Service")[0]["spec"]["selector"].update(
            {"app.kubernetes.io/component": "other"}
        ),
        check_monitor_targets,
    ),
    (
        "daemonset-container-port-9401",
        lambda o: _ds_exporter(o)["ports"][0].update(containerPort=9401),
        check_monitor_targets,
    ),
    (
        "podmonitor-scrapes-inference-port",
        lambda o: _monitor_endpoint(o, "PodMonitor").update(port="http"),
        check_monitor_targets,
    ),
    (
        "podmonitor-selects-nothing",
        lambda o: of_kind(o, "PodMonitor")[0]["spec"]["selector"]["matchLabels"].update(
            {"app.kubernetes.io/name": "other"}
        ),
        check_monitor_targets,
    ),
    (
        "inference-port-also-named-metrics",
        lambda o: pod_spec(of_kind(o, "Deployment")[0])["containers"][0]["ports"][0].update(
            name="metrics"
        ),
        check_monitor_targets,
    ),
    (
        "no-gpu-toleration",
        lambda o: pod_spec(of_kind(o, "DaemonSet")[0]).pop("tolerations"),
        check_daemonset,
    ),
    (
        "readiness-wrong-path",
        lambda o: _ds_exporter(o)["readinessProbe"]["httpGet"].update(path="/readyz"),
        check_daemonset,
    ),
    (
        "liveness-wrong-port",
        lambda o: _ds_exporter(o)["livenessProbe"]["httpGet"].update(port=8080),
        check_daemonset,
    ),
    (
        "node-name-from-pod-name",
        lambda o: _env(_ds_exporter(o), "NODE_NAME")["valueFrom"]["fieldRef"].update(
            fieldPath="metadata.name"
        ),
        check_daemonset,
    ),
    (
        "driver-capabilities-missing",
        lambda o: _ds_exporter(o)["env"].remove(
            _env(_ds_exporter(o), "NVIDIA_DRIVER_CAPABILITIES")
        ),
        check_daemonset,
    ),
    (
        "no-gpu-node-selector",
        lambda o: pod_spec(of_kind(o, "DaemonSet")[0]).pop("nodeSelector"),
        check_daemonset,
    ),
    (
        "namespace-baseline",
        lambda o: of_kind(o, "Namespace")[0]["metadata"]["labels"].update(
            {"pod-security.kubernetes.io/enforce": "baseline"}
        ),
        check_pod_security,
    ),
    (
        "tenant-namespace-undeclared",
        lambda o: o.remove(
            next(
                n
                for n in of_kind(o, "Namespace")
                if n["metadata"]["name"] == of_kind(o, "Deployment")[0]["metadata"]["namespace"]
            )
        ),
        check_pod_security,
    ),
]


@pytest.mark.parametrize(
    ("mutate", "check"),
    [(m, c) for _, m, c in BROKEN_COPIES],
    ids=[name for name, _, _ in BROKEN_COPIES],
)
def test_a_broken_copy_is_caught(mutate: Mutation, check: Callable[[list[Obj]], list[str]]) -> None:
    objs = deepcopy_objs(OBJECTS)
    assert check(objs) == []
    mutate(objs)
    assert check(objs) != []


def test_repo_root_is_the_project() -> None:
    """The loader resolves paths from the repository root; guard against a moved test."""
    assert (REPO_ROOT / "pyproject.toml").is_file()
    assert MANIFEST_DIRS
    assert all(root.is_dir() for root in MANIFEST_DIRS)

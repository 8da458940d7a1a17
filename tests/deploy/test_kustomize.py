"""The kustomizations: every file is wired in, and what `kubectl kustomize` renders (the
objects a cluster would receive: the chart's rendering of each entry point, the namespace,
and the TLS entry point's certificates and Secrets) is valid and keeps every property."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from exporter import __version__
from exporter.config import parse_serve_args
from exporter.k8s.config import KubernetesConfig

from ._manifests import (
    ALL_CHECKS,
    DEPLOY_DIR,
    EXPORTER_IMAGE,
    KUBERNETES_VERSIONS,
    Obj,
    exporter_containers,
    is_custom_kind,
    load_tree,
    name_of,
    of_kind,
    pod_spec,
    regex_is_valid,
    render_kustomization,
    validate_object,
    yaml_files,
)

TREE = load_tree()
ENTRY_POINTS = {
    "daemonset": DEPLOY_DIR / "daemonset",
    "daemonset-pod-labels": DEPLOY_DIR / "daemonset" / "pod-labels",
    "daemonset-tls": DEPLOY_DIR / "daemonset" / "tls",
    "daemonset-inference": DEPLOY_DIR / "daemonset" / "inference",
    "sidecar": DEPLOY_DIR / "sidecar",
}


def test_every_file_is_a_resource_or_patch_of_a_kustomization() -> None:
    listed: set[Path] = set()
    for k in TREE.kustomizations:
        base = k.path.parent
        for entry in k.obj.get("resources", []):
            target = (base / entry).resolve()
            assert target.exists(), f"{k.where}: resource {entry!r} does not exist"
            if target.is_file():
                listed.add(target)
            else:
                assert (target / "kustomization.yaml").is_file(), f"{k.where}: {entry!r}"
        for patch in k.obj.get("patches", []):
            assert (base / patch["path"]).is_file(), f"{k.where}: patch {patch['path']!r}"
    files = {d.path.resolve() for d in TREE.objects}
    assert files - listed == set(), "files no kustomization installs"
    assert TREE.patches <= {p.resolve() for p in yaml_files([DEPLOY_DIR])}


@pytest.fixture(scope="module", params=sorted(ENTRY_POINTS))
def rendered(request: pytest.FixtureRequest) -> tuple[str, list[Obj]]:
    name: str = request.param
    return name, render_kustomization(ENTRY_POINTS[name])


def test_rendered_objects_validate(rendered: tuple[str, list[Obj]]) -> None:
    _, objs = rendered
    problems = []
    for obj in objs:
        versions = KUBERNETES_VERSIONS if not is_custom_kind(obj) else KUBERNETES_VERSIONS[-1:]
        for version in versions:
            problems += [f"{name_of(obj)}: {p}" for p in validate_object(obj, version)]
    assert problems == []


@pytest.mark.parametrize("check", ALL_CHECKS, ids=lambda c: c.__name__)
def test_rendered_objects_keep_the_property(
    check: Callable[[list[Obj]], list[str]], rendered: tuple[str, list[Obj]]
) -> None:
    _, objs = rendered
    assert check(objs) == []


def test_rendered_image_is_the_placeholder(rendered: tuple[str, list[Obj]]) -> None:
    _, objs = rendered
    images = {
        c["image"]
        for wl in objs
        if wl.get("kind") in ("DaemonSet", "Deployment")
        for c, _ in exporter_containers(wl)
    }
    assert images == {f"{EXPORTER_IMAGE}:{__version__}"}


def _exporter(objs: list[Obj]) -> Obj:
    container: Obj = exporter_containers(of_kind(objs, "DaemonSet")[0])[0][0]
    return container


def _config(container: Obj) -> KubernetesConfig:
    """The Kubernetes settings the exporter reads from the container's args and env."""
    env = {e["name"]: str(e["value"]) for e in container.get("env", []) if "value" in e}
    return parse_serve_args([str(a) for a in container.get("args", [])], env).kubernetes


def test_plain_daemonset_has_no_api_access() -> None:
    objs = render_kustomization(ENTRY_POINTS["daemonset"])
    assert of_kind(objs, "ClusterRole") == []
    assert of_kind(objs, "ClusterRoleBinding") == []
    ds = of_kind(objs, "DaemonSet")[0]
    assert pod_spec(ds)["automountServiceAccountToken"] is False
    config = _config(_exporter(objs))
    assert config.enabled
    assert (config.pod_labels, config.pod_label_presets, config.enable_pod_labels) == \
        (None, (), False)


@pytest.mark.parametrize("overlay", ["daemonset-pod-labels", "daemonset-inference"])
def test_pod_labels_overlay_grants_exactly_what_the_watch_needs(overlay: str) -> None:
    objs = render_kustomization(ENTRY_POINTS[overlay])
    ds = of_kind(objs, "DaemonSet")[0]
    spec = pod_spec(ds)
    assert spec["automountServiceAccountToken"] is True
    config = _config(_exporter(objs))
    assert config.enabled
    assert config.pod_label_presets or (config.pod_labels and regex_is_valid(config.pod_labels))

    sa = of_kind(objs, "ServiceAccount")[0]
    assert spec["serviceAccountName"] == sa["metadata"]["name"]
    (binding,) = of_kind(objs, "ClusterRoleBinding")
    (role,) = of_kind(objs, "ClusterRole")
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": role["metadata"]["name"],
    }
    assert binding["subjects"] == [
        {
            "kind": "ServiceAccount",
            "name": sa["metadata"]["name"],
            "namespace": sa["metadata"]["namespace"],
        }
    ]
    # Read-only, pods only: the watch needs list+watch, single lookups need get.
    assert role["rules"] == [
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}
    ]


def test_inference_overlay_turns_on_the_preset_and_nothing_else() -> None:
    """Against the pod-labels entry point, the inference one changes one thing: the value
    of GPU_EXPORTER_POD_LABELS (`--kubernetes.pod-labels`), which the exporter reads as the
    preset."""
    base = render_kustomization(ENTRY_POINTS["daemonset-pod-labels"])
    objs = render_kustomization(ENTRY_POINTS["daemonset-inference"])
    config = _config(_exporter(objs))
    assert (config.pod_label_presets, config.pod_labels) == (("inference",), None)
    preset = next(e for e in _exporter(objs)["env"] if e["name"] == "GPU_EXPORTER_POD_LABELS")
    assert preset == {"name": "GPU_EXPORTER_POD_LABELS", "value": "inference"}
    for e in _exporter(base)["env"]:
        if e["name"] == "GPU_EXPORTER_POD_LABELS":
            e["value"] = "inference"
    assert objs == base

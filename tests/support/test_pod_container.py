"""A pod spec's container, translated for podman as the kubelet would run it: volumes as the
kubelet writes them, the service-account token, the security context, and a clear refusal
of what is not carried out. (The chart's and the image's tests run the result.)"""

from __future__ import annotations

import copy
import os
from pathlib import Path
from typing import Any

import pytest

from tests.support.container import HOST_LOOPBACK, Bind, ContainerSpec
from tests.support.pod_container import (
    SERVICE_ACCOUNT_DIR,
    ApiAccess,
    PodSpecError,
    container_spec,
)

DOWNWARD = {"spec.nodeName": "node-1", "metadata.name": "exporter-abcde",
            "metadata.namespace": "monitoring"}
API = ApiAccess(port=6443, token="the-token", ca_pem="-----BEGIN CERTIFICATE-----\n")


def _pod(**overrides: Any) -> dict[str, Any]:
    pod: dict[str, Any] = {
        "automountServiceAccountToken": False,
        "containers": [{
            "name": "exporter",
            "args": ["-f", "/etc/dcgm-exporter/default-counters.csv"],
            "env": [{"name": "MODE", "value": "fast"},
                    {"name": "NODE_NAME",
                     "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}],
            "ports": [{"containerPort": 9400}],
            "volumeMounts": [],
        }],
        "volumes": [],
    }
    pod.update(overrides)
    return pod


def _spec(pod: dict[str, Any], tmp_path: Path, **kwargs: Any) -> ContainerSpec:
    (tmp_path / "node").mkdir(exist_ok=True)
    (tmp_path / "files").mkdir(exist_ok=True)
    return container_spec(pod, pod["containers"][0], image="img", node_root=tmp_path / "node",
                          files=tmp_path / "files", downward=DOWNWARD, **kwargs)


def _mount(pod: dict[str, Any], volume: dict[str, Any], **mount: Any) -> dict[str, Any]:
    pod = copy.deepcopy(pod)
    pod["volumes"].append(volume)
    pod["containers"][0]["volumeMounts"].append({"name": volume["name"], **mount})
    return pod


def _bind(spec: ContainerSpec, target: str) -> Bind:
    (found,) = [b for b in spec.binds if b.target == target]
    return found


def test_args_env_and_host_name_are_the_pods(tmp_path: Path) -> None:
    spec = _spec(_pod(), tmp_path)
    assert spec.args == ("-f", "/etc/dcgm-exporter/default-counters.csv")
    assert spec.env == {"MODE": "fast", "NODE_NAME": "node-1"}
    assert spec.hostname == "exporter-abcde"
    assert (spec.port, spec.reaches_host_loopback) == (9400, False)


def test_a_secret_is_written_as_the_kubelet_writes_it(tmp_path: Path) -> None:
    pod = _mount(_pod(), {"name": "tls", "secret": {"secretName": "certs", "defaultMode": 0o440,
                                                     "items": [{"key": "tls.key", "path": "k"},
                                                               {"key": "tls.crt", "path": "c",
                                                                "mode": 0o444}]}},
                 mountPath="/etc/tls")
    spec = _spec(pod, tmp_path, secrets={"certs": {"tls.key": "KEY", "tls.crt": "CRT",
                                                   "ca.crt": "CA"}})
    bind = _bind(spec, "/etc/tls")
    assert bind.read_only
    assert sorted(p.name for p in bind.source.iterdir() if not p.name.startswith("..2")) == \
        ["..data", "c", "k"]  # ca.crt is not an item
    assert os.readlink(bind.source / "k") == "..data/k"
    assert (bind.source / "k").read_text() == "KEY"
    assert (bind.source / "k").stat().st_mode & 0o777 == 0o440
    assert (bind.source / "c").stat().st_mode & 0o777 == 0o444
    assert (bind.source / "..data").resolve().stat().st_mode & 0o777 == 0o755


def test_a_configmap_subpath_mounts_the_file_it_resolves_to(tmp_path: Path) -> None:
    pod = _mount(_pod(), {"name": "m", "configMap": {"name": "metrics", "items": [
        {"key": "metrics", "path": "default-counters.csv"}]}},
        mountPath="/etc/dcgm-exporter/default-counters.csv", subPath="default-counters.csv")
    spec = _spec(pod, tmp_path, configmaps={"metrics": {"metrics": "DCGM_FI_DEV_SM_CLOCK\n"}})
    bind = _bind(spec, "/etc/dcgm-exporter/default-counters.csv")
    assert bind.source.is_file()
    assert not bind.source.is_symlink()
    assert bind.source.read_text() == "DCGM_FI_DEV_SM_CLOCK\n"
    assert bind.source.stat().st_mode & 0o777 == 0o644  # no defaultMode: the API's default


def test_a_missing_object_stops_the_pod_unless_optional(tmp_path: Path) -> None:
    volume: dict[str, Any] = {"name": "w", "secret": {"secretName": "absent"}}
    with pytest.raises(PodSpecError, match="Secret absent does not exist"):
        _spec(_mount(_pod(), volume, mountPath="/w"), tmp_path)
    volume["secret"]["optional"] = True
    bind = _bind(_spec(_mount(_pod(), volume, mountPath="/w"), tmp_path), "/w")
    assert [p.name for p in bind.source.iterdir() if not p.name.startswith("..")] == []


def test_a_pod_with_a_token_gets_it_with_the_ca_and_the_services_address(tmp_path: Path
                                                                         ) -> None:
    pod = _pod()
    del pod["automountServiceAccountToken"]  # the API's default: a token
    spec = _spec(pod, tmp_path, api=API)
    token_dir = _bind(spec, SERVICE_ACCOUNT_DIR).source
    assert {name: (token_dir / name).read_text() for name in ("token", "ca.crt", "namespace")} \
        == {"token": "the-token", "ca.crt": API.ca_pem, "namespace": "monitoring"}
    assert spec.env["KUBERNETES_SERVICE_HOST"] == HOST_LOOPBACK
    assert spec.env["KUBERNETES_SERVICE_PORT"] == "6443"
    assert spec.reaches_host_loopback


def test_without_a_token_only_the_services_address(tmp_path: Path) -> None:
    spec = _spec(_pod(), tmp_path, api=API)  # automountServiceAccountToken: false
    assert SERVICE_ACCOUNT_DIR not in {b.target for b in spec.binds}
    assert spec.env["KUBERNETES_SERVICE_HOST"] == HOST_LOOPBACK


def test_a_token_with_no_api_server_is_refused(tmp_path: Path) -> None:
    pod = _pod(automountServiceAccountToken=True)
    with pytest.raises(PodSpecError, match="service-account token"):
        _spec(pod, tmp_path)


def test_the_containers_security_context_over_the_pods(tmp_path: Path) -> None:
    pod = _pod(securityContext={"runAsUser": 1000, "runAsGroup": 1000, "runAsNonRoot": True})
    pod["containers"][0]["securityContext"] = {
        "runAsGroup": 2000, "readOnlyRootFilesystem": True, "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"], "add": ["SYS_ADMIN"]},
        "seccompProfile": {"type": "RuntimeDefault"}}
    spec = _spec(pod, tmp_path)
    assert (spec.user, spec.read_only, spec.no_new_privileges, spec.cap_drop_all,
            spec.cap_add) == ("1000:2000", True, True, True, ("SYS_ADMIN",))


@pytest.mark.parametrize(("pod_security", "security", "error"), [
    ({"runAsNonRoot": True}, {"runAsUser": 0}, "runAsNonRoot with runAsUser 0"),
    ({"fsGroup": 2000}, {}, r"pod securityContext \['fsGroup'\]"),
    ({}, {"seLinuxOptions": {"level": "s0"}}, r"container securityContext \['seLinuxOptions'\]"),
    ({}, {"seccompProfile": {"type": "Unconfined"}}, "seccompProfile Unconfined"),
    ({}, {"capabilities": {"drop": ["NET_RAW"]}}, r"capabilities.drop \['NET_RAW'\]"),
])
def test_security_settings_not_carried_out_are_refused(
        tmp_path: Path, pod_security: dict[str, Any], security: dict[str, Any],
        error: str) -> None:
    pod = _pod(securityContext=pod_security)
    pod["containers"][0]["securityContext"] = security
    with pytest.raises(PodSpecError, match=error):
        _spec(pod, tmp_path)


def test_host_paths_and_empty_dirs(tmp_path: Path) -> None:
    pod = _mount(_pod(), {"name": "sock", "hostPath": {"path": "/var/lib/kubelet/pod-resources",
                                                        "type": "Directory"}},
                 mountPath="/var/lib/kubelet/pod-resources", readOnly=True)
    with pytest.raises(PodSpecError, match="no Directory there on the node"):
        _spec(pod, tmp_path)
    (tmp_path / "node/var/lib/kubelet/pod-resources").mkdir(parents=True)
    pod = _mount(pod, {"name": "tmp", "emptyDir": {"medium": "Memory", "sizeLimit": "16Mi"}},
                 mountPath="/tmp")
    pod = _mount(pod, {"name": "cache", "emptyDir": {}}, mountPath="/cache")
    spec = _spec(pod, tmp_path)
    assert _bind(spec, "/var/lib/kubelet/pod-resources") == \
        Bind(tmp_path / "node/var/lib/kubelet/pod-resources", "/var/lib/kubelet/pod-resources",
             True)
    assert spec.tmpfs == {"/tmp": "size=16m"}
    cache = _bind(spec, "/cache")
    assert not cache.read_only
    assert cache.source.stat().st_mode & 0o777 == 0o777


@pytest.mark.parametrize(("change", "error"), [
    ({"hostNetwork": True}, "hostNetwork and hostPID"),
    ({"volumes": [{"name": "p", "projected": {"sources": []}}]}, "only hostPath, configMap"),
])
def test_pod_settings_not_carried_out_are_refused(tmp_path: Path, change: dict[str, Any],
                                                  error: str) -> None:
    pod = _pod(**change)
    if "volumes" in change:
        pod["containers"][0]["volumeMounts"] = [{"name": "p", "mountPath": "/p"}]
    with pytest.raises(PodSpecError, match=error):
        _spec(pod, tmp_path)


def test_env_from_another_object_is_refused(tmp_path: Path) -> None:
    pod = _pod()
    pod["containers"][0]["env"].append(
        {"name": "X", "valueFrom": {"configMapKeyRef": {"name": "c", "key": "k"}}})
    with pytest.raises(PodSpecError, match="env X: cannot fill"):
        _spec(pod, tmp_path)

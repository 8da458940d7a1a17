"""One container of a Kubernetes pod spec as a kubelet and podman would run it on a node.

What the kubelet and the container runtime do with the spec, for the parts that reach the
process:
- `command`/`args`; `env`: values and the downward API (`fieldRef`); the pod's host name
  (its `hostname`, else its name);
- `volumeMounts` (`readOnly`, `subPath`): hostPath from a directory standing in for the
  node's root (a type that must exist is checked); ConfigMap and Secret volumes written the
  way the kubelet's atomic writer writes them (the files in a timestamped directory that
  `..data` points at, each top-level name a link through `..data`), with `items`,
  `defaultMode` and per-item `mode`, a subPath mounting the file it resolves to; emptyDir,
  in memory (tmpfs of its sizeLimit) for medium Memory, else a fresh directory;
- the cluster's API server, when the node is given one (`api`): every container gets the
  `kubernetes` Service's address (KUBERNETES_SERVICE_HOST/PORT) on a network that reaches
  it, and a pod that gets a service-account token (`automountServiceAccountToken` not false)
  gets it with the cluster's CA and its namespace in SERVICE_ACCOUNT_DIR, mode 0644;
- the securityContext, the container's over the pod's: user and group, runAsNonRoot
  (checked as the kubelet does), read-only root, capabilities, no privilege escalation,
  privileged, the runtime's default seccomp profile.
Anything else that would change the process (an env var from a ConfigMap, a projected or
CSI volume, hostNetwork, fsGroup, a pod that gets a token where the node has no API server,
...) is refused with PodSpecError rather than silently left out.
"""

from __future__ import annotations

import datetime
import itertools
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.support.container import HOST_LOOPBACK, Bind, ContainerSpec

Obj = dict[str, Any]
Stores = Mapping[str, Mapping[str, str]]
"""ConfigMaps or Secrets of the pod's namespace: name -> key -> (decoded) text."""

SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
DEFAULT_FILE_MODE = 0o644
"""A ConfigMap's or Secret's file mode when the volume sets no `defaultMode`."""
CONTAINER_SECURITY = {"runAsUser", "runAsGroup", "runAsNonRoot", "readOnlyRootFilesystem",
                      "capabilities", "allowPrivilegeEscalation", "privileged",
                      "seccompProfile"}
POD_SECURITY = {"runAsUser", "runAsGroup", "runAsNonRoot", "seccompProfile"}
"""The pod-level settings carried out: defaults for each container's own."""
_payloads = itertools.count()


class PodSpecError(ValueError):
    """A part of the pod spec this translation does not carry out."""


@dataclass(frozen=True)
class ApiAccess:
    """The cluster's API server as the node's pods reach it: a server of the test listening
    on the host's loopback `port`, serving HTTPS with a certificate for HOST_LOOPBACK issued
    by `ca_pem`, and accepting `token` as the pod's service-account token."""

    port: int
    token: str
    ca_pem: str


def container_env(container: Obj, downward: Mapping[str, str]) -> dict[str, str]:
    """A container's `env` as the kubelet fills it: values, and downward-API fields from
    `downward` (fieldPath -> value); PodSpecError for anything else."""
    if container.get("envFrom"):
        raise PodSpecError("envFrom is not carried out")
    env: dict[str, str] = {}
    for item in container.get("env") or []:
        if "value" in item:
            env[item["name"]] = str(item["value"])
            continue
        path = ((item.get("valueFrom") or {}).get("fieldRef") or {}).get("fieldPath")
        if not isinstance(path, str) or path not in downward:
            raise PodSpecError(f"env {item['name']}: cannot fill {item.get('valueFrom')}")
        env[item["name"]] = downward[path]
    return env


def write_atomically(directory: Path, files: Mapping[str, tuple[str, int]]) -> None:
    """`files` (relative path -> (text, mode)) in `directory` as the kubelet's atomic writer
    lays out a ConfigMap, Secret or projected volume: the contents in a timestamped
    directory, `..data` a link to it, each top-level name a link through `..data` (an update
    swaps one link, which is how a mounted directory sees edits)."""
    stamp = datetime.datetime.now(datetime.UTC).strftime("..%Y_%m_%d_%H_%M_%S")
    payload = directory / f"{stamp}.{next(_payloads)}"
    payload.mkdir(parents=True)
    for target in (directory, payload):
        target.chmod(0o755)  # group and others may walk the tree, as the kubelet sets it
    for rel, (text, mode) in files.items():
        path = payload / rel
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o755)
        path.write_text(text)
        path.chmod(mode)
    (directory / "..data").symlink_to(payload.name)
    for top in sorted({Path(rel).parts[0] for rel in files}):
        (directory / top).symlink_to(f"..data/{top}")


def _object_files(kind: str, source: Obj, stores: Stores) -> dict[str, tuple[str, int]]:
    """Path -> (text, mode) of a ConfigMap or Secret volume: its `items` (each with its own
    `mode`, else `defaultMode`), else every key."""
    name = source["name"] if kind == "ConfigMap" else source["secretName"]
    data = stores.get(name)
    if data is None:
        if source.get("optional"):
            return {}
        raise PodSpecError(f"{kind} {name} does not exist")
    mode = int(source.get("defaultMode", DEFAULT_FILE_MODE))
    items = source.get("items")
    if not items:
        return {key: (text, mode) for key, text in data.items()}
    files = {}
    for item in items:
        if item["key"] not in data:
            raise PodSpecError(f"{kind} {name} has no key {item['key']}")
        files[item["path"]] = (data[item["key"]], int(item.get("mode", mode)))
    return files


def _host_path(volume: Obj, node_root: Path) -> Path:
    source: Path = node_root / str(volume["hostPath"]["path"]).lstrip("/")
    kind = volume["hostPath"].get("type") or ""
    exists = {"Directory": source.is_dir, "File": source.is_file,
              "Socket": source.is_socket}.get(kind)
    if exists is not None:
        if not exists():
            raise PodSpecError(f"hostPath {volume['hostPath']['path']}: no {kind} there "
                               "on the node (the kubelet would not start the pod)")
    elif kind in ("", "DirectoryOrCreate"):
        source.mkdir(parents=True, exist_ok=True)
    elif kind == "FileOrCreate":
        source.parent.mkdir(parents=True, exist_ok=True)
        source.touch()
    else:
        raise PodSpecError(f"hostPath type {kind} is not carried out")
    return source


def _mounts(pod: Obj, container: Obj, node_root: Path, files: Path, configmaps: Stores,
            secrets: Stores) -> tuple[list[Bind], dict[str, str]]:
    volumes = {v["name"]: v for v in pod.get("volumes") or []}
    binds: list[Bind] = []
    tmpfs: dict[str, str] = {}
    for mount in container.get("volumeMounts") or []:
        volume = volumes[mount["name"]]
        read_only = bool(mount.get("readOnly", False))
        if "hostPath" in volume:
            source = _host_path(volume, node_root)
        elif "configMap" in volume or "secret" in volume:
            kind, key = ("ConfigMap", "configMap") if "configMap" in volume else \
                ("Secret", "secret")
            source = files / mount["name"]
            if not source.exists():  # one volume, however many mounts
                write_atomically(source, _object_files(
                    kind, volume[key], configmaps if kind == "ConfigMap" else secrets))
            read_only = True  # the kubelet mounts them read-only whatever the mount says
        elif "emptyDir" in volume:
            empty_dir = volume["emptyDir"] or {}
            if empty_dir.get("medium") == "Memory" and "subPath" not in mount:
                size = empty_dir.get("sizeLimit")
                tmpfs[mount["mountPath"]] = \
                    f"size={size.lower().removesuffix('i')}" if size else ""
                continue
            source = files / mount["name"]
            source.mkdir(mode=0o777, parents=True, exist_ok=True)
            source.chmod(0o777)  # an emptyDir is writable by any user of the pod
        else:
            raise PodSpecError(f"volume {mount['name']}: only hostPath, configMap, secret "
                               "and emptyDir are carried out")
        if "subPath" in mount:
            # The kubelet resolves a subPath's links within the volume and mounts the result.
            source = (source / mount["subPath"]).resolve()
            if not source.exists():
                raise PodSpecError(f"volume {mount['name']} has no {mount['subPath']}")
        binds.append(Bind(source, mount["mountPath"], read_only))
    return binds, tmpfs


def _service_account(pod: Obj, container: Obj, api: ApiAccess | None, files: Path,
                     namespace: str | None) -> list[Bind]:
    """The token volume of a pod that gets one (none where a mount is already there)."""
    if pod.get("automountServiceAccountToken") is False or any(
            m["mountPath"] == SERVICE_ACCOUNT_DIR for m in container.get("volumeMounts") or []):
        return []
    if api is None:
        raise PodSpecError("the pod gets a service-account token, and this node has no API "
                           "server (automountServiceAccountToken: false, or pass `api`)")
    if namespace is None:
        raise PodSpecError("no metadata.namespace to write the service account's namespace")
    source = files / "kube-api-access"
    write_atomically(source, {"token": (api.token, DEFAULT_FILE_MODE),
                              "ca.crt": (api.ca_pem, DEFAULT_FILE_MODE),
                              "namespace": (namespace, DEFAULT_FILE_MODE)})
    return [Bind(source, SERVICE_ACCOUNT_DIR, True)]


def _user(security: Obj) -> str | None:
    if "runAsUser" not in security:
        if security.get("runAsNonRoot"):
            raise PodSpecError("runAsNonRoot without runAsUser: the image's user is not "
                               "checked here")
        return None
    if security.get("runAsNonRoot") and int(security["runAsUser"]) == 0:
        raise PodSpecError("runAsNonRoot with runAsUser 0: the kubelet would not start it")
    user = str(security["runAsUser"])
    if "runAsGroup" in security:
        user += f":{security['runAsGroup']}"
    return user


def _security(pod: Obj, container: Obj) -> Obj:
    """The container's securityContext over the pod's (the parts both may set)."""
    pod_security = pod.get("securityContext") or {}
    own = container.get("securityContext") or {}
    for where, given, known in (("pod", pod_security, POD_SECURITY),
                                ("container", own, CONTAINER_SECURITY)):
        if set(given) - known:
            raise PodSpecError(f"{where} securityContext {sorted(set(given) - known)}: not "
                               "carried out")
    security = {**pod_security, **own}
    seccomp = (security.get("seccompProfile") or {}).get("type", "RuntimeDefault")
    if seccomp != "RuntimeDefault":
        raise PodSpecError(f"seccompProfile {seccomp}: only RuntimeDefault is carried out")
    return security


def container_spec(pod: Obj, container: Obj, *, image: str, node_root: Path, files: Path,
                   downward: Mapping[str, str], configmaps: Stores | None = None,
                   secrets: Stores | None = None, api: ApiAccess | None = None,
                   extra_env: Mapping[str, str] | None = None,
                   extra_binds: tuple[Bind, ...] = ()) -> ContainerSpec:
    """`container` of the pod spec `pod`, run from `image` (in place of the spec's).

    `node_root` stands for the node's `/` (hostPath volumes are under it); `files` is where
    the kubelet's volumes (ConfigMaps, Secrets, the token, emptyDirs) are written;
    `downward` answers `fieldRef` paths (`spec.nodeName`, `metadata.namespace`, ...);
    `configmaps` and `secrets` are the namespace's; `api` is the cluster's API server, None
    on a node whose pods reach none. `extra_env` and `extra_binds` are what the node adds on
    its own, such as the NVIDIA runtime's injected library.
    """
    if pod.get("hostNetwork") or pod.get("hostPID"):
        raise PodSpecError("hostNetwork and hostPID are not carried out: the container "
                           "would share this machine's port 9400 and processes")
    binds, tmpfs = _mounts(pod, container, node_root, files, configmaps or {}, secrets or {})
    binds += _service_account(pod, container, api, files, downward.get("metadata.namespace"))
    security = _security(pod, container)
    capabilities = security.get("capabilities") or {}
    drop = [c.upper() for c in capabilities.get("drop") or []]
    if drop and drop != ["ALL"]:
        raise PodSpecError(f"capabilities.drop {drop}: only [ALL] is carried out")
    service = {} if api is None else {"KUBERNETES_SERVICE_HOST": HOST_LOOPBACK,
                                      "KUBERNETES_SERVICE_PORT": str(api.port)}
    ports = container.get("ports") or []
    command = container.get("command")
    return ContainerSpec(
        image=image,
        args=tuple(str(a) for a in container.get("args") or []),
        entrypoint=tuple(command) if command else None,
        # The Service's variables first: the container's own env may override them.
        env={**service, **container_env(container, downward), **(extra_env or {})},
        binds=(*binds, *extra_binds),
        tmpfs=tmpfs,
        user=_user(security),
        read_only=bool(security.get("readOnlyRootFilesystem", False)),
        cap_drop_all=drop == ["ALL"],
        cap_add=tuple(str(c) for c in capabilities.get("add") or []),
        no_new_privileges=security.get("allowPrivilegeEscalation") is False,
        privileged=bool(security.get("privileged", False)),
        port=int(ports[0]["containerPort"]) if ports else None,
        reaches_host_loopback=api is not None,
        hostname=pod.get("hostname") or downward.get("metadata.name"),
    )

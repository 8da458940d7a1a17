"""One container of a Kubernetes pod spec as podman would run it on a node.

What a kubelet and the container runtime do with the spec, for the parts that reach the
process: `command`/`args`, `env` (values and the downward API), `volumeMounts` (hostPath from
a directory standing in for the node's root, ConfigMaps written to files, subPath included,
emptyDir as tmpfs), and the container's `securityContext` (user, read-only root,
capabilities, no privilege escalation, privileged). Anything else that would change the
process (a Secret volume, an env var from a ConfigMap, ...) is refused with PodSpecError
rather than silently left out.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tests.support.container import Bind, ContainerSpec

Obj = dict[str, Any]


class PodSpecError(ValueError):
    """A part of the pod spec this translation does not carry out."""


def _env(container: Obj, downward: Mapping[str, str]) -> dict[str, str]:
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


def _configmap_files(volume: Obj, configmaps: Mapping[str, Mapping[str, str]]
                     ) -> dict[str, str]:
    name = volume["configMap"]["name"]
    data = configmaps.get(name)
    if data is None:
        raise PodSpecError(f"ConfigMap {name} does not exist")
    items = {i["key"]: i["path"] for i in volume["configMap"].get("items") or []}
    return {items.get(k, k): v for k, v in data.items() if not items or k in items}


def _mounts(pod: Obj, container: Obj, node_root: Path, files: Path,
            configmaps: Mapping[str, Mapping[str, str]]
            ) -> tuple[list[Bind], dict[str, str]]:
    volumes = {v["name"]: v for v in pod.get("volumes") or []}
    binds: list[Bind] = []
    tmpfs: dict[str, str] = {}
    for mount in container.get("volumeMounts") or []:
        volume = volumes[mount["name"]]
        read_only = bool(mount.get("readOnly", False))
        if "hostPath" in volume:
            source = node_root / volume["hostPath"]["path"].lstrip("/")
            source.mkdir(parents=True, exist_ok=True)
            binds.append(Bind(source, mount["mountPath"], read_only))
        elif "configMap" in volume:
            contents = _configmap_files(volume, configmaps)
            directory = files / mount["name"]
            directory.mkdir(parents=True, exist_ok=True)
            for rel, text in contents.items():
                (directory / rel).write_text(text)
            source = directory / mount["subPath"] if "subPath" in mount else directory
            binds.append(Bind(source, mount["mountPath"], True))
        elif "emptyDir" in volume:
            size = (volume["emptyDir"] or {}).get("sizeLimit")
            tmpfs[mount["mountPath"]] = f"size={size.lower().removesuffix('i')}" if size \
                else ""
        else:
            raise PodSpecError(f"volume {mount['name']}: only hostPath, configMap and "
                               "emptyDir are carried out")
    return binds, tmpfs


def container_spec(pod: Obj, container: Obj, *, image: str, node_root: Path, files: Path,
                   downward: Mapping[str, str],
                   configmaps: Mapping[str, Mapping[str, str]] | None = None,
                   extra_env: Mapping[str, str] | None = None,
                   extra_binds: tuple[Bind, ...] = ()) -> ContainerSpec:
    """`container` of the pod spec `pod`, run from `image` (in place of the spec's).

    `node_root` stands for the node's `/` (hostPath volumes are directories under it);
    `files` is where ConfigMap contents are written; `downward` answers `fieldRef` paths
    (`spec.nodeName`, `metadata.name`, ...). `extra_env` and `extra_binds` are what the node
    adds on its own, such as the NVIDIA runtime's injected library.
    """
    binds, tmpfs = _mounts(pod, container, node_root, files, configmaps or {})
    security = container.get("securityContext") or {}
    capabilities = security.get("capabilities") or {}
    drop = [c.upper() for c in capabilities.get("drop") or []]
    if drop and drop != ["ALL"]:
        raise PodSpecError(f"capabilities.drop {drop}: only [ALL] is carried out")
    user = None
    if "runAsUser" in security:
        user = str(security["runAsUser"])
        if "runAsGroup" in security:
            user += f":{security['runAsGroup']}"
    ports = container.get("ports") or []
    command = container.get("command")
    return ContainerSpec(
        image=image,
        args=tuple(str(a) for a in container.get("args") or []),
        entrypoint=tuple(command) if command else None,
        env={**_env(container, downward), **(extra_env or {})},
        binds=(*binds, *extra_binds),
        tmpfs=tmpfs,
        user=user,
        read_only=bool(security.get("readOnlyRootFilesystem", False)),
        cap_drop_all=drop == ["ALL"],
        cap_add=tuple(str(c) for c in capabilities.get("add") or []),
        no_new_privileges=security.get("allowPrivilegeEscalation") is False,
        privileged=bool(security.get("privileged", False)),
        port=int(ports[0]["containerPort"]) if ports else None,
    )

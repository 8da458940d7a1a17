"""Loading, schema validation and property checks for the manifests under deploy/.

Every check returns a list of problems (empty when the manifests are right) so that the
tests can show both that the shipped manifests pass and that a broken copy is caught.
"""

from __future__ import annotations

import copy
import functools
import re
import shutil
import subprocess
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import yaml

from exporter.k8s.config import DEFAULT_POD_RESOURCES_SOCKET
from tests.support.requirements import require_file, require_tool

Obj = dict[str, Any]

REPO_ROOT = Path(__file__).resolve().parents[2]
DEPLOY_DIR = REPO_ROOT / "deploy"
MANIFEST_DIRS = (DEPLOY_DIR / "daemonset", DEPLOY_DIR / "sidecar")
CRD_DIR = REPO_ROOT / "tests" / "fixtures" / "crds"

EXPORTER_IMAGE = "ghcr.io/gpu-exporter/gpu-exporter"
METRICS_PORT = 9400
POD_RESOURCES_DIR = "/var/lib/kubelet/pod-resources"
GPU_RESOURCE = "nvidia.com/gpu"
MONITOR_ENDPOINTS = {"ServiceMonitor": "endpoints", "PodMonitor": "podMetricsEndpoints"}
WORKLOAD_KINDS = ("DaemonSet", "Deployment", "StatefulSet")

# 1.29: native sidecars on by default (beta); 1.33: native sidecars GA; and the newest
# schema set the validator ships.
KUBERNETES_VERSIONS = (
    "1.29",
    "1.33",
    ".".join(kubernetes_validate.latest_version().split(".")[:2]),
)


# ---------------------------------------------------------------------------- loading


@dataclass(frozen=True)
class Document:
    path: Path
    index: int
    obj: Obj

    @property
    def where(self) -> str:
        meta = self.obj.get("metadata") or {}
        name = meta.get("name", "?") if isinstance(meta, dict) else "?"
        rel = self.path.relative_to(REPO_ROOT) if self.path.is_relative_to(REPO_ROOT) else self.path
        return f"{rel}#{self.index} {self.obj.get('kind', '?')}/{name}"


CHART_VALUES = "values.yaml"
"""Beside each rendered entry point: the chart's values it was rendered with, not an object."""


def yaml_files(dirs: Iterable[Path]) -> list[Path]:
    found: list[Path] = []
    for root in dirs:
        found.extend(p for p in root.rglob("*")
                     if p.suffix in (".yaml", ".yml") and p.is_file() and p.name != CHART_VALUES)
    return sorted(found)


def load_documents(path: Path) -> list[Document]:
    """Every non-empty YAML document of a file; a non-mapping document is an error."""
    docs: list[Document] = []
    with path.open(encoding="utf-8") as fh:
        for index, obj in enumerate(yaml.safe_load_all(fh)):
            if obj is None:
                continue
            if not isinstance(obj, dict):
                raise ValueError(
                    f"{path}: document {index} is a {type(obj).__name__}, not a mapping"
                )
            docs.append(Document(path, index, obj))
    return docs


def is_kustomization(obj: Mapping[str, Any]) -> bool:
    return str(obj.get("apiVersion", "")).startswith("kustomize.config.k8s.io/")


def patch_paths(kustomization: Document) -> set[Path]:
    """Files a kustomization uses as patches: partial objects, valid only once applied."""
    base = kustomization.path.parent
    paths = {base / p["path"] for p in kustomization.obj.get("patches", []) if "path" in p}
    paths.update(base / p for p in kustomization.obj.get("patchesStrategicMerge", []))
    return {p.resolve() for p in paths}


@dataclass(frozen=True)
class ManifestTree:
    objects: list[Document]
    """Complete Kubernetes objects, each valid on its own."""
    kustomizations: list[Document]
    patches: set[Path]


def load_tree(dirs: Iterable[Path] = MANIFEST_DIRS) -> ManifestTree:
    docs = [doc for path in yaml_files(dirs) for doc in load_documents(path)]
    kustomizations = [d for d in docs if is_kustomization(d.obj)]
    patches = {p for k in kustomizations for p in patch_paths(k)}
    objects = [d for d in docs if not is_kustomization(d.obj) and d.path.resolve() not in patches]
    return ManifestTree(objects, kustomizations, patches)


def kubectl() -> str | None:
    return shutil.which("kubectl")


def render_kustomization(root: Path) -> list[Obj]:
    """`kubectl kustomize ROOT` (offline: kustomize needs no API server)."""
    exe = require_tool("kubectl", "kubectl")
    done = subprocess.run(
        [exe, "kustomize", str(root)], capture_output=True, text=True, timeout=60, check=False
    )
    if done.returncode != 0:
        raise AssertionError(f"kubectl kustomize {root} failed: {done.stderr.strip()}")
    return [o for o in yaml.safe_load_all(done.stdout) if o is not None]


# ------------------------------------------------------------------------- validation


def validate_builtin(obj: Obj, version: str) -> list[str]:
    """Strict (unknown fields rejected) validation of a built-in kind; a kind the validator
    has no schema for is a problem here, not a warning, so that nothing passes unchecked."""
    try:
        kubernetes_validate.validate(obj, version, strict=True)
    except kubernetes_validate.ValidationError as exc:
        path = ".".join(str(p) for p in exc.path)
        return [f"k8s {version}: {path}: {exc.message}"]
    except kubernetes_validate.SchemaNotFoundError as exc:
        return [f"k8s {version}: {exc.message}"]
    return []


def crd_files() -> list[Path]:
    """The CRD fixtures; their absence skips the calling test locally and fails it in CI."""
    return sorted(require_file(CRD_DIR).glob("*.yaml"))


def strict_schema(schema: Any) -> Any:
    """The CRD schema with unknown fields rejected, as the API server's strict field
    validation does (`kubectl apply --validate=strict`); objects that declare free-form
    content (x-kubernetes-preserve-unknown-fields, additionalProperties) stay open."""
    if isinstance(schema, list):
        return [strict_schema(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {key: strict_schema(value) for key, value in schema.items()}
    if "properties" in out:
        # property *names* are keys, not schemas: recurse into their values only
        out["properties"] = {k: strict_schema(v) for k, v in schema["properties"].items()}
        if "additionalProperties" not in out and not out.get(
            "x-kubernetes-preserve-unknown-fields"
        ):
            out["additionalProperties"] = False
    return out


@functools.cache
def crd_schemas() -> dict[tuple[str, str], Obj]:
    """(apiVersion, kind) -> strict openAPIV3Schema of each served version."""
    schemas: dict[tuple[str, str], Obj] = {}
    for path in crd_files():
        for doc in load_documents(path):
            spec = doc.obj.get("spec", {})
            if doc.obj.get("kind") != "CustomResourceDefinition":
                continue
            for version in spec.get("versions", []):
                if not version.get("served", False):
                    continue
                key = (f"{spec['group']}/{version['name']}", spec["names"]["kind"])
                schemas[key] = strict_schema(version["schema"]["openAPIV3Schema"])
    return schemas


def is_custom_kind(obj: Mapping[str, Any]) -> bool:
    group = str(obj.get("apiVersion", "")).rpartition("/")[0]
    return "." in group and not group.endswith(".k8s.io")


def validate_custom(obj: Obj, version: str = KUBERNETES_VERSIONS[-1]) -> list[str]:
    """A custom resource against its CRD (strict), its metadata against ObjectMeta."""
    schema = crd_schemas().get((obj.get("apiVersion", ""), obj.get("kind", "")))
    if schema is None:
        return [f"no CRD fixture serves {obj.get('apiVersion')} {obj.get('kind')}"]
    validator = jsonschema.Draft4Validator(schema)
    problems = [
        f"crd: {'.'.join(str(p) for p in err.absolute_path) or '<root>'}: {err.message}"
        for err in validator.iter_errors(obj)
    ]
    # The CRD types metadata only as "object"; the API server checks it as ObjectMeta.
    carrier = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": obj.get("metadata", {})}
    problems += [f"metadata: {p}" for p in validate_builtin(carrier, version)]
    return problems


def validate_object(obj: Obj, version: str) -> list[str]:
    return validate_custom(obj, version) if is_custom_kind(obj) else validate_builtin(obj, version)


# ------------------------------------------------------------------- object helpers


def of_kind(objs: Iterable[Obj], kind: str) -> list[Obj]:
    return [o for o in objs if o.get("kind") == kind]


def name_of(obj: Mapping[str, Any]) -> str:
    return f"{obj.get('kind')}/{obj.get('metadata', {}).get('name')}"


def namespace_of(obj: Mapping[str, Any]) -> str:
    return str(obj.get("metadata", {}).get("namespace", "default"))


def workloads(objs: Iterable[Obj]) -> list[Obj]:
    return [o for o in objs if o.get("kind") in WORKLOAD_KINDS]


def pod_spec(workload: Mapping[str, Any]) -> Obj:
    spec: Obj = workload["spec"]["template"]["spec"]
    return spec


def pod_labels(workload: Mapping[str, Any]) -> dict[str, str]:
    labels: dict[str, str] = workload["spec"]["template"].get("metadata", {}).get("labels", {})
    return labels


def all_containers(spec: Mapping[str, Any]) -> Iterator[tuple[Obj, bool]]:
    """(container, is_init) for regular and init containers."""
    for c in spec.get("containers", []):
        yield c, False
    for c in spec.get("initContainers", []):
        yield c, True


def is_exporter(container: Mapping[str, Any]) -> bool:
    return str(container.get("image", "")).startswith(EXPORTER_IMAGE + ":")


def exporter_containers(workload: Mapping[str, Any]) -> list[tuple[Obj, bool]]:
    return [(c, init) for c, init in all_containers(pod_spec(workload)) if is_exporter(c)]


def exporter_workloads(objs: Iterable[Obj]) -> list[Obj]:
    return [w for w in workloads(objs) if exporter_containers(w)]


def env_field_ref(container: Mapping[str, Any], name: str) -> str | None:
    for env in container.get("env", []):
        if env.get("name") == name:
            ref = env.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath")
            return str(ref) if ref is not None else None
    return None


def env_value(container: Mapping[str, Any], name: str) -> str | None:
    for env in container.get("env", []):
        if env.get("name") == name and "value" in env:
            return str(env["value"])
    return None


def selector_matches(selector: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    """matchLabels and matchExpressions of a LabelSelector against a label set."""
    if any(labels.get(k) != v for k, v in selector.get("matchLabels", {}).items()):
        return False
    for expr in selector.get("matchExpressions", []):
        key, op, values = expr["key"], expr["operator"], expr.get("values", [])
        present = key in labels
        ok = {
            "In": present and labels.get(key) in values,
            "NotIn": not present or labels.get(key) not in values,
            "Exists": present,
            "DoesNotExist": not present,
        }[op]
        if not ok:
            return False
    return True


def walk(node: Any, path: str = "") -> Iterator[tuple[str, Any, Any]]:
    """(path, key, value) for every mapping entry in a nested structure."""
    if isinstance(node, dict):
        for key, value in node.items():
            here = f"{path}.{key}" if path else str(key)
            yield here, key, value
            yield from walk(value, here)
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from walk(value, f"{path}[{i}]")


def args_have(args: list[str], flag: str, value: str | None = None) -> bool:
    """Whether `args` pass `flag` (as `--flag value` or `--flag=value`)."""
    for i, arg in enumerate(args):
        if value is None and arg == flag:
            return True
        if value is not None and (
            arg == f"{flag}={value}" or (arg == flag and i + 1 < len(args) and args[i + 1] == value)
        ):
            return True
    return False


def attributes_pods(container: Mapping[str, Any]) -> bool:
    """Whether the exporter asks the kubelet which pod holds each GPU: `-k` in its args or
    DCGM_EXPORTER_KUBERNETES=true (the chart's way, as dcgm-exporter's chart sets it)."""
    args = [str(a) for a in container.get("args", [])]
    return (args_have(args, "-k") or args_have(args, "--kubernetes")
            or env_value(container, "DCGM_EXPORTER_KUBERNETES") == "true")


def deepcopy_objs(objs: Iterable[Obj]) -> list[Obj]:
    return [copy.deepcopy(o) for o in objs]


# ------------------------------------------------------------------- property checks


def check_monitors_honor_labels(objs: Iterable[Obj]) -> list[str]:
    """Without honorLabels the exporter's pod/namespace/container become exported_*."""
    problems: list[str] = []
    for mon in (o for o in objs if o.get("kind") in MONITOR_ENDPOINTS):
        endpoints = mon.get("spec", {}).get(MONITOR_ENDPOINTS[mon["kind"]], [])
        if not endpoints:
            problems.append(f"{name_of(mon)}: no endpoints")
        for i, ep in enumerate(endpoints):
            if ep.get("honorLabels") is not True:
                problems.append(f"{name_of(mon)}: endpoint {i} lacks honorLabels: true")
    return problems


def check_pod_resources_mount(objs: Iterable[Obj]) -> list[str]:
    """The kubelet's directory, type Directory, mounted read-only where the exporter's
    default socket path points."""
    want_dir = DEFAULT_POD_RESOURCES_SOCKET.rpartition("/")[0]
    problems: list[str] = []
    for wl in exporter_workloads(objs):
        volumes = {v["name"]: v for v in pod_spec(wl).get("volumes", [])}
        for container, _ in exporter_containers(wl):
            mounts = [
                m
                for m in container.get("volumeMounts", [])
                if "hostPath" in volumes.get(m["name"], {})
            ]
            if len(mounts) != 1:
                problems.append(f"{name_of(wl)}: {len(mounts)} hostPath mounts, want 1")
                continue
            mount = mounts[0]
            host_path = volumes[mount["name"]]["hostPath"]
            if host_path.get("path", "").rstrip("/") != POD_RESOURCES_DIR:
                problems.append(f"{name_of(wl)}: hostPath {host_path.get('path')!r}")
            if host_path.get("type") != "Directory":
                problems.append(f"{name_of(wl)}: hostPath type {host_path.get('type')!r}")
            if mount.get("readOnly") is not True:
                problems.append(f"{name_of(wl)}: pod-resources mount is not readOnly")
            if mount.get("mountPath", "").rstrip("/") != want_dir:
                problems.append(
                    f"{name_of(wl)}: mounted at {mount.get('mountPath')!r}; the exporter "
                    f"looks for {DEFAULT_POD_RESOURCES_SOCKET}"
                )
    return problems


def check_native_sidecar(objs: Iterable[Obj]) -> list[str]:
    """In every non-DaemonSet workload the exporter is a native sidecar in pod scope."""
    problems: list[str] = []
    for wl in exporter_workloads(objs):
        if wl["kind"] == "DaemonSet":
            continue
        spec = pod_spec(wl)
        for container, is_init in exporter_containers(wl):
            where = f"{name_of(wl)}/{container['name']}"
            if not is_init or container.get("restartPolicy") != "Always":
                problems.append(f"{where}: not an initContainer with restartPolicy Always")
            for var, field in (
                ("POD_NAME", "metadata.name"),
                ("POD_NAMESPACE", "metadata.namespace"),
                ("NODE_NAME", "spec.nodeName"),
            ):
                if env_field_ref(container, var) != field:
                    problems.append(f"{where}: {var} is not the downward-API {field}")
            if not args_have(container.get("args", []), "--scope", "pod"):
                problems.append(f"{where}: args lack --scope pod")
            if not (
                args_have(container.get("args", []), "-k")
                or args_have(container.get("args", []), "--kubernetes")
            ):
                problems.append(f"{where}: args lack -k")
            # A sidecar's readiness gates the pod's; a startup probe delays the workload.
            for probe in ("readinessProbe", "startupProbe"):
                if probe in container:
                    problems.append(f"{where}: has a {probe}")
            for section in ("requests", "limits"):
                if GPU_RESOURCE in container.get("resources", {}).get(section, {}):
                    problems.append(f"{where}: requests a GPU of its own ({section})")
            if env_value(container, "NVIDIA_VISIBLE_DEVICES") != "all":
                problems.append(f"{where}: NVIDIA_VISIBLE_DEVICES is not 'all'")
            caps = env_value(container, "NVIDIA_DRIVER_CAPABILITIES") or ""
            if "utility" not in caps.split(","):
                problems.append(f"{where}: NVIDIA_DRIVER_CAPABILITIES lacks utility")
        if not any(
            GPU_RESOURCE in c.get("resources", {}).get("limits", {})
            for c, _ in all_containers(spec)
            if not is_exporter(c)
        ):
            problems.append(f"{name_of(wl)}: no workload container requests {GPU_RESOURCE}")
    return problems


def check_hardening(objs: Iterable[Obj]) -> list[str]:
    problems: list[str] = []
    for wl in exporter_workloads(objs):
        pod_ctx = pod_spec(wl).get("securityContext", {})
        for container, _ in exporter_containers(wl):
            where = f"{name_of(wl)}/{container['name']}"
            ctx = container.get("securityContext", {})
            caps = ctx.get("capabilities", {})
            if "ALL" not in caps.get("drop", []):
                problems.append(f"{where}: capabilities.drop lacks ALL")
            if caps.get("add"):
                problems.append(f"{where}: adds capabilities {caps['add']}")
            if ctx.get("allowPrivilegeEscalation") is not False:
                problems.append(f"{where}: allowPrivilegeEscalation is not false")
            if ctx.get("readOnlyRootFilesystem") is not True:
                problems.append(f"{where}: readOnlyRootFilesystem is not true")
            # uid 0 is what the kubelet's pod-resources socket accepts.
            if ctx.get("runAsUser", pod_ctx.get("runAsUser")) != 0:
                problems.append(f"{where}: runAsUser is not 0")
    return problems


def find_privileged(objs: Iterable[Obj]) -> list[str]:
    """Any `privileged: true` anywhere (a container or anything else)."""
    return [
        f"{name_of(o)}: {path}"
        for o in objs
        for path, key, value in walk(o)
        if key == "privileged" and value is True
    ]


def _exporter_port(wl: Obj, port: str | int) -> list[Obj]:
    """Exporter container ports `port` (a name or number) resolves to in a workload."""
    return [
        p
        for c, _ in exporter_containers(wl)
        for p in c.get("ports", [])
        if port in (p.get("name"), p.get("containerPort"))
    ]


def check_monitor_targets(objs: list[Obj]) -> list[str]:
    """Each monitor selects the exporter's Service/pods, and each endpoint's port resolves
    to the exporter's container port 9400."""
    problems: list[str] = []
    for mon in of_kind(objs, "ServiceMonitor"):
        spec = mon.get("spec", {})
        namespaces = spec.get("namespaceSelector", {}).get("matchNames", [namespace_of(mon)])
        services = [
            s
            for s in of_kind(objs, "Service")
            if namespace_of(s) in namespaces
            and selector_matches(spec.get("selector", {}), s["metadata"].get("labels", {}))
        ]
        if not services:
            problems.append(f"{name_of(mon)}: selects no Service")
        for svc in services:
            backends = [
                w
                for w in workloads(objs)
                if namespace_of(w) == namespace_of(svc)
                and selector_matches(
                    {"matchLabels": svc["spec"].get("selector", {})}, pod_labels(w)
                )
            ]
            if not backends:
                problems.append(f"{name_of(svc)}: selects no workload")
            for ep in spec.get("endpoints", []):
                ports = [p for p in svc["spec"].get("ports", []) if p.get("name") == ep.get("port")]
                if not ports:
                    problems.append(
                        f"{name_of(mon)}: {name_of(svc)} has no port {ep.get('port')!r}"
                    )
                    continue
                target = ports[0].get("targetPort", ports[0].get("port"))
                for wl in backends:
                    found = _exporter_port(wl, target)
                    if [p.get("containerPort") for p in found] != [METRICS_PORT]:
                        problems.append(
                            f"{name_of(svc)} targetPort {target!r} is not the exporter's "
                            f"port {METRICS_PORT} in {name_of(wl)}"
                        )
    for mon in of_kind(objs, "PodMonitor"):
        spec = mon.get("spec", {})
        namespaces = spec.get("namespaceSelector", {}).get("matchNames", [namespace_of(mon)])
        pods = [
            w
            for w in workloads(objs)
            if namespace_of(w) in namespaces
            and selector_matches(spec.get("selector", {}), pod_labels(w))
        ]
        if not pods:
            problems.append(f"{name_of(mon)}: selects no pods")
        for wl in pods:
            for ep in spec.get("podMetricsEndpoints", []):
                name = ep.get("port")
                found = _exporter_port(wl, name)
                if [p.get("containerPort") for p in found] != [METRICS_PORT]:
                    problems.append(
                        f"{name_of(mon)}: port {name!r} is not the exporter's {METRICS_PORT} "
                        f"in {name_of(wl)}"
                    )
                # Prometheus makes a target of every container port with that name.
                others = [
                    c["name"]
                    for c, _ in all_containers(pod_spec(wl))
                    if not is_exporter(c) and any(p.get("name") == name for p in c.get("ports", []))
                ]
                if others:
                    problems.append(f"{name_of(mon)}: port {name!r} also names {others}")
    return problems


def check_daemonset(objs: Iterable[Obj]) -> list[str]:
    """Placement, NVIDIA runtime env, identity and probes of the node-wide exporter."""
    problems: list[str] = []
    for ds in of_kind(objs, "DaemonSet"):
        spec = pod_spec(ds)
        where = name_of(ds)
        if spec.get("nodeSelector", {}).get("nvidia.com/gpu.present") != "true":
            problems.append(f"{where}: nodeSelector lacks nvidia.com/gpu.present=true")
        if not any(
            t.get("key") == GPU_RESOURCE
            and t.get("effect") in ("NoSchedule", None)
            and (t.get("operator") == "Exists" or "value" in t)
            for t in spec.get("tolerations", [])
        ):
            problems.append(f"{where}: no toleration for the {GPU_RESOURCE} NoSchedule taint")
        if spec.get("priorityClassName") != "system-node-critical":
            problems.append(f"{where}: priorityClassName is not system-node-critical")
        for container, _ in exporter_containers(ds):
            if env_value(container, "NVIDIA_VISIBLE_DEVICES") != "all":
                problems.append(f"{where}: NVIDIA_VISIBLE_DEVICES is not 'all'")
            if env_value(container, "NVIDIA_DRIVER_CAPABILITIES") != "utility":
                problems.append(f"{where}: NVIDIA_DRIVER_CAPABILITIES is not 'utility'")
            if env_field_ref(container, "NODE_NAME") != "spec.nodeName":
                problems.append(f"{where}: NODE_NAME is not from spec.nodeName")
            if not attributes_pods(container):
                problems.append(f"{where}: neither -k nor DCGM_EXPORTER_KUBERNETES=true")
            port_names = {p.get("name") for p in container.get("ports", [])}
            for probe, path in (("livenessProbe", "/health"), ("readinessProbe", "/ready")):
                http = container.get(probe, {}).get("httpGet", {})
                if http.get("path") != path:
                    problems.append(f"{where}: {probe} path {http.get('path')!r}, want {path}")
                if http.get("port") not in (port_names | {METRICS_PORT}):
                    problems.append(f"{where}: {probe} port {http.get('port')!r}")
            resources = container.get("resources", {})
            if not {"cpu", "memory"} <= set(resources.get("requests", {})):
                problems.append(f"{where}: no cpu and memory requests")
            if "memory" not in resources.get("limits", {}):
                problems.append(f"{where}: no memory limit")
    return problems


def check_pod_security(objs: list[Obj]) -> list[str]:
    """A workload using hostPath runs in a namespace, declared alongside it, that the
    `privileged` Pod Security level governs."""
    namespaces = {o["metadata"]["name"]: o for o in of_kind(objs, "Namespace")}
    problems: list[str] = []
    for wl in workloads(objs):
        if not any("hostPath" in v for v in pod_spec(wl).get("volumes", [])):
            continue
        ns = namespaces.get(namespace_of(wl))
        if ns is None:
            problems.append(f"{name_of(wl)}: namespace {namespace_of(wl)!r} is not declared")
            continue
        level = ns["metadata"].get("labels", {}).get("pod-security.kubernetes.io/enforce")
        if level != "privileged":
            problems.append(
                f"{name_of(wl)}: namespace enforces {level!r}, hostPath needs privileged"
            )
    return problems


ALL_CHECKS = (
    check_monitors_honor_labels,
    check_pod_resources_mount,
    check_native_sidecar,
    check_hardening,
    find_privileged,
    check_monitor_targets,
    check_daemonset,
    check_pod_security,
)


def regex_is_valid(pattern: str) -> bool:
    try:
        re.compile(pattern)
    except re.error:
        return False
    return True

"""What the GPU Operator renders for an exporter image, and what that image holds.

- `render_exporter_daemonset`: the operator's `TransformDCGMExporter` (NVIDIA/gpu-operator
  `controllers/object_controls.go`, v26.7.0) applied to its asset
  `state-dcgm-exporter/0800_daemonset.yaml`, for the parts that reach the exporter's process
  or its pod spec: image, args, env, volumes, token, host namespaces. Validator init
  containers, pull secrets, runtime class and NRI annotations are left out: they do not
  change what runs inside the exporter container.
- `read_dockerfile`: the final stage of our Dockerfile (COPY, ENV, WORKDIR, ENTRYPOINT, CMD),
  with what it inherits from the stage it extends, parsed so that the operator's cases run
  without a container engine (tests/image builds and runs the real image); any instruction
  it cannot reproduce without one (RUN, ADD, ...) is an error, which keeps the final stages
  free of anything that would need emulation to build for another architecture.
- `lay_out_image`: the image's files under a directory standing in for its root.
- `container_argv`: ENTRYPOINT/CMD combined with the container's command/args as Kubernetes
  does, with the entrypoint resolved through pyproject's `[project.scripts]` (what pip
  installs as `/usr/local/bin/<name>`).
"""

from __future__ import annotations

import copy
import json
import shlex
import shutil
import sys
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from exporter import __version__

Obj = dict[str, Any]

REPO_ROOT = Path(__file__).resolve().parents[2]
FIXTURES = REPO_ROOT / "tests" / "fixtures"
OPERATOR_FIXTURES = FIXTURES / "gpu-operator"
DAEMONSET_ASSET = OPERATOR_FIXTURES / "state-dcgm-exporter" / "0800_daemonset.yaml"
DOCKERFILE = REPO_ROOT / "Dockerfile"

# The one change a user makes to the ClusterPolicy to run this exporter.
OUR_IMAGE = {"repository": "registry.example.com/platform", "image": "gpu-exporter",
             "version": __version__}

# Constants of the operator (controllers/object_controls.go, api/nvidia/v1).
REMOTE_ENGINE_ENV = "DCGM_REMOTE_HOSTENGINE_INFO"
REMOTE_ENGINE = "nvidia-dcgm:5555"
POD_LABELS_ENV = "DCGM_EXPORTER_KUBERNETES_ENABLE_POD_LABELS"
POD_UID_ENV = "DCGM_EXPORTER_KUBERNETES_ENABLE_POD_UID"
ALLOWLIST_ENV = "DCGM_EXPORTER_KUBERNETES_POD_LABEL_ALLOWLIST_REGEX"
CONFIGMAP_DATA_ENV = "DCGM_EXPORTER_CONFIGMAP_DATA"
METRICS_CONFIG_PATH = "/etc/dcgm-exporter/dcgm-metrics.csv"
METRICS_CONFIG_KEY = "dcgm-metrics.csv"
DEFAULT_JOB_MAPPING_DIR = "/var/lib/dcgm-exporter/job-mapping"


class RenderError(ValueError):
    """A ClusterPolicy the operator would refuse, or a Dockerfile this harness cannot read."""


# ----------------------------------------------------------------------------- the policy


@dataclass(frozen=True)
class Policy:
    """The `dcgm` and `dcgmExporter` parts of a ClusterPolicy spec."""

    dcgm: Obj
    exporter: Obj

    def with_exporter(self, **changes: Any) -> Policy:
        return Policy(self.dcgm, {**copy.deepcopy(self.exporter), **changes})

    def with_our_image(self) -> Policy:
        return self.with_exporter(**OUR_IMAGE)


def helm_default_policy() -> Policy:
    """The chart's values.yaml (dcgm off: dcgm-exporter embeds its own hostengine)."""
    values = yaml.safe_load((OPERATOR_FIXTURES / "helm-values-dcgm-dcgmExporter.excerpt.yaml")
                            .read_text(encoding="utf-8"))
    return Policy(values["dcgm"], values["dcgmExporter"])


def sample_cluster_policy() -> Policy:
    """config/samples/v1_clusterpolicy.yaml (dcgm on: a separate nv-hostengine)."""
    spec = yaml.safe_load((OPERATOR_FIXTURES / "v1_clusterpolicy.yaml")
                          .read_text(encoding="utf-8"))["spec"]
    return Policy(spec["dcgm"], spec["dcgmExporter"])


def _enabled(spec: Obj | None, default: bool = False) -> bool:
    """The operator's `Is...Enabled()`: a nil pointer means `default`."""
    value = (spec or {}).get("enabled")
    return default if value is None else bool(value)


def image_path(spec: Obj) -> str:
    repository, image, version = (str(spec.get(k) or "") for k in
                                  ("repository", "image", "version"))
    if not repository and not version:
        if image:
            return image
        raise RenderError("empty image path (the operator would fall back to its "
                          "DCGM_EXPORTER_IMAGE env)")
    if not (repository and image and version):
        raise RenderError("repository, image and version must all be set")
    separator = "@" if version.startswith("sha256:") else ":"
    return f"{repository}/{image}{separator}{version}"


def set_env(container: Obj, name: str, value: str) -> None:
    """The operator's setContainerEnv: replace the value in place, else append."""
    env = container.setdefault("env", [])
    for item in env:
        if item["name"] == name:
            item["value"] = value
            item.pop("valueFrom", None)
            return
    env.append({"name": name, "value": value})


def env_value(container: Obj, name: str) -> str | None:
    for item in container.get("env") or []:
        if item["name"] == name:
            return str(item["value"]) if "value" in item else None
    return None


def _env_needs_api(env: list[Obj]) -> bool:
    for item in env:
        if item["name"] in (POD_LABELS_ENV, POD_UID_ENV) and \
                str(item.get("value", "")).lower() == "true":
            return True
        if item["name"] == CONFIGMAP_DATA_ENV and item.get("value", "") not in ("", "none"):
            return True
    return False


def load_asset(path: Path = DAEMONSET_ASSET) -> Obj:
    obj = yaml.safe_load(path.read_text(encoding="utf-8"))
    assert isinstance(obj, dict)
    return obj


def render_exporter_daemonset(policy: Policy, asset: Obj | None = None) -> Obj:
    """TransformDCGMExporter's effect on the asset, in the operator's order."""
    ds = copy.deepcopy(asset if asset is not None else load_asset())
    spec = policy.exporter
    pod = ds["spec"]["template"]["spec"]
    container = pod["containers"][0]
    container["image"] = image_path(spec)
    container["imagePullPolicy"] = spec.get("imagePullPolicy") or "IfNotPresent"
    if spec.get("annotations"):
        ds["spec"]["template"]["metadata"].setdefault("annotations", {}).update(
            spec["annotations"])
    if spec.get("resources"):
        for c in pod["containers"]:
            c["resources"] = copy.deepcopy(spec["resources"])
    if spec.get("args"):
        container["args"] = list(spec["args"])
    if _enabled(policy.dcgm, default=True):
        set_env(container, REMOTE_ENGINE_ENV, REMOTE_ENGINE)
    elif (env_value(container, REMOTE_ENGINE_ENV) or "").startswith("localhost"):
        pod["hostNetwork"], pod["dnsPolicy"] = True, "ClusterFirstWithHostNet"
    if spec.get("hostNetwork"):
        pod["hostNetwork"], pod["dnsPolicy"] = True, "ClusterFirstWithHostNet"
    if spec.get("hostPID"):
        pod["hostPID"] = True
    mapping = spec.get("hpcJobMapping")
    if _enabled(mapping):
        directory = (mapping or {}).get("directory") or DEFAULT_JOB_MAPPING_DIR
        set_env(container, "DCGM_HPC_JOB_MAPPING_DIR", directory)
        container.setdefault("volumeMounts", []).append(
            {"name": "hpc-job-mapping", "readOnly": True, "mountPath": directory})
        pod.setdefault("volumes", []).append(
            {"name": "hpc-job-mapping",
             "hostPath": {"path": directory, "type": "DirectoryOrCreate"}})
    if spec.get("enablePodLabels"):
        set_env(container, POD_LABELS_ENV, "true")
    if spec.get("enablePodUID"):
        set_env(container, POD_UID_ENV, "true")
    if spec.get("podLabelAllowlistRegex"):
        set_env(container, ALLOWLIST_ENV, ",".join(spec["podLabelAllowlistRegex"]))
    user_env = [dict(item) for item in spec.get("env") or []]
    if spec.get("enablePodLabels") or spec.get("enablePodUID") or _env_needs_api(user_env):
        pod["automountServiceAccountToken"] = True
    config_name = (spec.get("config") or {}).get("name")
    if config_name:
        container.setdefault("volumeMounts", []).append(
            {"name": "metrics-config", "readOnly": True, "mountPath": METRICS_CONFIG_PATH,
             "subPath": METRICS_CONFIG_KEY})
        pod.setdefault("volumes", []).append(
            {"name": "metrics-config",
             "configMap": {"name": config_name,
                           "items": [{"key": METRICS_CONFIG_KEY,
                                      "path": METRICS_CONFIG_KEY}]}})
        set_env(container, "DCGM_EXPORTER_COLLECTORS", METRICS_CONFIG_PATH)
    for item in user_env:
        set_env(container, item["name"], str(item.get("value", "")))
    return ds


def golden_daemonsets(name: str) -> list[Obj]:
    """The DaemonSets of one of the operator's GPUCluster golden renderings."""
    path = OPERATOR_FIXTURES / "gpucluster" / name
    docs = yaml.safe_load_all(path.read_text(encoding="utf-8"))
    return [d for d in docs if isinstance(d, dict) and d.get("kind") == "DaemonSet"]


# ----------------------------------------------------------------------------- the image


@dataclass(frozen=True)
class Copy:
    sources: tuple[str, ...]
    dest: str
    from_stage: str | None
    """None: from the build context (the repository root)."""


@dataclass(frozen=True)
class ImageSpec:
    env: dict[str, str] = field(default_factory=dict)
    workdir: str = "/"
    entrypoint: tuple[str, ...] = ()
    cmd: tuple[str, ...] = ()
    copies: tuple[Copy, ...] = ()


_IGNORED = {"EXPOSE", "USER", "LABEL", "ARG"}
"""Instructions with no effect on the files or the process this harness starts (the
process runs as the test's user; uid 0 matters only on a real kubelet socket; a build
argument reaches only the build)."""


def _logical_lines(text: str) -> list[str]:
    lines: list[str] = []
    pending = ""
    for raw in text.splitlines():
        stripped = raw.strip()
        if not pending and (not stripped or stripped.startswith("#")):
            continue
        if pending and stripped.startswith("#"):
            continue  # a comment inside a continued instruction
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        lines.append(pending + stripped)
        pending = ""
    if pending:
        raise RenderError(f"Dockerfile ends inside a continued line: {pending!r}")
    return lines


def _exec_form(keyword: str, rest: str) -> tuple[str, ...]:
    try:
        value = json.loads(rest)
    except json.JSONDecodeError:
        raise RenderError(f"{keyword} must use the exec (JSON) form, not {rest!r}") from None
    if not (isinstance(value, list) and all(isinstance(v, str) for v in value)):
        raise RenderError(f"{keyword} {rest!r} is not a JSON list of strings")
    return tuple(value)


@dataclass
class _Stage:
    env: dict[str, str] = field(default_factory=dict)
    workdir: str = "/"
    entrypoint: tuple[str, ...] = ()
    cmd: tuple[str, ...] = ()
    copies: list[Copy] = field(default_factory=list)
    unsupported: list[str] = field(default_factory=list)

    def extended(self) -> _Stage:
        """A stage `FROM` this one starts with its files and configuration."""
        return _Stage(dict(self.env), self.workdir, self.entrypoint, self.cmd,
                      list(self.copies), list(self.unsupported))


def _from_line(rest: str, stages: dict[str, _Stage]) -> tuple[str | None, _Stage]:
    """(the stage's name, its starting state) for `FROM [--platform=P] BASE [AS NAME]`."""
    words = [w for w in rest.split() if not w.startswith("--")]
    base = words[0].lower() if words else ""
    name = words[2].lower() if len(words) == 3 and words[1].lower() == "as" else None
    return name, stages[base].extended() if base in stages else _Stage()


def read_dockerfile(path: Path) -> ImageSpec:
    """The final stage of a Dockerfile, as far as the container's process can tell; a stage
    built `FROM` an earlier one of the same file inherits that one's files and settings."""
    stages: dict[str, _Stage] = {}
    stage: _Stage | None = None
    for line in _logical_lines(path.read_text(encoding="utf-8")):
        keyword, _, rest = line.partition(" ")
        keyword, rest = keyword.upper(), rest.strip()
        if keyword == "FROM":
            name, stage = _from_line(rest, stages)
            if name is not None:
                stages[name] = stage
        elif stage is None:
            if keyword != "ARG":  # a build argument of the FROM lines
                raise RenderError(f"{keyword} before the first FROM")
        elif keyword == "ENV":
            words = shlex.split(rest)
            if words and "=" not in words[0]:
                stage.env[words[0]] = rest.split(None, 1)[1] if len(words) > 1 else ""
            else:
                for word in words:
                    name, _, value = word.partition("=")
                    stage.env[name] = value
        elif keyword == "WORKDIR":
            stage.workdir = rest if rest.startswith("/") else \
                f"{stage.workdir.rstrip('/')}/{rest}"
        elif keyword == "ENTRYPOINT":
            stage.entrypoint, stage.cmd = _exec_form(keyword, rest), ()  # resets CMD
        elif keyword == "CMD":
            stage.cmd = _exec_form(keyword, rest)
        elif keyword == "COPY":
            words = shlex.split(rest)
            flags = {w.split("=", 1)[0]: w.split("=", 1)[1] for w in words
                     if w.startswith("--") and "=" in w}
            paths = [w for w in words if not w.startswith("--")]
            if len(paths) < 2:
                raise RenderError(f"COPY needs a source and a destination: {line!r}")
            stage.copies.append(Copy(tuple(paths[:-1]), paths[-1], flags.get("--from")))
        elif keyword in _IGNORED:
            continue
        else:
            # Fine in a build stage (the next FROM forgets it); in the final stage, or one
            # it extends, it cannot be reproduced without a container engine.
            stage.unsupported.append(keyword)
    if stage is None:
        raise RenderError(f"{path}: no FROM line")
    if stage.unsupported:
        raise RenderError(f"the final stage uses {', '.join(stage.unsupported)}: only COPY, "
                          "ENV, WORKDIR, ENTRYPOINT, CMD, EXPOSE, USER, LABEL and ARG can be "
                          "laid out")
    return ImageSpec(stage.env, stage.workdir, stage.entrypoint, stage.cmd,
                     tuple(stage.copies))


def under(root: Path, container_path: str) -> Path:
    return root / container_path.lstrip("/")


def lay_out_image(image: ImageSpec, context: Path, root: Path) -> list[Copy]:
    """Copies the build-context files of the final stage under `root`; returns the copies
    from other stages, which the caller stands in for (the installed package)."""
    from_stages: list[Copy] = []
    for item in image.copies:
        if item.from_stage is not None:
            from_stages.append(item)
            continue
        into_dir = item.dest.endswith("/") or len(item.sources) > 1
        for source in item.sources:
            src = context / source
            if src.is_dir():  # a directory's contents, not the directory itself
                shutil.copytree(src, under(root, item.dest), dirs_exist_ok=True)
            elif src.is_file():
                target = under(root, item.dest)
                if into_dir:
                    target.mkdir(parents=True, exist_ok=True)
                    target = target / src.name
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(src, target)
            else:
                raise RenderError(f"COPY source {source!r} is not in the build context")
    under(root, image.workdir).mkdir(parents=True, exist_ok=True)
    return from_stages


def resolve_executable(name: str, pyproject: Path = REPO_ROOT / "pyproject.toml") -> list[str]:
    """A console script pip installs (`gpu-exporter` or /usr/local/bin/gpu-exporter), as a
    command that runs the same function with this interpreter."""
    scripts = tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]["scripts"]
    script = name.removeprefix("/usr/local/bin/")
    if "/" in script or script not in scripts:
        raise RenderError(f"entrypoint {name!r} is not one of pyproject's scripts "
                          f"({', '.join(scripts)})")
    module, _, function = scripts[script].partition(":")
    return [sys.executable, "-c",
            f"import sys; from {module} import {function}; sys.exit({function}())"]


def container_argv(image: ImageSpec, container: Obj) -> tuple[list[str], list[str]]:
    """(how to run the executable here, its arguments), combined as Kubernetes does:
    `command` replaces ENTRYPOINT (and drops CMD); `args` replace CMD."""
    command = container.get("command")
    args = container.get("args")
    head = list(command) if command else list(image.entrypoint)
    tail = list(args) if args else ([] if command else list(image.cmd))
    if not head:
        raise RenderError("neither the image nor the container names a command")
    return resolve_executable(head[0]), [*head[1:], *tail]

"""The chart under test, rendered by Helm's own engine (helm-python-sdk binds Helm v4's Go SDK),
and the values files the tests render it with.

`scripts/chart.py` holds the rendering and the generated parts (`sync`); the tests load it
from there, so that what they check is what that script writes.
"""

from __future__ import annotations

import atexit
import copy
import functools
import importlib.util
import shutil
import sys
import tempfile
from pathlib import Path
from types import ModuleType
from typing import Any

import yaml

from tests.deploy._manifests import (
    KUBERNETES_VERSIONS,
    is_custom_kind,
    name_of,
    validate_object,
)
from tests.support.paths import FIXTURES, ROOT
from tests.support.requirements import require_module

Obj = dict[str, Any]

CHART = ROOT / "charts" / "gpu-exporter"
VALUES_DIR = Path(__file__).resolve().parent / "values"
UPSTREAM_CHART = FIXTURES / "dcgm-exporter-chart"
UPSTREAM_484 = FIXTURES / "dcgm-exporter-4.8.4"
"""dcgm-exporter 4.8.4's values.yaml, Chart.yaml, daemonset.yaml and config-configmap.tpl."""
RELEASE = "dcgm-exporter"
NAMESPACE = "gpu-monitoring"
OUR_IMAGE = {"repository": "registry.example.com/platform/gpu-exporter", "tag": "0.1.0",
             "pullPolicy": "IfNotPresent"}
"""What a user moving from dcgm-exporter's chart changes in its values.yaml."""


def helm() -> ModuleType:
    """helm_python (helm-python-sdk, a test dependency): missing, the test is skipped locally
    and fails in CI."""
    return require_module("helm_python")


@functools.cache
def script() -> ModuleType:
    """scripts/chart.py, imported (it needs helm-python-sdk)."""
    helm()
    path = ROOT / "scripts" / "chart.py"
    spec = importlib.util.spec_from_file_location("chart_script", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["chart_script"] = module
    spec.loader.exec_module(module)
    return module


def render(values: Obj | None = None, *, name: str = RELEASE, namespace: str = NAMESPACE,
           chart: Path = CHART) -> dict[str, str]:
    rendered: dict[str, str] = script().render(values, name=name, namespace=namespace,
                                               chart=chart)
    return rendered


def objects(values: Obj | None = None, *, name: str = RELEASE, namespace: str = NAMESPACE,
            chart: Path = CHART) -> list[Obj]:
    """The rendered Kubernetes objects, in Helm's install order."""
    found: list[Obj] = script().objects(render(values, name=name, namespace=namespace,
                                               chart=chart))
    return found


def values_file(name: str) -> Obj:
    loaded: Obj = yaml.safe_load((VALUES_DIR / f"{name}.yaml").read_text(encoding="utf-8"))
    return loaded


def feature_values() -> list[str]:
    """The values files under tests/chart/values, one per feature."""
    return sorted(p.stem for p in VALUES_DIR.glob("*.yaml"))


def upstream_values() -> Obj:
    """dcgm-exporter's chart values.yaml as it is, with only `image` changed."""
    values: Obj = yaml.safe_load((UPSTREAM_CHART / "values.yaml").read_text(encoding="utf-8"))
    values["image"] = dict(OUR_IMAGE)
    return values


def upstream_484_values() -> Obj:
    """dcgm-exporter 4.8.4's chart values.yaml as it is, with only `image` changed."""
    values: Obj = yaml.safe_load((UPSTREAM_484 / "values.yaml").read_text(encoding="utf-8"))
    values["image"] = dict(OUR_IMAGE)
    return values


def merged(base: Obj, override: Obj) -> Obj:
    """`-f base -f override`, as Helm coalesces values."""
    out: Obj = script().merge_values(copy.deepcopy(base), copy.deepcopy(override))
    return out


def of_kind(objs: list[Obj], kind: str) -> list[Obj]:
    return [o for o in objs if o.get("kind") == kind]


def one(objs: list[Obj], kind: str) -> Obj:
    (found,) = of_kind(objs, kind)
    return found


def exporter(objs: list[Obj]) -> Obj:
    container: Obj = one(objs, "DaemonSet")["spec"]["template"]["spec"]["containers"][0]
    return container


def env(container: Obj) -> dict[str, str]:
    return {e["name"]: str(e["value"]) for e in container.get("env", []) if "value" in e}


def validation_problems(objs: list[Obj]) -> list[str]:
    """Every object against the Kubernetes schemas (strict: unknown fields rejected) of each
    supported version, custom resources against the CRDs in tests/fixtures/crds."""
    problems = []
    for obj in objs:
        versions = KUBERNETES_VERSIONS if not is_custom_kind(obj) else KUBERNETES_VERSIONS[-1:]
        for version in versions:
            problems += [f"{name_of(obj)}: {p}" for p in validate_object(obj, version)]
    return problems


STAND_INS_484 = """\
{{- /*
Stand-ins for the two helpers 4.8.4's templates call that are not among the copied files
(tests/fixtures/dcgm-exporter-4.8.4), as 4.8.4's values.yaml describes them: the token
derived from pod labels or UIDs with rbac.create, or DRA, unless set; the config ConfigMap
named <fullname>-config unless config.name, which config.create false requires.
*/ -}}
{{- define "dcgm-exporter.automountServiceAccountToken" -}}
{{- $set := .Values.serviceAccount.automountServiceAccountToken -}}
{{- if kindIs "bool" $set -}}{{ $set }}{{- else -}}
{{- or (and (or .Values.kubernetes.enablePodLabels .Values.kubernetes.enablePodUID) \
.Values.kubernetes.rbac.create) .Values.kubernetesDRA.enabled -}}
{{- end -}}
{{- end -}}
{{- define "dcgm-exporter.configConfigMap" -}}
{{- if .Values.config.create -}}
{{- default (printf "%s-config" (include "dcgm-exporter.fullname" .)) .Values.config.name -}}
{{- else -}}
{{- required "config.name must be set when config.create is false" .Values.config.name -}}
{{- end -}}
{{- end -}}
"""


@functools.cache
def upstream_484_chart() -> Path:
    """dcgm-exporter's chart as of 4.8.4, as far as its files were copied: the 4.8.2 chart
    with 4.8.4's Chart.yaml, values.yaml, daemonset.yaml and config-configmap.tpl, and
    STAND_INS_484 for the helpers that 4.8.4's daemonset.yaml calls."""
    folder = Path(tempfile.mkdtemp(prefix="dcgm-exporter-4.8.4-"))
    atexit.register(shutil.rmtree, folder, True)
    chart = folder / "dcgm-exporter"
    shutil.copytree(UPSTREAM_CHART, chart)
    for name in ("Chart.yaml", "values.yaml", "templates/daemonset.yaml",
                 "templates/config-configmap.tpl"):
        shutil.copyfile(UPSTREAM_484 / name, chart / name)
    (chart / "templates" / "_stand_ins.tpl").write_text(STAND_INS_484, encoding="utf-8")
    return chart


def upstream_objects(values: Obj, *, name: str = RELEASE,
                     chart: Path = UPSTREAM_CHART) -> list[Obj]:
    """dcgm-exporter's chart rendered: Helm installs every non-partial template's output,
    config-configmap.tpl's too (only names starting with _ are skipped)."""
    rendered = render(values, name=name, chart=chart)
    as_installed = {(k[:-len(".tpl")] + ".yaml" if k.endswith(".tpl")
                     and not k.rpartition("/")[2].startswith("_") else k): v
                    for k, v in rendered.items()}
    found: list[Obj] = script().objects(as_installed)
    return found

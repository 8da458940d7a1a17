"""The committed dashboards and KEDA examples as the end-to-end tests read them: panels with
their queries, and KEDA queries pointed at the simulated Deployment."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from tests.support.paths import ROOT

DASHBOARDS = sorted((ROOT / "dashboards").glob("*.json"))
KEDA_EXAMPLES = sorted((ROOT / "deploy" / "keda").glob("*.yaml"))
EXTERNAL = re.compile(r"\b(kube_|keda_|pod:gpu_usage_)")
"""Sources absent from the end-to-end stacks; the usage recording rules (`pod:gpu_usage_*`)
are evaluated hourly, and the chargeback dashboard over them is checked by
tests/report/test_ground_truth.py."""


@dataclass(frozen=True)
class Target:
    expr: str
    legend: str


@dataclass(frozen=True)
class PanelTargets:
    title: str
    no_value: str
    """What the panel says instead of "No data" ("" when nothing)."""
    targets: tuple[Target, ...]


def dashboard_panels(path: Path) -> list[PanelTargets]:
    model = json.loads(path.read_text())
    return [PanelTargets(panel["title"],
                         panel.get("fieldConfig", {}).get("defaults", {}).get("noValue", ""),
                         tuple(Target(t["expr"], t.get("legendFormat", ""))
                               for t in panel.get("targets", [])))
            for panel in model["panels"] if panel["type"] != "row"]


def dashboard_targets(path: Path) -> list[tuple[str, str, str]]:
    """(panel title, expr, legend format) of every query of a dashboard."""
    return [(panel.title, t.expr, t.legend) for panel in dashboard_panels(path)
            for t in panel.targets]


def variable_expr(query: str) -> str:
    """The PromQL a Grafana variable query evaluates: `label_values(selector, label)` counts
    the selector by the label, `query_result(expr)` is the expression itself."""
    if (values := re.fullmatch(r"label_values\((.*), *(\w+)\)", query)) is not None:
        return f"count by ({values.group(2)}) ({values.group(1)})"
    result = re.fullmatch(r"query_result\((.*)\)", query)
    assert result, query
    return result.group(1)


def variable_queries(path: Path) -> list[tuple[str, str, str]]:
    """(variable name, PromQL it evaluates, its regex) of every query variable."""
    return [(var["name"], variable_expr(var["query"]), var.get("regex", ""))
            for var in json.loads(path.read_text())["templating"]["list"][1:]]


def variable_values(regex: str, series: list[dict[str, Any]], label: str = "") -> list[str]:
    """The values Grafana takes from a variable query's answer: for `query_result`, the first
    group of `regex` (`/.../`) in each series' text `{name="value", ...} value time`."""
    if not regex:
        return [s["metric"].get(label, "") for s in series]
    pattern = re.compile(regex.strip("/"))
    texts = ["{" + ",".join(f'{k}="{v}"' for k, v in s["metric"].items()) + "}" for s in series]
    return [m.group(1) for text in texts if (m := pattern.search(text)) is not None]


def legends(legend: str, series: list[dict[str, Any]]) -> list[str]:
    """Legends as Grafana draws them (a missing label renders empty)."""
    def draw(labels: dict[str, str]) -> str:
        return re.sub(r"\{\{\s*(\w+)\s*\}\}", lambda m: labels.get(m.group(1), ""), legend)

    return [draw(s["metric"]) for s in series]


def keda_queries(obj: dict[str, Any]) -> list[str]:
    return [t["metadata"]["query"] for t in obj["spec"]["triggers"]]


def retargeted_keda_queries(obj: dict[str, Any], namespace: str, deployment: str) -> list[str]:
    """A committed example's queries, pointed at `deployment` in `namespace`."""
    old_ns = obj["metadata"]["namespace"]
    old_dep = obj["spec"]["scaleTargetRef"]["name"]
    return [query.replace(f'namespace="{old_ns}"', f'namespace="{namespace}"')
            .replace(f'pod=~"{old_dep}-', f'pod=~"{deployment}-')
            for query in keda_queries(obj)]


def committed_keda_queries(namespace: str, deployment: str) -> list[tuple[str, str]]:
    """(file name, query) for every query of every committed KEDA example, pointed at
    `deployment` in `namespace`."""
    return [(path.name, query) for path in KEDA_EXAMPLES
            for query in retargeted_keda_queries(yaml.safe_load(path.read_text()), namespace,
                                                 deployment)]

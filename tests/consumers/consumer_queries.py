"""The consumers' own query text, read from their files in tests/fixtures/consumers/ (and
dcgm-exporter's dashboard in tests/fixtures/dcgm-exporter/), never retyped."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.artifacts.committed import dashboard_targets
from tests.support.paths import fixture_file


@dataclass(frozen=True)
class OpenCostQuery:
    """One entry of opencost/queries.yaml."""

    name: str
    source: str
    """`<path in OpenCost's repository>@<commit>`."""
    format: str
    """The Go format string, as written in the source."""
    query: str
    """The format instantiated with OpenCost's defaults: what OpenCost sends to Prometheus."""
    expects: str


def opencost_queries() -> list[OpenCostQuery]:
    """Return every query of opencost/queries.yaml, in file order."""
    import yaml

    document: dict[str, Any] = yaml.safe_load(
        fixture_file("consumers", "opencost", "queries.yaml").read_text())
    return [OpenCostQuery(q["name"], q["source"], q["format"], q["query"], q["expects"])
            for q in document["queries"]]


def go_source(source: str) -> Path:
    """Return the copied Go file a `source` names: the whole file, or the file of the
    functions copied from it at that commit (`<file>.DCGM-EXCERPTS@<commit[:8]>.go`)."""
    path, _, commit = source.partition("@")
    whole = fixture_file("consumers", "opencost").joinpath(path)
    if whole.exists():
        return whole
    return fixture_file("consumers", "opencost", f"{path}.DCGM-EXCERPTS@{commit[:8]}.go")


def format_pattern(go_format: str) -> str:
    """Return a regular expression matching every text Go's fmt.Sprintf makes of
    `go_format` (each verb standing for any text, `%%` for a percent sign)."""
    parts = re.split(r"(%%|%[sdg])", go_format)
    return "".join(".*?" if p in ("%s", "%d", "%g") else "%" if p == "%%" else re.escape(p)
                   for p in parts)


def grouping_labels(query: str) -> set[str]:
    """Return every label a query's `by (...)` clauses name."""
    return {label.strip() for clause in re.findall(r"\bby \(([^)]*)\)", query)
            for label in clause.split(",") if label.strip()}


KUBECOST_DASHBOARD = ("consumers", "kubecost", "cost-analyzer", "grafana-dashboards",
                      "pod-utilization.json")
DCGM_EXPORTER_DASHBOARD = ("dcgm-exporter", "dcgm-exporter-dashboard.json")


def dashboard_dcgm_queries(*parts: str) -> list[tuple[str, str]]:
    """Return (panel title, expr) of each query of a dashboard that reads a DCGM series."""
    return [(title, expr) for title, expr, _ in dashboard_targets(fixture_file(*parts))
            if "DCGM_FI_" in expr]


def kubecost_variables() -> list[str]:
    """Return the template variables of Kubecost's pod-utilization dashboard."""
    model = json.loads(fixture_file(*KUBECOST_DASHBOARD).read_text())
    return [v["name"] for v in model["templating"]["list"]]


def every_query_text() -> list[str]:
    """Return the text of every query run against the nodes."""
    return ([q.query for q in opencost_queries()]
            + [expr for _, expr in dashboard_dcgm_queries(*KUBECOST_DASHBOARD)]
            + [expr for _, expr in dashboard_dcgm_queries(*DCGM_EXPORTER_DASHBOARD)])

"""Dashboard structure: what Grafana's import dialog and a current Grafana need, checked on
the committed JSON, plus a PromQL syntax check of every panel query with promtool."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.artifacts.committed import variable_queries
from tests.artifacts.conftest import promtool, run_generate
from tests.support.paths import ROOT

DASHBOARDS = sorted((ROOT / "dashboards").glob("*.json"))
DS_REF = {"type": "prometheus", "uid": "${datasource}"}
GRAFANA_VARS = {"__rate_interval": "1m", "__interval": "30s", "__interval_ms": "30000",
                "__range": "1h"}


def _load(path: Path) -> dict[str, Any]:
    model: dict[str, Any] = json.loads(path.read_text())
    return model


def _panels(model: dict[str, Any]) -> list[dict[str, Any]]:
    return [p for p in model["panels"] if p["type"] != "row"]


def substitute(expr: str, values: dict[str, str] | None = None) -> str:
    """Replace Grafana variables the way Grafana would for an "All" selection. `$1` in a
    `label_replace` is the regex's group, not a variable."""
    table = {**GRAFANA_VARS, **(values or {})}
    return re.sub(r"\$([A-Za-z_]\w*)", lambda m: table.get(m.group(1), ".*"), expr)


def _nulls(value: Any, path: str = "") -> list[str]:
    if value is None:
        return [path]
    if isinstance(value, dict):
        return [p for k, v in value.items() for p in _nulls(v, f"{path}.{k}")]
    if isinstance(value, list):
        return [p for i, v in enumerate(value) for p in _nulls(v, f"{path}[{i}]")]
    return []


def test_the_six_dashboards_exist() -> None:
    assert [p.name for p in DASHBOARDS] == [
        "gpu-chargeback.json", "gpu-fleet-overview.json", "gpu-inference-autoscaling.json",
        "gpu-kubernetes-workloads.json", "gpu-mig.json", "gpu-node-detail.json"]


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda p: p.stem)
def test_importable_current_model(path: Path) -> None:
    model = _load(path)
    assert _nulls(model) == []
    assert model["schemaVersion"] >= 39
    assert "rows" not in model
    assert "id" not in model
    inputs = model["__inputs"]
    assert [(i["type"], i["pluginId"]) for i in inputs] == [("datasource", "prometheus")]
    requires = {(r["type"], r["id"]) for r in model["__requires"]}
    assert {("grafana", "grafana"), ("datasource", "prometheus")} <= requires
    assert {("panel", p["type"]) for p in _panels(model)} <= requires
    variables = model["templating"]["list"]
    ds_var = variables[0]
    assert (ds_var["name"], ds_var["type"], ds_var["query"]) == (
        "datasource", "datasource", "prometheus")
    # The import dialog replaces ${DS_PROMETHEUS} with the datasource the user picks.
    assert ds_var["current"]["value"] == "${" + inputs[0]["name"] + "}"
    for var in variables[1:]:
        assert var["datasource"] == DS_REF, var["name"]
        assert var["type"] == "query"


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda p: p.stem)
def test_panels(path: Path) -> None:
    model = _load(path)
    ids = [p["id"] for p in model["panels"]]
    assert len(ids) == len(set(ids))
    occupied: set[tuple[int, int]] = set()
    for panel in model["panels"]:
        pos = panel["gridPos"]
        assert pos["x"] >= 0, panel["title"]
        assert pos["x"] + pos["w"] <= 24, panel["title"]
        cells = {(x, y) for x in range(pos["x"], pos["x"] + pos["w"])
                 for y in range(pos["y"], pos["y"] + pos["h"])}
        assert not cells & occupied, f"{panel['title']} overlaps another panel"
        occupied |= cells
    for panel in _panels(model):
        title = panel["title"]
        assert panel["type"] in ("timeseries", "stat", "table"), title
        assert panel["datasource"] == DS_REF, title
        assert panel["fieldConfig"]["defaults"]["unit"], title
        assert panel["description"], title
        assert panel["targets"], title
        for target in panel["targets"]:
            assert target["datasource"] == DS_REF, title
            expr = target["expr"]
            # rate()/increase() windows follow the scrape interval, except whole-range sums.
            for window in re.findall(r"(?:rate|increase)\([^\[]*\[([^\]]+)\]", expr):
                assert window in ("$__rate_interval", "$__range"), (title, expr)
            legend = target["legendFormat"]
            if "{{gpu}}" in legend:
                # Either host label draws the node: a legend names both.
                assert "{{Hostname}}{{hostname}}" in legend, f"{title}: legend not unique"


def test_variables_of_the_node_dashboard() -> None:
    model = _load(ROOT / "dashboards" / "gpu-node-detail.json")
    names = [v["name"] for v in model["templating"]["list"]]
    assert names == ["datasource", "job", "Hostname", "gpu"]


def test_uids_are_stable_and_unique() -> None:
    uids = [_load(p)["uid"] for p in DASHBOARDS]
    assert len(set(uids)) == len(uids)
    assert all(re.fullmatch(r"[a-z0-9-]{1,40}", u) for u in uids)
    assert "gpu-exporter-fleet" in uids


def test_every_query_parses(tmp_path: Path) -> None:
    """promtool parses each query (variables substituted) as a recording rule."""
    rules: list[dict[str, str]] = []
    for path in DASHBOARDS:
        for panel in _panels(_load(path)):
            for target in panel["targets"]:
                rules.append({"record": f"check:{len(rules)}",
                              "expr": substitute(target["expr"])})
        for _, expr, _ in variable_queries(path):
            rules.append({"record": f"check:{len(rules)}", "expr": substitute(expr)})
    (tmp_path / "queries.yml").write_text(yaml.safe_dump(
        {"groups": [{"name": "dashboard-queries", "rules": rules}]}))
    result = subprocess.run([promtool(), "check", "rules", "queries.yml"],
                            cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr


def test_only_enabled_fields_appear(tmp_path: Path) -> None:
    csv = tmp_path / "small.csv"
    enabled = {"DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE",
               "DCGM_FI_PROF_GR_ENGINE_ACTIVE"}
    csv.write_text("".join(f"{name}, gauge, x\n" for name in sorted(enabled)))
    result = run_generate("dashboards", "--collectors", str(csv), "--out", str(tmp_path))
    assert result.returncode == 0, result.stderr
    written = sorted((tmp_path / "dashboards").glob("*.json"))
    assert len(written) == 6
    for path in written:
        model = _load(path)
        for panel in _panels(model):
            for target in panel["targets"]:
                used = set(re.findall(r"\bDCGM_(?:FI|EXP)_[A-Z0-9_]+", target["expr"]))
                assert used <= enabled, (path.name, panel["title"], used - enabled)
    fleet = _load(tmp_path / "dashboards" / "gpu-fleet-overview.json")
    titles = {p["title"] for p in _panels(fleet)}
    assert "GPU utilisation (whole GPUs)" in titles
    assert "Power draw" not in titles
    # A section whose panels all need disabled fields is gone, row and all.
    assert "Power and energy" not in {p["title"] for p in fleet["panels"] if p["type"] == "row"}


SERVING_METRIC = re.compile(r"\b(vllm:|dynamo_)")


def test_inference_panels_hold_up_without_serving_metrics_or_pod_labels() -> None:
    """Serving metrics (vLLM, Dynamo) sit in panels of their own: a cluster without them
    loses only those panels, which then say what they need. Panels that need the role or
    queue labels say so too."""
    model = _load(ROOT / "dashboards" / "gpu-inference-autoscaling.json")
    serving_panels, labelled = [], []
    for panel in _panels(model):
        exprs = [t["expr"] for t in panel["targets"]]
        reads_serving = [bool(SERVING_METRIC.search(e)) for e in exprs]
        assert all(reads_serving) or not any(reads_serving), panel["title"]
        if all(reads_serving):
            serving_panels.append(panel["title"])
        if any(re.search(r"llm_d_ai_role|kai_scheduler_queue", e) for e in exprs):
            labelled.append(panel["title"])
        if all(reads_serving) or labelled[-1:] == [panel["title"]]:
            assert panel["fieldConfig"]["defaults"]["noValue"], panel["title"]
    assert len(serving_panels) == 4  # the inference queue trigger, and the three by role
    assert {"Queue depth", "KV-cache use", "Time to first token (p90)"} <= set(labelled)
    assert {"Engine activity by role", "GPU-hours per queue"} <= set(labelled)


def test_activity_panels_without_gpm_fields_read_nvml(tmp_path: Path) -> None:
    """A collectors file with no GPM field (nothing to collect before Hopper) keeps the
    activity panels, on NVML utilisation alone; panels over GPM alone are left out."""
    csv = tmp_path / "nvml.csv"
    csv.write_text("DCGM_FI_DEV_GPU_UTIL, gauge, util\nDCGM_FI_DEV_MEM_COPY_UTIL, gauge, mem\n"
                   "DCGM_FI_DEV_FB_USED, gauge, used\nDCGM_FI_DEV_FB_FREE, gauge, free\n")
    result = run_generate("dashboards", "--collectors", str(csv), "--out", str(tmp_path))
    assert result.returncode == 0, result.stderr
    fleet = {p["title"]: p for p in _panels(_load(tmp_path / "dashboards" /
                                                   "gpu-fleet-overview.json"))}
    assert "Tensor pipe active" not in fleet
    (target,) = fleet["Graphics engine active"]["targets"]
    assert target["expr"] == ('(DCGM_FI_DEV_GPU_UTIL{job=~"$job", Hostname=~"$Hostname|", '
                              'hostname=~"$Hostname|"} / 100)')
    inference = {p["title"]: p for p in _panels(_load(
        tmp_path / "dashboards" / "gpu-inference-autoscaling.json"))}
    (target,) = inference["Memory-interface activity by role"]["targets"]
    assert "DCGM_FI_DEV_MEM_COPY_UTIL{" in target["expr"]
    assert "DCGM_FI_PROF" not in target["expr"]

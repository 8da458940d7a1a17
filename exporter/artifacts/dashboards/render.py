"""Dashboard specs -> grafanalib objects -> a current Grafana dashboard model.

grafanalib 0.7.1 still writes the schema-12 model: nulls everywhere, legacy keys (`rows`,
`span`, `style`, ...) and no import metadata. Its output is therefore rebuilt here from an
allow-list of keys per object, which is also what keeps the JSON stable across versions.
"""

from __future__ import annotations

import json
from typing import Any

import grafanalib.core as g
from grafanalib._gen import DashboardEncoder

from exporter.artifacts.dashboards.spec import Dashboard, Kind, Panel, Variable
from exporter.promql import measures as gpm

SCHEMA_VERSION = 39
GRAFANA_MIN_VERSION = "10.4.0"
DS_INPUT = "DS_PROMETHEUS"
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
GRID_WIDTH = 24
ROW_HEIGHT = 1

Json = dict[str, Any]


def _to_json(obj: object) -> Any:
    return json.loads(json.dumps(obj, cls=DashboardEncoder))


def _targets(panel: Panel) -> list[g.Target]:
    for q in panel.queries:
        if gpm.unresolved(q.expr):
            raise ValueError(f"panel {panel.title!r}: a GPM measure was not resolved (render "
                             "a dashboard restricted to a field set)")
    return [
        g.Target(
            expr=q.expr,
            legendFormat=q.legend,
            refId=chr(ord("A") + i),
            instant=q.instant or panel.kind is not Kind.TIMESERIES,
            format="table" if panel.kind is Kind.TABLE else "time_series",
        )
        for i, q in enumerate(panel.queries)
    ]


def _grafanalib_panel(panel: Panel, pid: int, pos: g.GridPos) -> Any:
    common: Json = {
        "title": panel.title,
        "description": panel.description,
        "targets": _targets(panel),
        "id": pid,
        "gridPos": pos,
    }
    if panel.kind is Kind.TIMESERIES:
        return g.TimeSeries(unit=panel.unit, legendDisplayMode="table",
                            legendPlacement="right" if panel.width >= 16 else "bottom",
                            legendCalcs=["lastNotNull", "max"], tooltipMode="multi",
                            tooltipSort="desc", **common)
    if panel.kind is Kind.STAT:
        return g.Stat(format=panel.unit, reduceCalc="lastNotNull", graphMode="none", **common)
    return g.Table(unit=panel.unit, filterable=True, **common)


_TARGET_KEYS = ("expr", "legendFormat", "refId", "instant", "format")


def _clean_target(raw: Json, kind: Kind) -> Json:
    out = {k: raw[k] for k in _TARGET_KEYS if raw.get(k) is not None}
    out["datasource"] = dict(DATASOURCE)
    out["editorMode"] = "code"
    out["range"] = kind is Kind.TIMESERIES and not raw.get("instant", False)
    if not out["legendFormat"]:
        out["legendFormat"] = "__auto"
    return out


def _field_defaults(raw: Json, panel: Panel) -> Json:
    defaults = raw.get("fieldConfig", {}).get("defaults", {})
    out: Json = {
        "unit": panel.unit,
        "mappings": [],
        "color": {"mode": "palette-classic" if panel.kind is Kind.TIMESERIES else "thresholds"},
        # The base step has no value: Grafana treats the first step as -Infinity.
        "thresholds": {"mode": "absolute", "steps": [{"color": "green"}]},
    }
    custom = defaults.get("custom")
    if panel.kind is Kind.TIMESERIES and isinstance(custom, dict):
        out["custom"] = {**_drop_nulls(custom), "stacking": {"mode": "none", "group": "A"}}
    if panel.min is not None:
        out["min"] = panel.min
    if panel.max is not None:
        out["max"] = panel.max
    if panel.no_value is not None:
        out["noValue"] = panel.no_value
    return out


def _clean_panel(raw: Json, panel: Panel) -> Json:
    out: Json = {
        "id": raw["id"],
        "type": panel.kind.value,
        "title": panel.title,
        "description": panel.description,
        "datasource": dict(DATASOURCE),
        "gridPos": raw["gridPos"],
        "targets": [_clean_target(t, panel.kind) for t in raw["targets"]],
        "fieldConfig": {"defaults": _field_defaults(raw, panel), "overrides": []},
    }
    options = _drop_nulls(raw.get("options", {}))
    if panel.kind is Kind.STAT:
        options["reduceOptions"] = {"calcs": ["lastNotNull"], "fields": "", "values": False}
    if panel.kind is Kind.TABLE:
        options = {"showHeader": True, "cellHeight": "sm", "footer": {"show": False}}
        out["transformations"] = [{"id": "merge", "options": {}}, {
            "id": "organize",
            "options": {"excludeByName": {"Time": True}, "indexByName": {}, "renameByName": {}},
        }]
    out["options"] = options
    return out


def _drop_nulls(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _drop_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_drop_nulls(v) for v in value if v is not None]
    return value


def _datasource_variable() -> Json:
    return {
        "name": "datasource",
        "label": "Data source",
        "type": "datasource",
        "query": "prometheus",
        "current": {"selected": False, "text": "Prometheus", "value": "${" + DS_INPUT + "}"},
        "hide": 0,
        "includeAll": False,
        "multi": False,
        "options": [],
        "refresh": 1,
        "regex": "",
        "skipUrlSync": False,
    }


def _query_variable(var: Variable) -> Json:
    raw = _to_json(g.Template(name=var.name, label=var.label, query=var.query,
                              dataSource=DATASOURCE, includeAll=var.multi, multi=var.multi,
                              allValue=".*" if var.multi else None, refresh=2))
    out: Json = {k: raw[k] for k in ("name", "label", "type", "query", "refresh",
                                     "includeAll", "multi", "sort", "hide")}
    out.update({
        "datasource": dict(DATASOURCE),
        "definition": var.query,
        "current": {},
        "options": [],
        "regex": var.regex,
        "skipUrlSync": False,
    })
    if var.multi:
        out["allValue"] = ".*"
    return out


def _layout(spec: Dashboard) -> tuple[list[Any], list[tuple[int, Panel]]]:
    """Return grafanalib panels positioned on the 24-column grid, plus (id, spec) for each."""
    objects: list[Any] = []
    placed: list[tuple[int, Panel]] = []
    next_id = 1
    y = 0
    for section in spec.sections:
        objects.append(g.RowPanel(title=section.title, id=next_id,
                                  gridPos=g.GridPos(h=ROW_HEIGHT, w=GRID_WIDTH, x=0, y=y)))
        next_id += 1
        y += ROW_HEIGHT
        x, row_height = 0, 0
        for panel in section.panels:
            if x + panel.width > GRID_WIDTH:
                x, y, row_height = 0, y + row_height, 0
            pos = g.GridPos(h=panel.height, w=panel.width, x=x, y=y)
            objects.append(_grafanalib_panel(panel, next_id, pos))
            placed.append((next_id, panel))
            next_id += 1
            x += panel.width
            row_height = max(row_height, panel.height)
        y += row_height
    return objects, placed


def _requires(spec: Dashboard) -> list[Json]:
    kinds = sorted({p.kind.value for s in spec.sections for p in s.panels})
    names = {"timeseries": "Time series", "stat": "Stat", "table": "Table"}
    return [
        {"type": "grafana", "id": "grafana", "name": "Grafana", "version": GRAFANA_MIN_VERSION},
        {"type": "datasource", "id": "prometheus", "name": "Prometheus", "version": "1.0.0"},
        *({"type": "panel", "id": k, "name": names[k], "version": ""} for k in kinds),
    ]


def render(spec: Dashboard) -> Json:
    """Return the importable dashboard JSON model for one spec (already restricted to fields)."""
    objects, placed = _layout(spec)
    by_id = dict(placed)
    built = g.Dashboard(
        title=spec.title,
        uid=spec.uid,
        description=spec.description,
        tags=list(spec.tags),
        panels=objects,
        graphTooltip=g.GRAPH_TOOLTIP_MODE_SHARED_CROSSHAIR,
        refresh="30s",
        timezone="browser",
        time=g.Time("now-6h", "now"),
    )
    raw = _to_json(built)
    panels: list[Json] = []
    for raw_panel in raw["panels"]:
        if raw_panel["type"] == "row":
            panels.append({
                "id": raw_panel["id"], "type": "row", "title": raw_panel["title"],
                "collapsed": False, "gridPos": raw_panel["gridPos"], "panels": [],
            })
        else:
            panels.append(_clean_panel(raw_panel, by_id[raw_panel["id"]]))
    variables = [_datasource_variable(), *(_query_variable(v) for v in spec.variables)]
    return {
        "__inputs": [{
            "name": DS_INPUT,
            "label": "Prometheus",
            "description": "Prometheus that scrapes gpu-exporter (or dcgm-exporter)",
            "type": "datasource",
            "pluginId": "prometheus",
            "pluginName": "Prometheus",
        }],
        "__elements": {},
        "__requires": _requires(spec),
        "annotations": {"list": [{
            "builtIn": 1,
            "datasource": {"type": "grafana", "uid": "-- Grafana --"},
            "enable": True,
            "hide": True,
            "iconColor": "rgba(0, 211, 255, 1)",
            "name": "Annotations & Alerts",
            "type": "dashboard",
        }]},
        "description": spec.description,
        "editable": True,
        "fiscalYearStartMonth": 0,
        "graphTooltip": raw["graphTooltip"],
        "links": [{
            "type": "dashboards", "tags": ["gpu-exporter"], "asDropdown": True,
            "title": "GPU dashboards", "includeVars": True, "keepTime": True,
        }],
        "panels": panels,
        "refresh": raw["refresh"],
        "schemaVersion": SCHEMA_VERSION,
        "tags": raw["tags"],
        "templating": {"list": variables},
        "time": raw["time"],
        "timepicker": {},
        "timezone": raw["timezone"],
        "title": raw["title"],
        "uid": raw["uid"],
        "version": 1,
        "weekStart": "",
    }


def dump(model: Json) -> str:
    """Return a dashboard's JSON model as text, indented and with sorted keys, so generating it
    twice gives the same bytes and a diff shows only what changed."""
    return json.dumps(model, indent=2, sort_keys=True, ensure_ascii=False) + "\n"

"""A report as text: an aligned table for a terminal, CSV, or JSON (with the time series).

Every format shows the same figures; a TOTAL row follows the groups.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pandas as pd

from exporter.report.compute import MIXED, UsageReport

TOTAL = "TOTAL"
COLUMNS: dict[str, tuple[str, int]] = {
    "allocated_gpu_hours": ("GPU-h allocated", 3),
    "active_gpu_hours": ("GPU-h active", 3),
    "utilisation_pct": ("active %", 1),
    "activity_source": ("activity from", -1),
    "idle_gpu_hours": ("GPU-h idle", 3),
    "energy_kwh": ("kWh", 3),
    "co2_kg": ("CO2 kg", 3),
    "fb_peak_gib": ("FB peak GiB", 1),
    "fb_mean_gib": ("FB mean GiB", 1),
    "cost": ("cost", 2),
}
"""Shown columns: heading and decimals (-1: text)."""


def with_total(report: UsageReport) -> pd.DataFrame:
    """Return the totals per group, a TOTAL row, and the derived share of active time."""
    groups = report.totals.copy()
    total: dict[str, Any] = {}
    for column in groups.columns:
        if column == "activity_source":
            sources = set(groups[column])
            total[column] = sources.pop() if len(sources) == 1 else MIXED
        elif column == "fb_peak_gib":
            total[column] = groups[column].max()
        else:
            total[column] = groups[column].sum()
    held = total.get("held_hours", 0.0)
    total["fb_mean_gib"] = total["fb_mib_hours"] / held / 1024 if held else 0.0
    table = pd.concat([groups, pd.DataFrame([total], index=pd.Index([TOTAL], name="group"))])
    allocated = table["allocated_gpu_hours"]
    table["utilisation_pct"] = (table["active_gpu_hours"] / allocated.where(allocated > 0)
                                * 100).fillna(0.0)
    table.index = [name or "(none)" for name in table.index]
    table.index.name = "group"
    return table[[c for c in COLUMNS if c in table.columns]]


def _when(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def heading(report: UsageReport) -> str:
    """Return the report's title line: what it groups by and its range in UTC."""
    return (f"GPU usage by {report.request.group_by}, {_when(report.start)} to "
            f"{_when(report.end)}")


def cell(value: object, decimals: int) -> str:
    """Return a table cell: text as it is, a number with `decimals` places."""
    return str(value) if decimals < 0 else f"{value:,.{decimals}f}"


def table_text(report: UsageReport) -> str:
    """Return the report as an aligned terminal table, groups then a TOTAL row, followed by its
    notes."""
    table = with_total(report)
    head = ["group", *(COLUMNS[c][0] for c in table.columns)]
    rows = [[str(name), *(cell(table.at[name, c], COLUMNS[c][1]) for c in table.columns)]
            for name in table.index]
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]

    def line(cells: list[str]) -> str:
        first = cells[0].ljust(widths[0])
        rest = [cell.rjust(w) if COLUMNS[c][1] >= 0 else cell.ljust(w)
                for cell, w, c in zip(cells[1:], widths[1:], table.columns, strict=True)]
        return "  ".join([first, *rest]).rstrip()

    rule = "-" * len(line(head))
    body = [line(r) for r in rows]
    out = [heading(report), "", line(head), rule, *body[:-1], rule, body[-1], ""]
    out += [f"note: {n}" for n in report.notes]
    return "\n".join(out) + "\n"


def csv_text(report: UsageReport) -> str:
    """Return the report's table, groups then a TOTAL row, as CSV."""
    table = with_total(report)
    return str(table.to_csv(float_format="%.6g"))


def _records(frame: pd.DataFrame) -> list[dict[str, Any]]:
    records: list[dict[str, Any]] = json.loads(frame.to_json(orient="records",
                                                             date_format="iso"))
    return records


def json_text(report: UsageReport) -> str:
    """Return the report as indented JSON: range, grouping, source, notes, each group's figures,
    the total, the figures per step and the idle pods."""
    table = with_total(report)
    rows = _records(table.reset_index())
    document = {
        "start": _when(report.start),
        "end": _when(report.end),
        "group_by": report.request.group_by,
        "step": report.step_s,
        "source": report.source.describe(),
        "notes": report.notes,
        "groups": rows[:-1],
        "total": rows[-1],
        "steps": _records(report.steps),
        "idle_pods": _records(report.idle_pods),
        "queries": report.queries,
        "points": report.points,
    }
    return json.dumps(document, indent=2) + "\n"

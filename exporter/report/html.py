"""The HTML report: one self-contained file (charts inlined as SVG, no script, no link).

Charts are drawn with matplotlib, its SVG backend writing text as paths, so the file needs
no font, network or JavaScript to look the same everywhere. matplotlib is the plotting
library the scientific Python stack maintains (and pandas plots with); it is imported here
only, with the non-interactive Agg backend.
"""

from __future__ import annotations

import html
import io
import re
from collections.abc import Callable
from typing import TYPE_CHECKING

import pandas as pd

if TYPE_CHECKING:
    from matplotlib.axes import Axes

from exporter.promql import duration
from exporter.report.compute import GROUP, TIME, UsageReport
from exporter.report.render import COLUMNS, cell, heading, with_total

MAX_SERIES = 8
"""Groups drawn by name in the stacked charts; the rest are summed as "other"."""
CHARTS = ("gpu-hours", "allocated-active", "idle-pods", "energy")
STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em; color: #222; }
h1 { font-size: 1.4em; } h2 { font-size: 1.1em; margin-top: 2em; }
figure { margin: 0; } figure svg { max-width: 100%; height: auto; }
table { border-collapse: collapse; font-size: 0.9em; }
th, td { padding: 0.3em 0.7em; border-bottom: 1px solid #ddd; }
td.n { text-align: right; font-variant-numeric: tabular-nums; }
tr.total td { font-weight: bold; border-top: 2px solid #888; }
.notes { color: #666; font-size: 0.85em; }
"""


def _own_ids(svg: str, prefix: str) -> str:
    """Return the SVG with its element ids (and references to them) prefixed, so that charts in
    one page never share an id (matplotlib names glyphs and clip paths alike in each)."""
    svg = re.sub(r'\bid="', f'id="{prefix}', svg)
    svg = svg.replace('href="#', f'href="#{prefix}')
    return svg.replace("url(#", f"url(#{prefix}")


def _svg(draw: Callable[[Axes], None], height: float = 3.6) -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(9.5, height))
    try:
        draw(axes)
        figure.tight_layout()
        buffer = io.StringIO()
        figure.savefig(buffer, format="svg", metadata={"Date": None, "Creator": None})
    finally:
        plt.close(figure)
    text = buffer.getvalue()
    return text[text.index("<svg"):]


def _wide(report: UsageReport, column: str) -> pd.DataFrame:
    """Return, per window (rows) and group (columns), the groups holding most GPU-hours first (the
    same order, and so the same colours, in every chart), the rest summed."""
    wide = report.steps.pivot_table(index=TIME, columns=GROUP, values=column, aggfunc="sum",
                                    fill_value=0.0)
    ranking = report.totals["allocated_gpu_hours"].sort_values(ascending=False).index
    wide = wide[[g for g in ranking if g in wide.columns]]
    if len(wide.columns) > MAX_SERIES:
        kept = wide.iloc[:, :MAX_SERIES - 1].copy()
        kept["other"] = wide.iloc[:, MAX_SERIES - 1:].sum(axis=1)
        wide = kept
    wide.columns = [str(c) or "(none)" for c in wide.columns]
    return wide


def _stacked(report: UsageReport, column: str, ylabel: str) -> Callable[[Axes], None]:
    def draw(axes: Axes) -> None:
        wide = _wide(report, column)
        shape = ("%Y-%m-%d" if report.step_s >= 86400 else
                 "%m-%d %H:%M" if report.step_s >= 3600 else "%H:%M:%S")
        labels = [t.strftime(shape) for t in wide.index]
        bottom = [0.0] * len(wide)
        for number, name in enumerate(wide.columns):
            values = list(wide[name])
            axes.bar(range(len(wide)), values, bottom=bottom, label=name, width=0.85,
                     color=f"C{number % 10}")
            bottom = [b + v for b, v in zip(bottom, values, strict=True)]
        every = max(1, len(labels) // 12)
        axes.set_xticks(range(0, len(labels), every), labels[::every], rotation=30,
                        ha="right", fontsize=8)
        axes.set_ylabel(ylabel)
        axes.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    return draw


def _allocated_active(report: UsageReport) -> Callable[[Axes], None]:
    def draw(axes: Axes) -> None:
        totals = report.totals.sort_values("allocated_gpu_hours").tail(15)
        names = [str(n) or "(none)" for n in totals.index]
        rows = range(len(totals))
        axes.barh([r + 0.2 for r in rows], totals["allocated_gpu_hours"], height=0.4,
                  label="allocated")
        axes.barh([r - 0.2 for r in rows], totals["active_gpu_hours"], height=0.4,
                  label="active")
        axes.set_yticks(list(rows), names, fontsize=8)
        axes.set_xlabel("GPU-hours")
        axes.legend(fontsize=8)
    return draw


def _idle_pods(report: UsageReport) -> Callable[[Axes], None]:
    def draw(axes: Axes) -> None:
        pods = report.idle_pods.iloc[::-1]
        if pods.empty:
            axes.text(0.5, 0.5, "no pod sat idle for a whole window", ha="center",
                      va="center", transform=axes.transAxes)
            axes.set_axis_off()
            return
        names = [f"{ns}/{pod}" for ns, pod in zip(pods["namespace"], pods["pod"], strict=True)]
        axes.barh(range(len(pods)), pods["idle_gpu_hours"], color="#c44e52")
        axes.set_yticks(range(len(pods)), names, fontsize=8)
        axes.set_xlabel("idle-allocated GPU-hours")
    return draw


def _table(report: UsageReport) -> str:
    table = with_total(report)
    head = "".join(f"<th>{html.escape(COLUMNS[c][0])}</th>" for c in table.columns)
    rows = []
    for name in table.index:
        cells = []
        for column in table.columns:
            text = html.escape(cell(table.at[name, column], COLUMNS[column][1]))
            css = "" if COLUMNS[column][1] < 0 else ' class="n"'
            cells.append(f"<td{css}>{text}</td>")
        css = ' class="total"' if name == table.index[-1] else ""
        rows.append(f"<tr{css}><td>{html.escape(str(name))}</td>{''.join(cells)}</tr>")
    return (f'<table id="usage"><thead><tr><th>{html.escape(report.request.group_by)}</th>'
            f"{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>")


def html_text(report: UsageReport) -> str:
    """Return the report as one self-contained HTML page: charts of allocated GPU-hours,
    allocated against active GPU-hours, the pods that held a GPU idle longest and energy, then
    the table per group and the notes."""
    step = duration(report.step_s)
    sections = [
        ("gpu-hours", f"Allocated GPU-hours per {step}", _svg(_stacked(
            report, "allocated_gpu_hours", "GPU-hours"))),
        ("allocated-active", "Allocated against active GPU-hours",
         _svg(_allocated_active(report), 1.2 + 0.3 * min(15, len(report.totals)))),
        ("idle-pods", f"Top {report.request.top} idle-allocated pods",
         _svg(_idle_pods(report), 1.2 + 0.3 * max(3, len(report.idle_pods)))),
        ("energy", f"Energy per {step}", _svg(_stacked(report, "energy_kwh", "kWh"))),
    ]
    body = "".join(f'<h2>{html.escape(title)}</h2><figure class="chart" id="{key}">'
                   f"{_own_ids(svg, key + '-')}</figure>" for key, title, svg in sections)
    notes = "".join(f"<li>{html.escape(n)}</li>" for n in report.notes)
    title = html.escape(heading(report))
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
            f"<title>{title}</title><style>{STYLE}</style></head><body>"
            f"<h1>{title}</h1>{body}<h2>Usage by {html.escape(report.request.group_by)}</h2>"
            f'{_table(report)}<ul class="notes">{notes}'
            f"<li>{report.queries} queries, {report.points} points pulled</li></ul>"
            f"</body></html>\n")

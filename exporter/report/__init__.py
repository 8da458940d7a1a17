"""GPU usage, idle time, energy and chargeback per group, from Prometheus, with pandas.

The command is `gpu-exporter report`; the same computation is a library call:

    from exporter.report import usage
    frame = usage("http://prometheus:9090", last="30d", group_by="label:team", price=2.5)

Nothing here is imported by `serve`: pandas and matplotlib load only when a report runs.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pandas as pd

    from exporter.report.compute import UsageReport

__all__ = ["usage", "usage_report"]


def _instant(value: datetime | str | float | None, fallback: float) -> float:
    from exporter.options.report_table import parse_instant

    if value is None:
        return fallback
    if isinstance(value, datetime):
        return value.timestamp()
    if isinstance(value, str):
        return parse_instant(value, "time")
    return float(value)


def usage_report(
    prometheus: str,
    *,
    start: datetime | str | float | None = None,
    end: datetime | str | float | None = None,
    last: str = "1d",
    group_by: str = "namespace",
    step: str | None = None,
    resolution: str = "1m",
    source: str = "auto",
    idle_below: float = 5.0,
    idle_window: str = "30m",
    top: int = 10,
    price: float | None = None,
    price_file: str | Path | None = None,
    grid_intensity: float | None = None,
    headers: Mapping[str, str] | None = None,
    bearer_token: str | None = None,
    ca_file: str | Path | None = None,
    insecure_skip_verify: bool = False,
    timeout: str = "2m",
) -> UsageReport:
    """The whole report: `totals` (a frame per group), `steps`, `idle_pods` and notes."""
    from exporter.options.report_table import parse_span
    from exporter.report.client import PrometheusClient
    from exporter.report.compute import ReportRequest, build_report
    from exporter.report.connection import Connection
    from exporter.report.prices import load_prices

    stop = _instant(end, time.time())
    begin = _instant(start, stop - parse_span(last, "last"))
    sent = dict(headers or {})
    if bearer_token:
        sent["Authorization"] = f"Bearer {bearer_token}"
    connection = Connection(
        url=prometheus.rstrip("/"), headers=tuple(sent.items()),
        timeout_s=parse_span(timeout, "timeout"),
        ca_file=Path(ca_file) if ca_file else None, insecure_skip_verify=insecure_skip_verify)
    request = ReportRequest(
        start=begin, end=stop, group_by=group_by,
        step_s=parse_span(step, "step") if step else None,
        resolution_s=parse_span(resolution, "resolution"), source=source,
        idle_below_pct=idle_below, idle_window_s=parse_span(idle_window, "idle_window"),
        top=top, prices=load_prices(Path(price_file) if price_file else None, price),
        grid_intensity_g_per_kwh=grid_intensity)
    return build_report(PrometheusClient(connection), request)


def usage(prometheus: str, **options: object) -> pd.DataFrame:
    """One row per group: allocated, active and idle GPU-hours, energy, framebuffer, cost.

    Takes `usage_report`'s keyword arguments. The frame's `attrs` say where the figures
    came from (`source`), the range (`start`, `end`) and the notes."""
    report = usage_report(prometheus, **options)  # type: ignore[arg-type]
    frame = report.totals.copy()
    frame.attrs.update({"start": report.start, "end": report.end,
                        "source": report.source.describe(), "notes": list(report.notes)})
    return frame

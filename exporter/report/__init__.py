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
from typing import TYPE_CHECKING, TypedDict, Unpack

if TYPE_CHECKING:
    import pandas as pd

    from exporter.report.compute import UsageReport

__all__ = ["ReportOptions", "usage", "usage_report"]


def _instant(value: datetime | str | float | None, fallback: float) -> float:
    from exporter.options.report_table import parse_instant

    if value is None:
        return fallback
    if isinstance(value, datetime):
        return value.timestamp()
    if isinstance(value, str):
        return parse_instant(value, "time")
    return float(value)


class ReportOptions(TypedDict, total=False):
    """What `usage` and `usage_report` take besides the server's URL (the command's options;
    durations as Prometheus writes them, times as datetimes, RFC 3339 text or Unix seconds)."""

    start: datetime | str | float | None
    end: datetime | str | float | None
    last: str
    group_by: str
    step: str | None
    resolution: str
    source: str
    idle_below: float
    idle_window: str
    top: int
    price: float | None
    price_file: str | Path | None
    grid_intensity: float | None
    headers: Mapping[str, str] | None
    bearer_token: str | None
    ca_file: str | Path | None
    insecure_skip_verify: bool
    timeout: str


def usage_report(prometheus: str, **options: Unpack[ReportOptions]) -> UsageReport:
    """The whole report: `totals` (a frame per group), `steps`, `idle_pods` and notes."""
    from exporter.options.report_table import parse_span
    from exporter.report.client import PrometheusClient
    from exporter.report.compute import ReportRequest, build_report
    from exporter.report.connection import Connection
    from exporter.report.prices import load_prices

    o = options
    stop = _instant(o.get("end"), time.time())
    begin = _instant(o.get("start"), stop - parse_span(o.get("last", "1d"), "last"))
    sent = dict(o.get("headers") or {})
    token = o.get("bearer_token")
    if token:
        sent["Authorization"] = f"Bearer {token}"
    ca_file, price_file, step = o.get("ca_file"), o.get("price_file"), o.get("step")
    connection = Connection(
        url=prometheus.rstrip("/"), headers=tuple(sent.items()),
        timeout_s=parse_span(o.get("timeout", "2m"), "timeout"),
        ca_file=Path(ca_file) if ca_file else None,
        insecure_skip_verify=o.get("insecure_skip_verify", False))
    request = ReportRequest(
        start=begin, end=stop, group_by=o.get("group_by", "namespace"),
        step_s=parse_span(step, "step") if step else None,
        resolution_s=parse_span(o.get("resolution", "1m"), "resolution"),
        source=o.get("source", "auto"), idle_below_pct=o.get("idle_below", 5.0),
        idle_window_s=parse_span(o.get("idle_window", "30m"), "idle_window"),
        top=o.get("top", 10),
        prices=load_prices(Path(price_file) if price_file else None, o.get("price")),
        grid_intensity_g_per_kwh=o.get("grid_intensity"))
    return build_report(PrometheusClient(connection), request)


def usage(prometheus: str, **options: Unpack[ReportOptions]) -> pd.DataFrame:
    """One row per group: allocated, active and idle GPU-hours, energy, framebuffer, cost.

    The frame's `attrs` say where the figures came from (`source`), the range (`start`,
    `end`, Unix seconds) and the notes."""
    report = usage_report(prometheus, **options)
    frame = report.totals.copy()
    frame.attrs.update({"start": report.start, "end": report.end,
                        "source": report.source.describe(), "notes": list(report.notes)})
    return frame

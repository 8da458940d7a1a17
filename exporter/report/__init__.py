"""GPU usage, idle time, energy and chargeback per group, from Prometheus, with pandas.

The command is `gpu-exporter report`; the same computation is a library call:

    from exporter.report import usage
    frame = usage("http://prometheus:9090", last="30d", group_by="label:team", price=2.5)

Its keywords are the command's options, named as the option table names them
(`exporter/options/report_table.py`: `--idle-below` is `idle_below`, `--chunk` is
`max_chunk`); the defaults and the checks are the command's (`exporter.report.request`), and
a bad value raises `exporter.options.ConfigError` (a ValueError) naming the keyword.

Nothing here is imported by `serve`: pandas and matplotlib load only when a report runs.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict, Unpack

if TYPE_CHECKING:
    import pandas as pd

    from exporter.report.compute import UsageReport

__all__ = ["ReportOptions", "usage", "usage_report"]

Instant = datetime | str | float
"""A time: a datetime, RFC 3339 text or a date, or Unix seconds."""
FilePath = str | Path


class ReportOptions(TypedDict, total=False):
    """What `usage` and `usage_report` take besides the server's URL: every option of the
    command but its output ones (`--format`, `--output`, `--progress`), under the option's
    name. Durations are text as Prometheus writes them (`30d`, `1h30m`); None, or leaving a
    keyword out, is the option's default. `tests/report/test_request.py` keeps this list
    equal to the table's."""

    bearer_token: str | None
    bearer_token_file: FilePath | None
    basic_auth_user: str | None
    basic_auth_password: str | None
    basic_auth_password_file: FilePath | None
    ca_file: FilePath | None
    cert_file: FilePath | None
    key_file: FilePath | None
    insecure_skip_verify: bool
    headers: Mapping[str, str] | Sequence[str] | None
    timeout: str
    start: Instant | None
    end: Instant | None
    last: str
    group_by: str
    step: str | None
    resolution: str
    source: str
    max_chunk: str | None
    idle_below: float
    idle_window: str
    price: float | None
    price_file: FilePath | None
    grid_intensity: float | None
    top: int


def usage_report(prometheus: str, **options: Unpack[ReportOptions]) -> UsageReport:
    """Return the whole report: `totals` (a frame per group), `steps`, `idle_pods` and notes."""
    from exporter.report.compute import build_report
    from exporter.report.prometheus_api import PrometheusClient
    from exporter.report.request import build, from_keywords

    connection, request = build(from_keywords(prometheus, options), time.time(), "keywords")
    return build_report(PrometheusClient(connection), request)


def usage(prometheus: str, **options: Unpack[ReportOptions]) -> pd.DataFrame:
    """Return one row per group: allocated, active and idle GPU-hours, energy, framebuffer, cost.

    The frame's `attrs` say where the figures came from (`source`), the range (`start`,
    `end`, Unix seconds) and the notes."""
    report = usage_report(prometheus, **options)
    frame = report.totals.copy()
    frame.attrs.update({"start": report.start, "end": report.end,
                        "source": report.source.describe(), "notes": list(report.notes)})
    return frame

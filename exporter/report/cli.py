"""`gpu-exporter report`: GPU usage, idle time, energy and cost per group, from Prometheus.

The options are checked and turned into a request by `exporter.report.request`, which the
library call (`exporter.report.usage`) goes through too. Exit status 0 with the report
written, 1 when the report could not be made (nothing is written then), 2 for a bad option.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from exporter.options import ConfigError, build_parser, parse_command_line
from exporter.options import report_table as opt
from exporter.options.exit_status import DONE, stopped
from exporter.report.compute import UsageReport, build_report
from exporter.report.connection import ReportError
from exporter.report.prometheus_api import PrometheusClient
from exporter.report.request import build

DESCRIPTION = ("GPU-hours allocated and active, idle-allocated GPU-hours, energy, framebuffer "
               "and cost per namespace, pod, node, model or pod label, computed by "
               "Prometheus (or Thanos, Mimir) from the exporter's series or its recording "
               "rules.")


def render(report: UsageReport, fmt: str) -> str:
    """Return the report written in the format `--format` names: an HTML page, a terminal table,
    CSV or JSON."""
    if fmt == "html":
        from exporter.report.html import html_text

        return html_text(report)
    from exporter.report.render import csv_text, json_text, table_text

    return {"table": table_text, "csv": csv_text, "json": json_text}[fmt](report)


def deliver(command: str, text: str, output: Path | None) -> None:
    """Write `text` to standard output, or whole to `output` and say so on standard error."""
    if output is None:
        sys.stdout.write(text)
        return
    write_whole(output, text)
    print(f"gpu-exporter {command}: wrote {output}", file=sys.stderr)


def write_whole(path: Path, text: str) -> None:
    """Write `text` to `path` through a temporary file beside it: a reader sees the old
    file or the new one, never half of one."""
    directory = path.parent if str(path.parent) else Path(".")
    handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", dir=directory)
    umask = os.umask(0)
    os.umask(umask)
    try:
        os.chmod(temporary, 0o666 & ~umask)  # as open() would have made it
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            out.write(text)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def _progress(enabled: bool) -> Callable[[int, int], None] | None:
    if not enabled:
        return None

    def show(done: int, planned: int) -> None:
        end = "\n" if done >= planned else ""
        print(f"\rgpu-exporter report: query {done}/{planned} "
              f"({100 * done // max(planned, 1)} %)", end=end, file=sys.stderr, flush=True)
    return show


def main(argv: Sequence[str]) -> int:
    """Run `gpu-exporter report` with the arguments `argv` and return its exit status: 0 once the
    report is written, 1 when it could not be made, 2 for a bad option."""
    parser = build_parser("report", description=DESCRIPTION)
    try:
        settings = parse_command_line("report", argv, os.environ, parser)
        connection, request = build(settings, time.time(), "flags")
    except ConfigError as exc:
        return stopped("report", exc)
    mode = settings[opt.PROGRESS_OPTION]
    progress = _progress(mode == "on" or (mode == "auto" and sys.stderr.isatty()))
    try:
        report = build_report(PrometheusClient(connection), request, progress)
        deliver("report", render(report, settings[opt.FORMAT]), settings[opt.OUTPUT])
    except (ReportError, OSError) as exc:
        return stopped("report", exc)
    return DONE

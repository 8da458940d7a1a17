"""Doctor's web config check: the file serve would load, read and built as serve reads and
builds it."""

from __future__ import annotations

from pathlib import Path

from exporter.doctor.report import FAIL, INFO, OK, WARN, Report
from exporter.web.reload import Applied
from exporter.web.webconfig import WebConfigError, load_web_config


def check_web_config(path: Path | None, report: Report) -> None:
    """Report one line: plain HTTP without a file; else what the file configures, or why serve
    would refuse to start with it; then one WARN per setting honoured otherwise than Go's
    exporter-toolkit would."""
    if path is None:
        report.line(INFO, "web config", "none: plain HTTP, no authentication")
        return
    try:
        applied = Applied.build(load_web_config(path))
    except WebConfigError as exc:
        report.line(FAIL, "web config", str(exc),
                    "fix the file (serve refuses to start with it); its format is the "
                    "Prometheus exporter-toolkit's web config")
        return
    report.line(OK, "web config", f"{path}: {applied.describe()}")
    for note in applied.tls.warnings if applied.tls is not None else ():
        report.line(WARN, "web config", note)

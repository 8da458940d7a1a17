"""Every row of dcgm-exporter 4.8.4's shipped collectors files, the commented-out ones too
(uncommented), loads here: served, or skipped with one warning naming its line, never
refused. The rows skipped are listed in a warning of the test run, so that what a newer
release adds and this exporter does not serve yet stays visible."""

from __future__ import annotations

import re
import warnings

import pytest

from exporter.fields.csv import CollectorsError, parse_collectors
from tests.support.paths import ROOT

UPSTREAM = ROOT / "tests" / "fixtures" / "dcgm-exporter-4.8.4"
FILES = ["default-counters.csv", "dcp-metrics-included.csv", "1.x-compatibility-metrics.csv"]
_COMMENTED_ROW = re.compile(r"^\s*#\s*(?=[A-Za-z_][A-Za-z0-9_]*\s*,)")
"""A commented-out row: `# DCGM_FI_..., type, help` (not prose such as `# DCGM FIELD, ...`)."""


def uncommented(text: str) -> tuple[str, int]:
    """The file with each commented-out row enabled, in place (line numbers kept), and how
    many rows it then has."""
    lines = [_COMMENTED_ROW.sub("", line) for line in text.split("\n")]
    rows = sum(1 for line in lines if line.strip() and not line.lstrip().startswith("#"))
    return "\n".join(lines), rows


@pytest.mark.parametrize("name", FILES)
def test_every_row_of_upstreams_csv_loads(name: str) -> None:
    path = UPSTREAM / name
    text, rows = uncommented(path.read_text(encoding="utf-8"))
    assert rows > 20, f"{name}: the fixture is not the CSV it should be"
    try:
        collectors = parse_collectors(text, name)
    except CollectorsError as exc:
        pytest.fail(f"a row of dcgm-exporter 4.8.4's {name} is refused: {exc}")
    lines = [int(m.group(1)) for w in collectors.warnings
             if (m := re.match(rf"{re.escape(name)}:(\d+): ", w))]
    assert len(lines) == len(collectors.warnings), collectors.warnings
    assert len(collectors.fields) + len(collectors.warnings) == rows
    skipped = [w for w in collectors.warnings if "already enabled" not in w]
    if skipped:
        warnings.warn(f"dcgm-exporter 4.8.4's {name}: {len(skipped)} of {rows} rows not "
                      "served here: " + " | ".join(skipped), stacklevel=1)


def test_the_rows_enabled_by_default_are_all_served() -> None:
    for name in FILES:
        text = (UPSTREAM / name).read_text(encoding="utf-8")
        collectors = parse_collectors(text, name)
        assert collectors.fields, name
        assert [w for w in collectors.warnings if "already enabled" not in w] == [], name


def test_the_commented_rows_are_found() -> None:
    text, rows = uncommented("# Format\n# DCGM FIELD, Prometheus metric type, help message\n"
                             "# DCGM_EXP_XID_ERRORS_TOTAL,   counter, Total XID errors.\n"
                             "DCGM_FI_DEV_GPU_TEMP, gauge, t\n")
    assert rows == 2
    assert text.split("\n")[2] == "DCGM_EXP_XID_ERRORS_TOTAL,   counter, Total XID errors."

from __future__ import annotations

from pathlib import Path

import pytest

from exporter.fields.catalog import BY_NAME, MetricType
from exporter.fields.csv import CollectorsError, load_collectors, parse_collectors
from tests.support.paths import ROOT, fixture_file


def test_project_csv_loads_and_matches_packaged_default() -> None:
    collectors = load_collectors(ROOT / "collectors.csv")
    assert collectors.warnings == ()
    packaged = ROOT / "exporter" / "fields" / "default-collectors.csv"
    assert packaged.read_text() == (ROOT / "collectors.csv").read_text(), \
        "exporter/fields/default-collectors.csv must be a copy of collectors.csv"
    names = collectors.names
    for required in ("DCGM_FI_DEV_POWER_MGMT_LIMIT", "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL",
                     "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "DCGM_FI_DEV_CLOCKS_EVENT_REASONS",
                     "DCGM_EXP_XID_ERRORS_COUNT", "DCGM_FI_PROF_SM_ACTIVE",
                     "DCGM_FI_PROF_NVLINK_RX_BYTES"):
        assert required in names


@pytest.mark.parametrize("name", ["default-counters.csv", "dcp-metrics-included.csv"])
def test_dcgm_csvs_load_verbatim(name: str) -> None:
    path = fixture_file("dcgm-exporter", name)
    collectors = load_collectors(path)
    # dcgm's defaults: 26 fields, every one served (vGPU licensing included).
    assert len(collectors.fields) == 26
    assert collectors.warnings == ()
    types = {f.spec.name: f.type for f in collectors.fields}
    assert types["DCGM_FI_DEV_VGPU_LICENSE_STATUS"] is MetricType.GAUGE
    assert types["DCGM_FI_DRIVER_VERSION"] is MetricType.LABEL
    assert types["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"] is MetricType.COUNTER


def test_comments_blank_lines_quoting_and_trimming() -> None:
    text = ('# comment\n\n  DCGM_FI_DEV_GPU_TEMP ,  gauge ,  "Temp, in C"  \n'
            'DCGM_FI_DEV_SM_CLOCK,counter,\n')
    collectors = parse_collectors(text, "x.csv")
    assert [f.spec.name for f in collectors.fields] == ["DCGM_FI_DEV_GPU_TEMP",
                                                          "DCGM_FI_DEV_SM_CLOCK"]
    assert collectors.fields[0].help == "Temp, in C"
    assert collectors.fields[1].type is MetricType.COUNTER
    assert collectors.fields[1].help == BY_NAME["DCGM_FI_DEV_SM_CLOCK"].help


@pytest.mark.parametrize(("text", "expected"), [
    ("DCGM_FI_DEV_GPU_TMP, gauge, x\n", r"x\.csv:1: unknown field 'DCGM_FI_DEV_GPU_TMP'; "
                                        r"did you mean DCGM_FI_DEV_GPU_TEMP\?"),
    ("# c\nDCGM_FI_DEV_GPU_TEMP, gauge\n", r"x\.csv:2: expected 3 columns"),
    ("DCGM_FI_DEV_GPU_TEMP, gauge, a, b\n", r"x\.csv:1: expected 3 columns .* found 4"),
    ("DCGM_FI_DEV_GPU_TEMP, gaug, x\n", r"x\.csv:1: unknown prometheus type 'gaug'"),
    ("DCGM_FI_DRIVER_VERSION, gauge, x\n", r"x\.csv:1: DCGM_FI_DRIVER_VERSION must be of type "
                                           r"label"),
    ("DCGM_FI_DEV_GPU_TEMP, label, x\n", r"x\.csv:1: DCGM_FI_DEV_GPU_TEMP must be of type "
                                         r"gauge"),
])
def test_bad_input_names_file_line_and_fix(text: str, expected: str) -> None:
    with pytest.raises(CollectorsError, match=expected):
        parse_collectors(text, "x.csv")


def test_histogram_and_summary_are_accepted_and_echoed() -> None:
    collectors = parse_collectors("DCGM_FI_DEV_GPU_TEMP, histogram, x\n", "x.csv")
    assert collectors.fields[0].type is MetricType.HISTOGRAM


def test_duplicate_field_is_warned_not_doubled() -> None:
    text = "DCGM_FI_DEV_GPU_TEMP, gauge, a\nDCGM_FI_DEV_GPU_TEMP, gauge, b\n"
    collectors = parse_collectors(text, "x.csv")
    assert len(collectors.fields) == 1
    assert "x.csv:2: DCGM_FI_DEV_GPU_TEMP already enabled at line 1" in collectors.warnings[0]


def test_unreadable_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(CollectorsError, match=r"missing\.csv: cannot read collectors file"):
        load_collectors(tmp_path / "missing.csv")

from __future__ import annotations

from pathlib import Path

import pytest

from exporter.fields.catalog import BY_NAME, MetricType
from exporter.fields.csv import (
    CollectorsError,
    collectors_from_rows,
    load_collectors,
    parse_collectors,
    require_servable,
)
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
    ("# c\nDCGM_FI_DEV_GPU_TEMP, gauge\n", r"x\.csv:2: expected 3 columns"),
    ("DCGM_FI_DEV_GPU_TEMP, gauge, a, b\n", r"x\.csv:1: expected 3 columns .* found 4"),
    ("DCGM_FI_DEV_GPU_TEMP, gaug, x\n", r"x\.csv:1: unsupported prometheus type 'gaug' for "
                                        r"DCGM_FI_DEV_GPU_TEMP; supported types are counter, "
                                        r"gauge, untyped and label"),
    ("DCGM_FI_DRIVER_VERSION, gauge, x\n", r"x\.csv:1: DCGM_FI_DRIVER_VERSION must be of type "
                                           r"label"),
    ("DCGM_FI_DEV_GPU_TEMP, label, x\n", r"x\.csv:1: DCGM_FI_DEV_GPU_TEMP must be of type "
                                         r"gauge"),
    (", gauge, x\n", r"x\.csv:1: '' is not a field name"),
    ("DCGM FI, gauge, x\n", r"x\.csv:1: 'DCGM FI' is not a field name"),
])
def test_bad_input_names_file_line_and_fix(text: str, expected: str) -> None:
    with pytest.raises(CollectorsError, match=expected):
        parse_collectors(text, "x.csv")


@pytest.mark.parametrize("type_name", ["histogram", "summary"])
def test_histogram_and_summary_are_refused_as_dcgm_exporter_483_refuses_them(
        type_name: str) -> None:
    with pytest.raises(CollectorsError, match=rf"x\.csv:2: unsupported prometheus type "
                                              rf"'{type_name}' .* supported types are "
                                              r"counter, gauge, untyped and label"):
        parse_collectors(f"DCGM_FI_DEV_GPU_TEMP, gauge, a\nDCGM_FI_DEV_SM_CLOCK, {type_name}, "
                         "x\n", "x.csv")


def test_the_type_is_checked_before_the_name() -> None:
    # An unknown name alone is only skipped; with a bad type the row is refused for the type.
    with pytest.raises(CollectorsError, match="unsupported prometheus type 'summary' for "
                                              "DCGM_FI_DEV_FROM_THE_FUTURE"):
        parse_collectors("DCGM_FI_DEV_FROM_THE_FUTURE, summary, x\n", "x.csv")


def test_untyped_is_accepted_and_echoed() -> None:
    collectors = parse_collectors("DCGM_FI_DEV_GPU_TEMP, untyped, x\n", "x.csv")
    assert collectors.fields[0].type is MetricType.UNTYPED


@pytest.mark.parametrize(("name", "hint"), [
    ("DCGM_FI_DEV_GPU_TMP", " (did you mean DCGM_FI_DEV_GPU_TEMP?)"),
    ("DCGM_EXP_SOMETHING_NEWER_THAN_US", ""),
    ("DCGM_EXP_XID_ERRORS_RATE", ""),  # a newer-looking field, no typo of ..._COUNT
    ("dcgm_gpu_tmp", " (did you mean dcgm_gpu_temp?)"),
    ("DCGM_FI_DEV_QUANTUM_ENTANGLEMENT_RATIO", ""),
])
def test_an_unknown_field_is_skipped_with_one_warning_and_the_rest_served(
        name: str, hint: str) -> None:
    text = f"DCGM_FI_DEV_GPU_TEMP, gauge, t\n# c\n{name}, counter, x\nDCGM_FI_DEV_SM_CLOCK, " \
           "gauge, s\n"
    collectors = parse_collectors(text, "x.csv")
    assert [f.spec.name for f in collectors.fields] == ["DCGM_FI_DEV_GPU_TEMP",
                                                          "DCGM_FI_DEV_SM_CLOCK"]
    assert collectors.warnings == (f"x.csv:3: unknown field {name!r}{hint}; skipped",)


def test_a_file_serving_nothing_is_refused_at_start_up() -> None:
    skipped = parse_collectors("DCGM_EXP_NOT_YET, gauge, x\n", "x.csv")
    assert skipped.fields == ()
    with pytest.raises(CollectorsError, match=r"^x\.csv: enables no field this exporter "
                                              r"serves; x\.csv:1: unknown field "
                                              r"'DCGM_EXP_NOT_YET'; skipped$"):
        require_servable(skipped)
    two = parse_collectors("DCGM_EXP_NOT_YET, gauge, x\nDCGM_EXP_NOR_THIS, gauge, y\n", "x.csv")
    with pytest.raises(CollectorsError, match=r"'DCGM_EXP_NOT_YET'; skipped \(and 1 more rows "
                                              r"skipped\)$"):
        require_servable(two)
    with pytest.raises(CollectorsError, match=r"^y\.csv: enables no field this exporter "
                                              r"serves$"):
        require_servable(parse_collectors("# nothing\n", "y.csv"))
    served = parse_collectors("DCGM_FI_DEV_GPU_TEMP, gauge, x\n", "z.csv")
    assert require_servable(served) is served


def test_rows_from_elsewhere_get_the_same_checks() -> None:
    collectors = collectors_from_rows([(7, "DCGM_FI_DEV_GPU_TEMP", "gauge", "t"),
                                       (9, "DCGM_EXP_LATER", "gauge", "l")], "c.yaml")
    assert collectors.names == {"DCGM_FI_DEV_GPU_TEMP"}
    assert collectors.warnings == ("c.yaml:9: unknown field 'DCGM_EXP_LATER'; skipped",)
    with pytest.raises(CollectorsError, match=r"c\.yaml:3: unsupported prometheus type"):
        collectors_from_rows([(3, "DCGM_FI_DEV_GPU_TEMP", "histogram", "t")], "c.yaml")


def test_duplicate_field_is_warned_not_doubled() -> None:
    text = "DCGM_FI_DEV_GPU_TEMP, gauge, a\nDCGM_FI_DEV_GPU_TEMP, gauge, b\n"
    collectors = parse_collectors(text, "x.csv")
    assert len(collectors.fields) == 1
    assert "x.csv:2: DCGM_FI_DEV_GPU_TEMP already enabled at line 1" in collectors.warnings[0]


def test_unreadable_file_is_named(tmp_path: Path) -> None:
    missing = tmp_path / "missing.csv"
    with pytest.raises(CollectorsError) as caught:
        load_collectors(missing)
    assert str(caught.value) == f"{missing}: cannot read: No such file or directory"

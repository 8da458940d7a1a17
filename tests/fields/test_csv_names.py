"""Collectors files naming fields by any DCGM name: served, skipped with a reason, or an error."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest

from exporter.fields.catalog import BY_NAME, MetricType
from exporter.fields.csv import CollectorsError, load_collectors, parse_collectors
from exporter.fields.dcgm_names import DcgmField, Reason, dcgm_names
from tests.fields.test_dcgm_names import reference_rows
from tests.support.paths import ROOT, fixture_file

Row = dict[str, str]


def served_type(name: str) -> str:
    resolved = dcgm_names().resolve(name)
    if resolved is None or isinstance(resolved, DcgmField):
        return "gauge"
    return resolved.type.value


def test_a_csv_listing_every_dcgm_name_loads() -> None:
    rows = reference_rows()
    text = "".join(f"{r['dcgm_name']}, {served_type(r['dcgm_name'])}, x\n" for r in rows)
    collectors = parse_collectors(text, "all.csv")
    served = [f.spec.name for f in collectors.fields]
    assert len(served) + len(collectors.warnings) == len(rows)
    assert set(BY_NAME) <= set(served)
    # One warning per skipped line, naming that line.
    lines = [int(m.group(1)) for w in collectors.warnings
             if (m := re.match(r"all\.csv:(\d+): ", w))]
    assert len(lines) == len(collectors.warnings) == len(set(lines))
    for line in lines:
        assert rows[line - 1]["dcgm_name"] not in served


@pytest.mark.parametrize("name", ["dcgm_gpu_temp", "DCGM_FI_DEV_GPU_TEMP_CELSIUS",
                                  "DCGM_FI_DEV_GPU_UTIL_RATIO", "dcgm_fi_prof_sm_active",
                                  "DCGM_FI_SYSTEM_DRIVER_VERSION"])
def test_a_served_field_keeps_the_name_the_csv_gives_it(name: str) -> None:
    type_ = served_type(name)
    collectors = parse_collectors(f"{name}, {type_}, my help\n", "x.csv")
    assert collectors.warnings == ()
    (enabled,) = collectors.fields
    assert enabled.spec.name == name
    assert enabled.help == "my help"
    assert enabled.type is MetricType(type_)
    assert collectors.names == {name}


def test_two_names_of_one_field_are_both_served() -> None:
    text = ("DCGM_FI_DEV_GPU_TEMP, gauge, a\ndcgm_gpu_temp, gauge, b\n"
            "DCGM_FI_DEV_GPU_TEMP_CELSIUS, gauge, c\ndcgm_gpu_temp, gauge, d\n")
    collectors = parse_collectors(text, "x.csv")
    assert [f.spec.name for f in collectors.fields] == [
        "DCGM_FI_DEV_GPU_TEMP", "dcgm_gpu_temp", "DCGM_FI_DEV_GPU_TEMP_CELSIUS"]
    assert len({f.spec.reader for f in collectors.fields}) == 1
    assert collectors.warnings == ("x.csv:4: dcgm_gpu_temp already enabled at line 2; ignored",)


def test_an_alias_of_a_label_field_must_still_be_a_label() -> None:
    with pytest.raises(CollectorsError, match="DCGM_FI_SYSTEM_DRIVER_VERSION must be of type "
                                              "label"):
        parse_collectors("DCGM_FI_SYSTEM_DRIVER_VERSION, gauge, x\n", "x.csv")


# Each category picked from the reference table by its own columns, not by the classifier.
CATEGORY_ROWS: dict[Reason, Callable[[Row], bool]] = {
    Reason.NVSWITCH: lambda r: r["scope"] == "nvswitch",
    Reason.CPU: lambda r: r["scope"] == "cpu",
    Reason.DIAGNOSTIC: lambda r: "_DIAG_" in r["dcgm_name"],
    Reason.CONNECTX: lambda r: "CONNECTX" in r["dcgm_name"] and "FIELD_ID" not in r["dcgm_name"],
    Reason.IMEX: lambda r: r["dcgm_name"].startswith("DCGM_FI_IMEX_"),
    Reason.DCGM_STATE: lambda r: r["nvml_source"] == "none" and r["scope"] in ("global", "gpu")
    and r["dcgm_type"] == "int64" and not re.search("DIAG|IMEX|NVLINK", r["dcgm_name"]),
    Reason.BLOB: lambda r: r["dcgm_type"] == "binary" and r["nvml_source"].startswith(
        "nvmlDeviceGet") and "VGPU" not in r["dcgm_name"],
    Reason.VGPU_HOST: lambda r: r["scope"] == "other" and r["nvml_source"].startswith("nvmlVgpu")
    and r["dcgm_type"] != "binary",
    Reason.NOT_SUPPORTED: lambda r: bool(re.search("always [a-z]+ NOT_SUPPORTED",
                                                        r["notes"])),
    Reason.HOST_ENGINE: lambda r: r["nvml_source"] == "nvmlSystemGetProcessName",
    Reason.MARKER: lambda r: r["dcgm_name"].endswith("_FIELD_ID") and "LAST" in r["dcgm_name"],
}


def test_every_field_with_an_nvml_source_is_served() -> None:
    # Rows whose source is an NVML or GPM call, on a GPU, GPU instance, compute instance
    # or link, and not set apart by another category (blob, vGPU host, NvSwitch ...).
    rows = [r for r in reference_rows() if r["nvml_source"].startswith(("nvml", "NVML"))
            and r["scope"] in ("gpu", "gpu_instance", "compute_instance", "link")]
    assert len(rows) > 700
    table = dcgm_names()
    unserved = [r["dcgm_name"] for r in rows
                if (f := table.field(r["dcgm_name"])) is None
                or (table.served_spec(f) is None and f.reason is Reason.NVML)]
    assert unserved == []


def spot_checks() -> list[tuple[Reason, str]]:
    rows = reference_rows()
    picked: list[tuple[Reason, str]] = []
    for reason, matches in CATEGORY_ROWS.items():
        names = [r["dcgm_name"] for r in rows if matches(r)]
        assert names, reason
        picked += [(reason, n) for n in dict.fromkeys([names[0], names[len(names) // 2],
                                                       names[-1]])]
    return picked


@pytest.mark.parametrize(("reason", "name"), spot_checks())
def test_an_unserved_line_warns_once_with_its_reason(reason: Reason, name: str) -> None:
    collectors = parse_collectors(f"# c\n{name}, gauge, x\n", "x.csv")
    assert collectors.fields == ()
    (warning,) = collectors.warnings
    field = dcgm_names().field(name)
    assert field is not None
    assert field.reason is reason
    assert warning.startswith(f"x.csv:2: {name} ")
    assert reason.explain(field.nvml_source) in warning
    assert warning.endswith("; skipped")
    assert (f"(DCGM field {field.name})" in warning) == (field.name != name)


def test_a_renamed_link_field_is_served_under_the_name_the_file_uses() -> None:
    # DCGM 4.6.0's name of what 4.6.1 calls DCGM_FI_DEV_NVLINK_PPCNT_IBPC_TX_WAIT_TOTAL.
    name = "DCGM_FI_DEV_NVLINK_PPCNT_IBPC_PORT_XMIT_WAIT"
    collectors = parse_collectors(f"{name}, counter, x\n", "x.csv")
    assert collectors.warnings == ()
    (spec,) = collectors.specs
    assert spec.name == name
    assert str(spec.part) == "nvmlDeviceReadPRMCounters_v1(h, link, 201)"


@pytest.mark.parametrize(("name", "closest"), [
    ("DCGM_FI_DEV_NVSWITCH_POWER_VD", "DCGM_FI_DEV_NVSWITCH_POWER_VDD"),
    ("dcgm_fi_dev_gpu_temp", "DCGM_FI_DEV_GPU_TEMP"),
    ("dcgm_gpu_tmp", "dcgm_gpu_temp"),
    ("DCGM_FI_DEV_CPU_UTIL_RATI", "DCGM_FI_DEV_CPU_UTIL_RATIO"),
])
def test_an_unknown_name_is_skipped_with_the_closest_known_name(name: str,
                                                                closest: str) -> None:
    collectors = parse_collectors(f"DCGM_FI_DEV_GPU_TEMP, gauge, t\n{name}, gauge, x\n", "x.csv")
    assert collectors.names == {"DCGM_FI_DEV_GPU_TEMP"}
    assert collectors.warnings == (
        f"x.csv:2: unknown field {name!r} (did you mean {closest}?); skipped",)


def test_removed_names_are_skipped_not_fatal() -> None:
    # Gone from DCGM: dcgm-exporter stops on it, this exporter serves the rest.
    collectors = parse_collectors("DCGM_FI_DEV_NVSWITCH_LINK_DEVICE_UUID, gauge, x\n"
                                  "DCGM_FI_DEV_GPU_TEMP, gauge, t\n", "x.csv")
    assert collectors.names == {"DCGM_FI_DEV_GPU_TEMP"}
    (warning,) = collectors.warnings
    assert warning.startswith("x.csv:1: unknown field 'DCGM_FI_DEV_NVSWITCH_LINK_DEVICE_UUID'")
    assert warning.endswith("; skipped")


UPSTREAM_CSVS = [
    *(ROOT / "exporter" / "fields" / "dcgm-exporter").glob("*.csv"),
    *(fixture_file("dcgm-exporter", n) for n in ("default-counters.csv",
                                                  "dcp-metrics-included.csv")),
]


@pytest.mark.parametrize("path", UPSTREAM_CSVS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_upstream_csvs_load(path: Path) -> None:
    collectors = load_collectors(path)
    assert collectors.fields
    for warning in collectors.warnings:
        assert "already enabled" in warning


def test_1x_compatibility_csv_serves_every_line_under_its_1x_name() -> None:
    path = ROOT / "exporter" / "fields" / "dcgm-exporter" / "1.x-compatibility-metrics.csv"
    collectors = load_collectors(path)
    names = [f.spec.name for f in collectors.fields]
    assert names
    assert all(n.startswith("dcgm_") for n in names)
    assert len(names) == len(set(names)) == 20  # two lines repeat a name
    by_name = {f.spec.name: f for f in collectors.fields}
    assert by_name["dcgm_gpu_temp"].spec.reader is BY_NAME["DCGM_FI_DEV_GPU_TEMP"].reader
    assert by_name["dcgm_fi_prof_pcie_tx_bytes"].type is MetricType.COUNTER  # as the CSV says

"""Collectors files written for dcgm-exporter 4.9 and 4.10, which rename rows: 4.10's
`..._BYTES_PER_SECOND` PCIe and NVLink rates are served as the fields they rename; 4.9's
DCGM 4.7 names, where DCGM's field table here has them, in their base units; a name no table
here has is one warning naming the file and line, and the rest of the file is served."""

from __future__ import annotations

import re

from exporter.fields.catalog import BY_NAME
from exporter.fields.csv import parse_collectors
from tests.support.paths import fixture_file

RENAMED = {
    "DCGM_FI_PROF_PCIE_TX_BYTES": "DCGM_FI_PROF_PCIE_TX_BYTES_PER_SECOND",
    "DCGM_FI_PROF_PCIE_RX_BYTES": "DCGM_FI_PROF_PCIE_RX_BYTES_PER_SECOND",
}


def test_a_4_10_profiling_file_serves_what_4_8_4_s_did() -> None:
    # 4.8.4's profiling preset with the PCIe rows renamed as 4.10 ships them, and the
    # optional NVLink rows enabled under their new names.
    path = fixture_file("dcgm-exporter-4.8.4", "dcp-metrics-included.csv")
    old_text = path.read_text()
    new_text = old_text
    for name, renamed in RENAMED.items():
        new_text = re.sub(rf"^{name},", f"{renamed},", new_text, flags=re.MULTILINE)
    new_text += ("DCGM_FI_PROF_NVLINK_TX_BYTES_PER_SECOND, gauge, NVLink bytes sent per s.\n"
                 "DCGM_FI_PROF_NVLINK_RX_BYTES_PER_SECOND, gauge, NVLink bytes received.\n")
    before_4_10 = parse_collectors(old_text, "old.csv")
    new = parse_collectors(new_text, "new.csv")
    assert new.warnings == tuple(w.replace("old.csv", "new.csv")
                                 for w in before_4_10.warnings)
    by_name = {f.spec.name: f.spec for f in new.fields}
    for old, after in RENAMED.items():
        assert after in by_name, after
        assert old not in by_name
        spec, original = by_name[after], BY_NAME[old]
        assert (spec.reader, spec.part, spec.convert, spec.unit) == (
            original.reader, original.part, original.convert, "B/s"), after
    nvlink = by_name["DCGM_FI_PROF_NVLINK_TX_BYTES_PER_SECOND"]
    assert nvlink.part == BY_NAME["DCGM_FI_PROF_NVLINK_TX_BYTES"].part
    assert len(new.fields) == len(before_4_10.fields) + 2


def test_4_9_names_in_their_base_units() -> None:
    text = ("DCGM_FI_DEV_SM_CLOCK_HERTZ, gauge, SM clock (in Hz).\n"
            "DCGM_FI_DEV_MEMORY_CLOCK_HERTZ, gauge, Memory clock (in Hz).\n"
            "DCGM_FI_DEV_GPU_ENERGY_JOULES_TOTAL, counter, Energy (in J).\n"
            "DCGM_FI_PROF_GR_ENGINE_UTIL_RATIO, gauge, Graphics engine active.\n"
            "DCGM_FI_PROF_DRAM_UTIL_RATIO, gauge, Memory interface active.\n"
            "DCGM_FI_DEV_FB_CAPACITY_BYTES, gauge, Framebuffer capacity (in bytes).\n"
            "DCGM_FI_SYSTEM_DRIVER_VERSION, label, Driver version.\n")
    parsed = parse_collectors(text, "4.9.csv")
    units = {f.spec.name: (f.spec.unit, f.spec.convert.name) for f in parsed.fields}
    assert units == {
        "DCGM_FI_DEV_SM_CLOCK_HERTZ": ("Hz", "MHZ_TO_HZ"),
        "DCGM_FI_DEV_MEMORY_CLOCK_HERTZ": ("Hz", "MHZ_TO_HZ"),
        "DCGM_FI_DEV_GPU_ENERGY_JOULES_TOTAL": ("J", "MILLIJOULE_TO_JOULE"),
        "DCGM_FI_PROF_GR_ENGINE_UTIL_RATIO": ("ratio", "PERCENT_TO_RATIO"),
        "DCGM_FI_PROF_DRAM_UTIL_RATIO": ("ratio", "PERCENT_TO_RATIO"),
        "DCGM_FI_SYSTEM_DRIVER_VERSION": ("", "NONE"),
    }
    (warning,) = parsed.warnings
    assert warning.startswith("4.9.csv:6: unknown field 'DCGM_FI_DEV_FB_CAPACITY_BYTES'")
    assert parsed.skipped == ("DCGM_FI_DEV_FB_CAPACITY_BYTES",)

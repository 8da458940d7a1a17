"""The fault catalog: derived from NVIDIA's two mapping files, complete, and what ends each
action. Expected values come from the fixture files themselves or are written out here."""

from __future__ import annotations

import csv
import subprocess
import sys

import pytest

from exporter.fields.fault_catalog import (
    DATA_PATH,
    FaultCatalogError,
    catalog,
    cleared_by,
    health_entry,
    parse_catalog,
    xid_entry,
)
from exporter.fields.faults import ClearedBy
from tests.support.paths import ROOT, fixture_file
from tools.derive_fault_catalog import derived


def _rows(name: str) -> list[list[str]]:
    with fixture_file("nvsentinel", name).open(newline="", encoding="utf-8") as f:
        return list(csv.reader(f))


def test_shipped_catalog_is_derived_from_nvidias_files() -> None:
    assert DATA_PATH.read_text(encoding="utf-8") == derived(), \
        "fault-catalog.csv drifted: run python -m tools.derive_fault_catalog --write"


def test_the_generator_check_fails_on_drift_and_passes_in_step() -> None:
    check = [sys.executable, "-m", "tools.derive_fault_catalog", "--check"]
    result = subprocess.run(check, cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr


def test_every_xid_row_reads_back_as_nvidia_wrote_it() -> None:
    rows = _rows("xiderrorsmapping.csv")
    assert len(rows) == 162
    for code, name, action, fatality in rows:
        entry = xid_entry(int(code))
        assert entry.name == name.strip(), code
        assert entry.fatal is (fatality == "FATAL"), code
        if code == "154":  # free text in the source
            assert entry.action == "UNEXPECTED_ERR_REPORT_ISSUE"
            assert "Follow guidance" in entry.note
        else:
            assert entry.action == action, code
            assert entry.note == "", code


def test_every_dcgm_row_reads_back_with_its_action() -> None:
    rows = _rows("dcgmerrorsmapping.csv")
    assert len(rows) == 121  # the last row has no line end
    for code, action in rows:
        entry = health_entry(code)
        assert entry.action == action, code
        assert entry.fatal is (action in ("RESET_GPU", "NODE_REBOOT", "RUN_FIELDDIAG")), code


@pytest.mark.parametrize(
    ("xid", "action", "fatal", "ends", "raised"),
    [
        (79, "RESTART_BM", True, ClearedBy.REBOOT, True),
        (95, "RESET_GPU", True, ClearedBy.GPU_RESET, True),
        (13, "RESTART_APP", False, ClearedBy.HOLDER_EXIT, True),
        (31, "RESTART_APP", False, ClearedBy.HOLDER_EXIT, True),
        (43, "IGNORE", False, ClearedBy.NEVER_HELD, False),
        (63, "IGNORE", False, ClearedBy.NEVER_HELD, False),
        (45, "WORKFLOW_XID_45", False, ClearedBy.HOLDER_EXIT, True),
        (48, "WORKFLOW_XID_48", True, ClearedBy.GPU_RESET, True),
        (74, "WORKFLOW_NVLINK_ERR", True, ClearedBy.GPU_RESET, True),
        (1, "UNEXPECTED_ERR_REPORT_ISSUE", True, ClearedBy.GPU_RESET, True),
        (154, "UNEXPECTED_ERR_REPORT_ISSUE", False, ClearedBy.NEVER_HELD, True),
        (999, "UNEXPECTED_ERR_REPORT_ISSUE", True, ClearedBy.GPU_RESET, True),
    ],
)
def test_xid_actions_and_what_ends_them(xid: int, action: str, fatal: bool, ends: ClearedBy,
                                        raised: bool) -> None:
    entry = xid_entry(xid)
    assert (entry.action, entry.fatal, entry.cleared_by, entry.raised) == \
        (action, fatal, ends, raised), xid


def test_an_xid_outside_the_catalog_is_named_unknown() -> None:
    assert xid_entry(999).name == "UNKNOWN_XID"
    assert xid_entry(999).note == "not in the catalog"


@pytest.mark.parametrize(
    ("code", "action", "ends"),
    [
        ("DCGM_FR_VOLATILE_DBE_DETECTED", "RESET_GPU", ClearedBy.GPU_RESET),
        ("DCGM_FR_PENDING_PAGE_RETIREMENTS", "IGNORE", ClearedBy.NEVER_HELD),
        ("DCGM_FR_NVLINK_DOWN", "NODE_REBOOT", ClearedBy.REBOOT),
        ("DCGM_FR_ROW_REMAP_FAILURE", "RUN_FIELDDIAG", ClearedBy.GPU_RESET),
        ("DCGM_FR_PCI_REPLAY_RATE", "REPORT_ISSUE", ClearedBy.NEVER_HELD),
        ("DCGM_FR_GPU_RECOVERY_REBOOT", "NODE_REBOOT", ClearedBy.REBOOT),
        ("DCGM_FR_SOMETHING_NEW", "REPORT_ISSUE", ClearedBy.NEVER_HELD),
    ],
)
def test_health_code_actions_and_what_ends_them(code: str, action: str,
                                                ends: ClearedBy) -> None:
    entry = health_entry(code)
    assert (entry.action, entry.cleared_by) == (action, ends), code


def test_check_thermals_waits_for_the_health_check_to_pass() -> None:
    thermal = [c for (source, c), e in catalog().items()
               if source == "health" and e.action == "CHECK_THERMALS"]
    assert thermal, "the DCGM mapping has CHECK_THERMALS codes"
    for code in thermal:
        assert health_entry(code).cleared_by is ClearedBy.HEALTH_PASS, code


@pytest.mark.parametrize(
    ("action", "fatal", "ends"),
    [
        ("RESTART_APP", True, ClearedBy.HOLDER_EXIT),
        ("RESET_GPU", False, ClearedBy.GPU_RESET),
        ("RUN_FIELDDIAG", False, ClearedBy.GPU_RESET),
        ("CHECK_MECHANICALS", False, ClearedBy.GPU_RESET),
        ("WORKFLOW_NVLINK5_ERR", False, ClearedBy.GPU_RESET),
        ("RESTART_VM", False, ClearedBy.REBOOT),
        ("NODE_REBOOT", False, ClearedBy.REBOOT),
        ("IGNORE", True, ClearedBy.NEVER_HELD),
        ("NONE", True, ClearedBy.NEVER_HELD),
        ("CHECK_FM_CONFIG", False, ClearedBy.HEALTH_PASS),
        ("REPORT_ISSUE", True, ClearedBy.GPU_RESET),
        ("REPORT_ISSUE", False, ClearedBy.NEVER_HELD),
        ("UPDATE_SWFW", True, ClearedBy.GPU_RESET),
        ("CHECK_UVM", False, ClearedBy.NEVER_HELD),
    ],
)
def test_the_clearing_table_on_health_codes(action: str, fatal: bool, ends: ClearedBy) -> None:
    assert cleared_by("health", action, fatal) is ends


def test_a_health_pass_action_on_an_xid_falls_back_to_its_fatality() -> None:
    assert cleared_by("xid", "CHECK_THERMALS", True) is ClearedBy.GPU_RESET
    assert cleared_by("xid", "CHECK_THERMALS", False) is ClearedBy.NEVER_HELD


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "expected the header source,code,name,action,fatal,note"),
        ("source,code,name,action,fatal,note\nxid,1,A,RESET_GPU,yes,\n",
         "row 2: expected source (xid|health)"),
        ("source,code,name,action,fatal,note\ngpu,1,A,RESET_GPU,true,\n", "row 2"),
    ],
)
def test_a_malformed_catalog_names_the_file_and_row(text: str, message: str) -> None:
    with pytest.raises(FaultCatalogError, match=r"catalog\.csv: ") as info:
        parse_catalog(text, "catalog.csv")
    assert message in str(info.value)

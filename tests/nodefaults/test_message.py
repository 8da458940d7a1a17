"""The condition message: its exact text, read back into the same faults, and text that is
not a fault tolerated with a warning."""

from __future__ import annotations

import logging

import pytest

from exporter.fields.faults import ClearedBy, GpuFault
from exporter.nodefaults.message import (
    NO_FAULT_MESSAGE,
    camel_case,
    condition_reason,
    decode,
    encode,
)

FELL_OFF = GpuFault(gpu=1, uuid="GPU-5a1b0c2d-aaaa-bbbb-cccc-000000000001", source="xid",
                    code="79", name="ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS",
                    action="RESTART_BM", fatal=True, cleared_by=ClearedBy.REBOOT,
                    since=1796648371.25, boot_id="4f1c2d3e-0000-1111-2222-333344445555")
DBE = GpuFault(gpu=0, uuid="GPU-5a1b0c2d-aaaa-bbbb-cccc-000000000000", source="health",
               code="DCGM_FR_VOLATILE_DBE_DETECTED", name="Volatile DBE detected",
               action="RESET_GPU", fatal=False, cleared_by=ClearedBy.GPU_RESET,
               since=1796648300.0, boot_id="4f1c2d3e-0000-1111-2222-333344445555")
SLASHED = GpuFault(gpu=2, uuid="GPU-y", source="xid", code="13",
                   name="ROBUST_CHANNEL_GR_EXCEPTION / ROBUST_CHANNEL_GR_ERROR_SW_NOTIFY",
                   action="RESTART_APP", fatal=False, cleared_by=ClearedBy.NEVER_HELD,
                   since=1796648000.0, boot_id="b")
NO_NAME = GpuFault(gpu=3, uuid="GPU-x", source="xid", code="31", name="", action="RESTART_APP",
                   fatal=False, cleared_by=ClearedBy.HOLDER_EXIT, since=1796648000.5,
                   boot_id="")

FELL_OFF_TEXT = (
    "[XID 79] GPU 1 GPU-5a1b0c2d-aaaa-bbbb-cccc-000000000001 "
    "ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS - RecommendedAction: RESTART_BM "
    "(fatal, cleared by reboot, since 2026-12-07T12:59:31.250Z, "
    "boot 4f1c2d3e-0000-1111-2222-333344445555)")


def test_one_fault_is_written_in_nvsentinels_shape_with_its_record() -> None:
    assert encode([FELL_OFF]) == FELL_OFF_TEXT


def test_no_fault_is_a_fixed_sentence_and_reads_back_as_none() -> None:
    assert encode([]) == NO_FAULT_MESSAGE == "No GPU fault held"
    assert decode(NO_FAULT_MESSAGE) == ()
    assert decode("") == ()


def test_several_faults_fatal_first_then_by_gpu() -> None:
    message = encode([NO_NAME, DBE, FELL_OFF])
    parts = message.split("; ")
    assert parts[0] == FELL_OFF_TEXT
    assert parts[1].startswith("[HEALTH DCGM_FR_VOLATILE_DBE_DETECTED] GPU 0 ")
    assert parts[2] == ("[XID 31] GPU 3 GPU-x - RecommendedAction: RESTART_APP "
                        "(non-fatal, cleared by holder-exit, since 2026-12-07T12:53:20.500Z, "
                        "boot )")


@pytest.mark.parametrize("faults", [[FELL_OFF], [DBE], [NO_NAME], [SLASHED],
                                    [FELL_OFF, DBE, NO_NAME, SLASHED]],
                         ids=["xid", "health-with-spaces", "no-name", "slash-in-name", "four"])
def test_round_trip(faults: list[GpuFault]) -> None:
    assert sorted(decode(encode(faults)), key=repr) == sorted(faults, key=repr)


def test_garbage_parts_are_skipped_with_a_warning_and_the_rest_restores(
        caplog: pytest.LogCaptureFixture) -> None:
    message = f"edited by hand; {FELL_OFF_TEXT}; [XID 79] GPU one"
    with caplog.at_level(logging.WARNING):
        assert decode(message, where="node n1") == (FELL_OFF,)
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 2
    assert warnings[0].startswith("node n1: message part 'edited by hand' is not a fault")


@pytest.mark.parametrize("text", [
    "[XID 79] GPU 1 GPU-a NAME - RecommendedAction: RESTART_BM (fatal, cleared by "
    "sometimes, since 2026-12-07T12:59:31.250Z, boot b)",
    "[XID 79] GPU 1 GPU-a NAME - RecommendedAction: RESTART_BM (fatal, cleared by reboot, "
    "since yesterday, boot b)",
    "\x00\x01 binary",
])
def test_a_part_with_an_unknown_clearing_event_or_time_is_not_a_fault(text: str) -> None:
    assert decode(text) == ()


def test_reasons_are_camel_case_from_the_catalog_name_else_the_code() -> None:
    assert camel_case("ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS") == \
        "RobustChannelGpuHasFallenOffTheBus"
    assert condition_reason([DBE, FELL_OFF]) == "RobustChannelGpuHasFallenOffTheBus"
    assert condition_reason([DBE]) == "VolatileDbeDetected"
    assert condition_reason([NO_NAME]) == "Xid31"
    assert condition_reason([]) == "GpuHardwareHealthy"

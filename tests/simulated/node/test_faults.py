"""Fault specs: parsing, validation against the profile, and each kind at its time."""

from __future__ import annotations

import re

import pynvml
import pytest

from exporter.durations import parse_duration
from exporter.simulated.node import (
    GRAMMAR,
    EccFault,
    ExitFault,
    FbRampFault,
    GpmAdminOnlyFault,
    IdleFault,
    LostFault,
    NvlinkFault,
    NvmlDownFault,
    PowerBrakeFault,
    RemapFault,
    ResetFault,
    SimNvml,
    ThermalFault,
    Window,
    XidFault,
    parse_fault,
)
from exporter.simulated.node.fault_specs import (
    InforomFault,
    NvlinkDownFault,
    PcieReplayFault,
    RecoveryFault,
    RetireFault,
)
from tests.simulated.node.conftest import SimFactory, nvml_code

MIB = 1024 * 1024
HW_SLOWDOWN = pynvml.nvmlClocksEventReasonHwSlowdown
HW_THERMAL = pynvml.nvmlClocksEventReasonHwThermalSlowdown
HW_BRAKE = pynvml.nvmlClocksEventReasonHwPowerBrakeSlowdown

# -- parsing ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("xid,code=79,gpu=0,at=10s", XidFault(0, 79, 10.0, None, "xid,code=79,gpu=0,at=10s")),
        ("xid,code=48,gpu=1,at=500ms,gi=2",
         XidFault(1, 48, 0.5, 2, "xid,code=48,gpu=1,at=500ms,gi=2")),
        ("lost,gpu=1,at=20s,for=30s",
         LostFault(1, Window(20.0, 50.0), "lost,gpu=1,at=20s,for=30s")),
        ("lost,gpu=1,at=2m", LostFault(1, Window(120.0, None), "lost,gpu=1,at=2m")),
        ("nvml-down,at=0s,for=20s", NvmlDownFault(Window(0.0, 20.0), "nvml-down,at=0s,for=20s")),
        ("gpm-admin-only", GpmAdminOnlyFault("gpm-admin-only")),
        ("fb-ramp,gpu=2,at=5s,over=30s,to=97",
         FbRampFault(2, 5.0, 30.0, 97.0, None, "fb-ramp,gpu=2,at=5s,over=30s,to=97")),
        ("ecc,gpu=0,at=5s,dbe=1", EccFault(0, 5.0, 1, 0, "ecc,gpu=0,at=5s,dbe=1")),
        ("ecc,gpu=0,at=5s,dbe=1,sbe=12", EccFault(0, 5.0, 1, 12, "ecc,gpu=0,at=5s,dbe=1,sbe=12")),
        ("remap,gpu=0,at=5s,failure=1",
         RemapFault(0, 5.0, True, False, "remap,gpu=0,at=5s,failure=1")),
        ("remap,gpu=0,at=5s,failure=0,pending=1",
         RemapFault(0, 5.0, False, True, "remap,gpu=0,at=5s,failure=0,pending=1")),
        ("thermal,gpu=0,at=5s,for=1m",
         ThermalFault(0, Window(5.0, 65.0), "thermal,gpu=0,at=5s,for=1m")),
        ("power-brake,gpu=0,at=5s",
         PowerBrakeFault(0, Window(5.0, None), "power-brake,gpu=0,at=5s")),
        ("idle,gpu=3,at=0s", IdleFault(3, Window(0.0, None), None, "idle,gpu=3,at=0s")),
        (" IDLE , gpu=3 , at=1.5s , for=1h ",
         IdleFault(3, Window(1.5, 3601.5), None, " IDLE , gpu=3 , at=1.5s , for=1h ")),
    ],
)
def test_parse_valid_specs(spec: str, expected: object) -> None:
    assert parse_fault(spec) == expected


def test_every_grammar_example_parses() -> None:
    kinds = {"xid": XidFault, "lost": LostFault, "nvml-down": NvmlDownFault,
             "gpm-admin-only": GpmAdminOnlyFault, "fb-ramp": FbRampFault, "ecc": EccFault,
             "remap": RemapFault,
             "thermal": ThermalFault, "power-brake": PowerBrakeFault, "idle": IdleFault,
             "nvlink": NvlinkFault, "pcie-replay": PcieReplayFault, "retire": RetireFault,
             "inforom": InforomFault, "nvlink-down": NvlinkDownFault,
             "recovery": RecoveryFault, "reset": ResetFault, "exit": ExitFault}
    assert set(GRAMMAR) == set(kinds)
    for kind, example in GRAMMAR.items():
        full = example.replace("[", "").replace("]", "").replace("=N", "=3")
        assert isinstance(parse_fault(full), kinds[kind]), full


@pytest.mark.parametrize(
    ("spec", "must_mention"),
    [
        ("", ["missing the fault kind", "xid"]),
        ("explode,gpu=0", ["'explode'", "xid", "lost", "nvml-down", "idle"]),
        ("xid,gpu=0,at=10s", ["code="]),
        ("xid,code=79,gpu=0", ["at="]),
        ("xid,code=abc,gpu=0,at=1s", ["code='abc'", "whole number", "XID number"]),
        ("xid,code=79,gpu=-1,at=1s", ["gpu='-1'", "GPU index"]),
        ("xid,code=79,gpu=0,at=10", ["at='10'", "30s", "500ms"]),
        ("xid,code=79,gpu=0,at=soon", ["at='soon'"]),
        ("xid,code=79,gpu=0,at=1s,color=red", ["'color'", "code, gpu, at, gi"]),
        ("xid,code=79,gpu=0,at=1s,gpu=1", ["'gpu'", "twice"]),
        ("xid,code=79,gpu0,at=1s", ["'gpu0'", "key=value"]),
        ("lost,gpu=1,at=5s,for=0s", ["for='0s'", "longer than 0"]),
        ("fb-ramp,gpu=2,at=5s,over=30s,to=120", ["to='120'", "percentage"]),
        ("fb-ramp,gpu=2,at=5s,to=90", ["over="]),
        ("ecc,gpu=0,at=5s", ["dbe=", "sbe="]),
        ("remap,gpu=0,at=5s,failure=2", ["failure='2'", "0 or 1"]),
        ("remap,gpu=0,at=5s", ["failure=", "pending="]),
        ("nvml-down,gpu=0,at=0s", ["'gpu'", "at, for"]),
        ("gpm-admin-only,gpu=0", ["'gpu'", "gpm-admin-only"]),
    ],
)
def test_parse_errors_name_the_bad_part(spec: str, must_mention: list[str]) -> None:
    with pytest.raises(ValueError, match=re.escape(must_mention[0])) as info:
        parse_fault(spec)
    message = str(info.value)
    for part in must_mention:
        assert part in message, (part, message)


def test_parse_duration_units() -> None:
    assert [parse_duration(t) for t in ("500ms", "30s", "2m", "1h", "0.25s")] == \
        [0.5, 30.0, 120.0, 3600.0, 0.25]
    with pytest.raises(ValueError, match="30s"):
        parse_duration("5 minutes")


@pytest.mark.parametrize(
    ("profile", "spec", "must_mention"),
    [
        ("l4-1", "lost,gpu=1,at=1s", ["gpu=1", "l4-1", "GPUs 0-0"]),
        ("h100-8", "xid,code=79,gpu=0,at=1s,gi=2", ["gi=2", "MIG off"]),
        ("h200-mig", "idle,gpu=0,at=1s,gi=5", ["gi=5", "2, 3, 9, 10"]),
    ],
)
def test_faults_must_fit_the_profile(profile: str, spec: str, must_mention: list[str]) -> None:
    with pytest.raises(ValueError, match=re.escape(must_mention[0])) as info:
        SimNvml(profile, faults=[parse_fault(spec)])
    for part in must_mention:
        assert part in str(info.value)


# -- behaviour at the fault's time --------------------------------------------------------


def test_lost_gpu_and_its_mig_devices(make_sim: SimFactory) -> None:
    sim, clock = make_sim("h200-mig", "lost,gpu=0,at=20s,for=30s")
    parent = sim.nvmlDeviceGetHandleByIndex(0)
    mig = sim.nvmlDeviceGetMigDeviceHandleByIndex(parent, 0)
    uuid = sim.nvmlDeviceGetUUID(parent)
    other = sim.nvmlDeviceGetHandleByIndex(1)
    clock.advance(19.9)
    assert sim.nvmlDeviceGetPowerUsage(parent) > 0
    clock.advance(0.2)
    lost = pynvml.NVML_ERROR_GPU_IS_LOST
    assert nvml_code(lambda: sim.nvmlDeviceGetPowerUsage(parent)) == lost
    assert nvml_code(lambda: sim.nvmlDeviceGetUUID(parent)) == lost
    assert nvml_code(lambda: sim.nvmlDeviceGetMemoryInfo(mig, pynvml.nvmlMemory_v2)) == lost
    assert nvml_code(lambda: sim.nvmlDeviceGetHandleByIndex(0)) == lost
    assert nvml_code(lambda: sim.nvmlGpmSampleGet(mig, sim.nvmlGpmSampleAlloc())) == lost
    assert sim.nvmlDeviceGetCount() == 8
    assert sim.nvmlDeviceGetPowerUsage(other) > 0  # only GPU 0 is gone
    clock.advance(30.0)
    again = sim.nvmlDeviceGetHandleByIndex(0)
    assert sim.nvmlDeviceGetUUID(again) == uuid
    assert sim.nvmlDeviceGetPowerUsage(again) > 0


def test_nvml_down_window(make_sim: SimFactory) -> None:
    sim, clock = make_sim("h100-8", "nvml-down,at=0s,for=20s", init=False)
    assert nvml_code(sim.nvmlInit) == pynvml.NVML_ERROR_DRIVER_NOT_LOADED
    assert nvml_code(sim.nvmlDeviceGetCount) == pynvml.NVML_ERROR_UNINITIALIZED
    clock.advance(19.9)
    assert nvml_code(sim.nvmlInit) == pynvml.NVML_ERROR_DRIVER_NOT_LOADED
    clock.advance(0.2)
    assert nvml_code(sim.nvmlDeviceGetCount) == pynvml.NVML_ERROR_UNINITIALIZED
    sim.nvmlInit()
    assert sim.nvmlDeviceGetCount() == 8


def test_nvml_down_drops_an_initialised_library(make_sim: SimFactory) -> None:
    sim, clock = make_sim("l4-1", "nvml-down,at=10s,for=5s")
    h = sim.nvmlDeviceGetHandleByIndex(0)
    clock.advance(9.0)
    assert sim.nvmlDeviceGetPowerUsage(h) > 0
    clock.advance(2.0)
    assert nvml_code(lambda: sim.nvmlDeviceGetPowerUsage(h)) == pynvml.NVML_ERROR_UNINITIALIZED
    clock.advance(10.0)
    # The window is over, but the library stays down until initialised again.
    assert nvml_code(lambda: sim.nvmlDeviceGetPowerUsage(h)) == pynvml.NVML_ERROR_UNINITIALIZED
    sim.nvmlInit()
    assert sim.nvmlDeviceGetPowerUsage(sim.nvmlDeviceGetHandleByIndex(0)) > 0


def test_fb_ramp(make_sim: SimFactory) -> None:
    sim, clock = make_sim("h100-8", "fb-ramp,gpu=2,at=5s,over=30s,to=97")
    h = sim.nvmlDeviceGetHandleByIndex(2)

    def used_percent() -> float:
        mem = sim.nvmlDeviceGetMemoryInfo(h, version=pynvml.nvmlMemory_v2)
        return 100.0 * int(mem.used) / int(mem.total)

    clock.advance(4.9)
    before = used_percent()
    assert before < 95.0
    clock.advance(15.1)  # halfway
    assert min(before, 97.0) - 0.5 <= used_percent() <= 97.0
    clock.advance(15.0)
    assert used_percent() == pytest.approx(97.0, abs=0.01)
    clock.advance(600.0)
    assert used_percent() == pytest.approx(97.0, abs=0.01)


def test_fb_ramp_on_one_gpu_instance(make_sim: SimFactory) -> None:
    sim, clock = make_sim("h200-mig", "fb-ramp,gpu=0,at=0s,over=0s,to=90,gi=9")
    parent = sim.nvmlDeviceGetHandleByIndex(0)
    gi9 = sim.nvmlDeviceGetMigDeviceHandleByIndex(parent, 4)
    assert sim.nvmlDeviceGetGpuInstanceId(gi9) == 9
    clock.advance(1.0)
    mem = sim.nvmlDeviceGetMemoryInfo(gi9, version=pynvml.nvmlMemory_v2)
    assert mem.used // MIB == int(16384 * 0.9)


def test_ecc(make_sim: SimFactory) -> None:
    sim, clock = make_sim("h100-8", "ecc,gpu=0,at=5s,dbe=1,sbe=4")
    h = sim.nvmlDeviceGetHandleByIndex(0)
    ids = [pynvml.NVML_FI_DEV_ECC_SBE_VOL_TOTAL, pynvml.NVML_FI_DEV_ECC_DBE_VOL_TOTAL,
           pynvml.NVML_FI_DEV_ECC_DBE_AGG_TOTAL]

    def counts() -> list[int]:
        return [e.value.ullVal for e in sim.nvmlDeviceGetFieldValues(h, ids)]

    clock.advance(4.9)
    assert counts() == [0, 0, 0]
    clock.advance(0.2)
    assert counts() == [4, 1, 1]


def test_reset_loses_the_gpu_briefly_then_zeroes_its_volatile_counts(
        make_sim: SimFactory) -> None:
    sim, clock = make_sim("h100-8", "ecc,gpu=0,at=5s,dbe=1,sbe=4", "reset,gpu=0,at=10s")
    h = sim.nvmlDeviceGetHandleByIndex(0)
    ids = [pynvml.NVML_FI_DEV_ECC_SBE_VOL_TOTAL, pynvml.NVML_FI_DEV_ECC_DBE_VOL_TOTAL,
           pynvml.NVML_FI_DEV_ECC_SBE_AGG_TOTAL, pynvml.NVML_FI_DEV_ECC_DBE_AGG_TOTAL]

    def counts() -> list[int]:
        return [e.value.ullVal for e in sim.nvmlDeviceGetFieldValues(h, ids)]

    clock.advance(9.9)
    volatile_and_aggregate = counts()
    assert volatile_and_aggregate[:2] == [4, 1]
    clock.advance(0.2)  # 10.1 s: inside the reset's default 2 s
    assert nvml_code(lambda: sim.nvmlDeviceGetPowerUsage(h)) == pynvml.NVML_ERROR_GPU_IS_LOST
    clock.advance(2.0)  # 12.1 s: back
    h = sim.nvmlDeviceGetHandleByIndex(0)
    after = counts()
    assert after[:2] == [0, 0], "a reset zeroes the volatile counts"
    assert after[2:] == volatile_and_aggregate[2:], "and keeps the aggregate ones"


def test_reset_retires_the_pending_page(make_sim: SimFactory) -> None:
    sim, clock = make_sim("h100-8", "retire,gpu=0,at=1s,pending=1", "reset,gpu=0,at=5s,for=1s")
    h = sim.nvmlDeviceGetHandleByIndex(0)

    def pending() -> int:
        return int(sim.nvmlDeviceGetFieldValues(
            h, [pynvml.NVML_FI_DEV_RETIRED_PENDING])[0].value.ullVal)

    clock.advance(2.0)
    assert pending() == 1
    clock.advance(5.0)
    assert pending() == 0


def test_exit_ends_the_gpus_processes(make_sim: SimFactory) -> None:
    sim, clock = make_sim("a100-timesliced", "exit,gpu=1,at=5s")
    gpu0, gpu1 = sim.nvmlDeviceGetHandleByIndex(0), sim.nvmlDeviceGetHandleByIndex(1)
    clock.advance(4.9)
    assert len(sim.nvmlDeviceGetComputeRunningProcesses(gpu1)) == 3
    clock.advance(0.2)
    assert sim.nvmlDeviceGetComputeRunningProcesses(gpu1) == []
    assert len(sim.nvmlDeviceGetComputeRunningProcesses(gpu0)) == 3  # only GPU 1's exit


def test_remap(make_sim: SimFactory) -> None:
    sim, clock = make_sim("a100-timesliced", "remap,gpu=3,at=5s,failure=1,pending=1")
    h = sim.nvmlDeviceGetHandleByIndex(3)
    clock.advance(4.9)
    assert sim.nvmlDeviceGetRemappedRows(h) == (0, 0, 0, 0)
    clock.advance(0.2)
    corrected, uncorrected, pending, failure = sim.nvmlDeviceGetRemappedRows(h)
    assert (pending, failure) == (1, 1)
    assert uncorrected >= 1
    assert corrected == 0


def test_thermal(make_sim: SimFactory) -> None:
    sim, clock = make_sim("h100-8", "thermal,gpu=1,at=30s,for=60s")
    h = sim.nvmlDeviceGetHandleByIndex(1)
    fid = [pynvml.NVML_FI_DEV_PERF_POLICY_THERMAL]
    clock.advance(29.0)
    assert not sim.nvmlDeviceGetCurrentClocksEventReasons(h) & HW_THERMAL
    assert sim.nvmlDeviceGetFieldValues(h, fid)[0].value.ullVal == 0
    temp_before = sim.nvmlDeviceGetTemperature(h, pynvml.NVML_TEMPERATURE_GPU)
    clock.advance(11.0)
    reasons = sim.nvmlDeviceGetCurrentClocksEventReasons(h)
    assert reasons & HW_THERMAL
    assert reasons & HW_SLOWDOWN
    temp = sim.nvmlDeviceGetTemperature(h, pynvml.NVML_TEMPERATURE_GPU)
    assert temp > temp_before
    assert temp >= 85
    assert sim.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM) < 1980
    assert sim.nvmlDeviceGetFieldValues(h, fid)[0].value.ullVal == 10 * 10**9
    clock.advance(60.0)
    assert not sim.nvmlDeviceGetCurrentClocksEventReasons(h) & HW_THERMAL
    assert sim.nvmlDeviceGetFieldValues(h, fid)[0].value.ullVal == 60 * 10**9


def test_power_brake(make_sim: SimFactory) -> None:
    sim, clock = make_sim("h100-8", "power-brake,gpu=4,at=10s")
    plain, plain_clock = make_sim("h100-8")
    h, h_plain = sim.nvmlDeviceGetHandleByIndex(4), plain.nvmlDeviceGetHandleByIndex(4)
    for c in (clock, plain_clock):
        c.advance(9.0)
    assert not sim.nvmlDeviceGetCurrentClocksEventReasons(h) & HW_BRAKE
    assert sim.nvmlDeviceGetPowerUsage(h) == plain.nvmlDeviceGetPowerUsage(h_plain)
    for c in (clock, plain_clock):
        c.advance(3.0)
    reasons = sim.nvmlDeviceGetCurrentClocksEventReasons(h)
    assert reasons & HW_BRAKE
    assert reasons & HW_SLOWDOWN
    # The same node without the fault, at the same moment, draws more.
    assert sim.nvmlDeviceGetPowerUsage(h) < plain.nvmlDeviceGetPowerUsage(h_plain)
    assert sim.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM) < \
        plain.nvmlDeviceGetClockInfo(h_plain, pynvml.NVML_CLOCK_SM)
    assert sim.nvmlDeviceGetFieldValues(
        h, [pynvml.NVML_FI_DEV_PERF_POLICY_POWER])[0].value.ullVal == 2 * 10**9


def test_idle(make_sim: SimFactory) -> None:
    sim, clock = make_sim("h100-8", "idle,gpu=3,at=60s,for=120s")
    h = sim.nvmlDeviceGetHandleByIndex(3)
    clock.advance(59.0)
    assert sim.nvmlDeviceGetUtilizationRates(h).gpu > 0
    busy_memory = sim.nvmlDeviceGetMemoryInfo(h, version=pynvml.nvmlMemory_v2).used
    assert busy_memory > 0
    clock.advance(2.5)
    util = sim.nvmlDeviceGetUtilizationRates(h)
    assert (util.gpu, util.memory) == (0, 0)
    assert sim.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM) == 345
    assert sim.nvmlDeviceGetCurrentClocksEventReasons(h) & pynvml.nvmlClocksEventReasonGpuIdle
    # Allocated but idle: the framebuffer stays in use.
    assert sim.nvmlDeviceGetMemoryInfo(h, version=pynvml.nvmlMemory_v2).used > 0
    after = []
    for _ in range(20):
        clock.advance(10.0)
        after.append(sim.nvmlDeviceGetUtilizationRates(h).gpu)
    assert max(after) > 0

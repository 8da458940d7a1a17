"""Values over simulated time: determinism, ranges, monotonic counters, MIG refusals."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

import pynvml
import pytest

from exporter.simulated.node import SimNvml
from tests.simulated.node.conftest import SimFactory, nvml_code
from tests.support.clock import FakeClock

NVLINK_ALL = 0xFFFFFFFF
FI_MEMORY_TEMP = pynvml.NVML_FI_DEV_MEMORY_TEMP
FI_NVLINK_TX = pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX
FI_NVLINK_RX = pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX


def _reading(sim: SimNvml, index: int) -> tuple[object, ...]:
    h = sim.nvmlDeviceGetHandleByIndex(index)
    util = sim.nvmlDeviceGetUtilizationRates(h)
    mem = sim.nvmlDeviceGetMemoryInfo(h, version=pynvml.nvmlMemory_v2)
    fields = sim.nvmlDeviceGetFieldValues(h, [FI_MEMORY_TEMP, (FI_NVLINK_TX, NVLINK_ALL)])
    return (
        sim.nvmlDeviceGetPowerUsage(h),
        sim.nvmlDeviceGetTemperature(h, pynvml.NVML_TEMPERATURE_GPU),
        sim.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM),
        sim.nvmlDeviceGetTotalEnergyConsumption(h),
        util.gpu, util.memory, mem.used,
        fields[0].value.uiVal, fields[1].value.ullVal,
    )


def _series(sim: SimNvml, clock: FakeClock, steps: int, index: int) -> list[tuple[object, ...]]:
    out = []
    for _ in range(steps):
        clock.advance(13.7)
        out.append(_reading(sim, index))
    return out


def test_same_seed_same_values(make_sim: SimFactory) -> None:
    a, clock_a = make_sim("h100-8", seed=7)
    b, clock_b = make_sim("h100-8", seed=7)
    assert _series(a, clock_a, 20, 4) == _series(b, clock_b, 20, 4)


def test_different_seeds_differ(make_sim: SimFactory) -> None:
    a, clock_a = make_sim("h100-8", seed=1)
    b, clock_b = make_sim("h100-8", seed=2)
    assert _series(a, clock_a, 20, 4) != _series(b, clock_b, 20, 4)


def test_gpus_do_not_move_in_lockstep(make_sim: SimFactory) -> None:
    sim, clock = make_sim("h100-8")
    powers: list[list[int]] = [[] for _ in range(8)]
    for _ in range(30):
        clock.advance(11.0)
        for i in range(8):
            powers[i].append(sim.nvmlDeviceGetPowerUsage(sim.nvmlDeviceGetHandleByIndex(i)))
    assert len({tuple(p) for p in powers}) == 8


def test_values_stay_in_plausible_ranges(make_sim: SimFactory) -> None:
    sim, clock = make_sim("h100-8", seed=3)
    seen_util: set[int] = set()
    seen_clocks: set[int] = set()
    for _ in range(120):
        clock.advance(9.3)
        for i in range(8):
            h = sim.nvmlDeviceGetHandleByIndex(i)
            util = sim.nvmlDeviceGetUtilizationRates(h)
            assert isinstance(util.gpu, int)
            assert 0 <= util.gpu <= 100
            assert isinstance(util.memory, int)
            assert 0 <= util.memory <= 100
            seen_util.add(util.gpu)
            power = sim.nvmlDeviceGetPowerUsage(h)
            assert 60_000 <= power <= sim.nvmlDeviceGetPowerManagementLimit(h)
            assert 30 <= sim.nvmlDeviceGetTemperature(h, pynvml.NVML_TEMPERATURE_GPU) <= 90
            sm = sim.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM)
            assert 345 <= sm <= 1980
            seen_clocks.add(sm)
            mem = sim.nvmlDeviceGetMemoryInfo(h, version=pynvml.nvmlMemory_v2)
            assert mem.used + mem.free + mem.reserved == mem.total
            assert mem.free >= 0
    # The load moves: utilisation spans a wide range and clocks drop at idle.
    assert max(seen_util) - min(seen_util) > 50
    assert 345 in seen_clocks
    assert 1980 in seen_clocks


def test_counters_and_energy_only_grow(make_sim: SimFactory) -> None:
    sim, clock = make_sim("a100-timesliced", "idle,gpu=1,at=100s,for=200s",
                          "power-brake,gpu=2,at=50s,for=60s")
    last: dict[tuple[int, str], int] = {}
    grew: set[str] = set()
    for step in range(200):
        clock.advance(0.37 if step % 3 else 7.1)
        for i in range(4):
            h = sim.nvmlDeviceGetHandleByIndex(i)
            fields = sim.nvmlDeviceGetFieldValues(h, [(FI_NVLINK_TX, NVLINK_ALL),
                                                      (FI_NVLINK_RX, NVLINK_ALL)])
            now = {
                "energy": sim.nvmlDeviceGetTotalEnergyConsumption(h),
                "replays": sim.nvmlDeviceGetPcieReplayCounter(h),
                "nvlink_tx": fields[0].value.ullVal,
                "nvlink_rx": fields[1].value.ullVal,
            }
            for name, value in now.items():
                before = last.get((i, name))
                if before is not None:
                    assert value >= before, (i, name)
                    if value > before:
                        grew.add(name)
                last[(i, name)] = value
    assert {"energy", "nvlink_tx", "nvlink_rx"} <= grew


def test_energy_is_the_integral_of_power(make_sim: SimFactory) -> None:
    sim, clock = make_sim("h100-8", seed=5)
    h = sim.nvmlDeviceGetHandleByIndex(2)
    clock.advance(100.0)
    start = sim.nvmlDeviceGetTotalEnergyConsumption(h)
    summed_mj = 0.0
    for _ in range(300):
        clock.advance(1.0)
        summed_mj += sim.nvmlDeviceGetPowerUsage(h)  # mean mW over the last second
    assert sim.nvmlDeviceGetTotalEnergyConsumption(h) - start == pytest.approx(summed_mj, rel=1e-3)


def test_temperature_follows_power(make_sim: SimFactory) -> None:
    sim, clock = make_sim("h100-8", "idle,gpu=0,at=0s,for=600s")
    h_idle = sim.nvmlDeviceGetHandleByIndex(0)
    clock.advance(300.0)
    idle_temp = sim.nvmlDeviceGetTemperature(h_idle, pynvml.NVML_TEMPERATURE_GPU)
    assert idle_temp == 41  # the capture's idle temperature
    assert sim.nvmlDeviceGetPowerUsage(h_idle) == 69_000  # the capture's idle draw
    busy_temps = [sim.nvmlDeviceGetTemperature(sim.nvmlDeviceGetHandleByIndex(i),
                                               pynvml.NVML_TEMPERATURE_GPU) for i in range(1, 8)]
    assert max(busy_temps) > idle_temp


def test_mig_gpus_refuse_utilisation_and_remapped_rows(make_sim: SimFactory) -> None:
    sim, _ = make_sim("h200-mig")
    parent = sim.nvmlDeviceGetHandleByIndex(0)
    mig = sim.nvmlDeviceGetMigDeviceHandleByIndex(parent, 0)
    for h in (parent, mig):
        calls: list[Callable[[Any], object]] = [
            sim.nvmlDeviceGetUtilizationRates, sim.nvmlDeviceGetEncoderUtilization,
            sim.nvmlDeviceGetDecoderUtilization, sim.nvmlDeviceGetRemappedRows]
        for call in calls:
            assert nvml_code(partial(call, h)) == pynvml.NVML_ERROR_NOT_SUPPORTED
    # Physical-GPU values are answered on the parent.
    assert sim.nvmlDeviceGetPowerUsage(parent) > 0
    assert sim.nvmlDeviceGetClockInfo(parent, pynvml.NVML_CLOCK_SM) > 0
    assert sim.nvmlDeviceGetTemperature(parent, pynvml.NVML_TEMPERATURE_GPU) > 0
    assert sim.nvmlDeviceGetTotalEnergyConsumption(parent) > 0
    # NVLink is not queryable on a GPU in MIG mode (the capture says so); on whole GPUs it is.
    entries = sim.nvmlDeviceGetFieldValues(parent, [(FI_NVLINK_TX, NVLINK_ALL), FI_MEMORY_TEMP])
    assert entries[0].nvmlReturn == pynvml.NVML_ERROR_NOT_SUPPORTED
    assert entries[1].nvmlReturn == pynvml.NVML_SUCCESS
    whole = sim.nvmlDeviceGetHandleByIndex(2)
    assert sim.nvmlDeviceGetUtilizationRates(whole).gpu >= 0
    assert sim.nvmlDeviceGetRemappedRows(whole) == (0, 0, 0, 0)


def test_field_values_fill_type_and_member(make_sim: SimFactory) -> None:
    sim, clock = make_sim("h100-8")
    clock.advance(30.0)
    h = sim.nvmlDeviceGetHandleByIndex(0)
    ids = [FI_MEMORY_TEMP, pynvml.NVML_FI_DEV_ECC_DBE_VOL_TOTAL,
           pynvml.NVML_FI_DEV_PERF_POLICY_THERMAL, (FI_NVLINK_TX, NVLINK_ALL),
           (FI_NVLINK_RX, 0), pynvml.NVML_FI_DEV_RETIRED_DBE, 100000]
    entries = sim.nvmlDeviceGetFieldValues(h, ids)
    assert len(entries) == len(ids)
    temp, dbe, thermal, tx, rx_link0, retired, bogus = entries
    assert (temp.fieldId, temp.nvmlReturn, temp.valueType) == (
        FI_MEMORY_TEMP, pynvml.NVML_SUCCESS, pynvml.NVML_VALUE_TYPE_UNSIGNED_INT)
    assert 40 <= temp.value.uiVal <= 70
    for entry in (dbe, thermal, tx, rx_link0):
        assert entry.nvmlReturn == pynvml.NVML_SUCCESS
        assert entry.valueType == pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG
    assert (tx.fieldId, tx.scopeId) == (FI_NVLINK_TX, NVLINK_ALL)
    assert 0 < rx_link0.value.ullVal < tx.value.ullVal
    # Page retirement is N/A on Hopper (row remapping replaced it).
    assert retired.nvmlReturn == pynvml.NVML_ERROR_NOT_SUPPORTED
    assert bogus.nvmlReturn == pynvml.NVML_ERROR_INVALID_ARGUMENT


def test_l4_omits_what_it_lacks(make_sim: SimFactory) -> None:
    sim, clock = make_sim("l4-1")
    clock.advance(10.0)
    h = sim.nvmlDeviceGetHandleByIndex(0)
    entries = sim.nvmlDeviceGetFieldValues(
        h, [FI_MEMORY_TEMP, (FI_NVLINK_TX, NVLINK_ALL), (FI_NVLINK_RX, NVLINK_ALL)])
    assert [e.nvmlReturn for e in entries] == [pynvml.NVML_ERROR_NOT_SUPPORTED] * 3
    assert sim.nvmlGpmQueryDeviceSupport(h).isSupportedDevice == 0
    assert sim.nvmlDeviceGetUtilizationRates(h).gpu >= 0
    assert sim.nvmlDeviceGetPowerManagementLimit(h) == 72_000


def test_memory_info_v1_counts_reserved_as_used(make_sim: SimFactory) -> None:
    sim, clock = make_sim("h100-8")
    clock.advance(5.0)
    h = sim.nvmlDeviceGetHandleByIndex(0)
    v1 = sim.nvmlDeviceGetMemoryInfo(h)
    v2 = sim.nvmlDeviceGetMemoryInfo(h, version=pynvml.nvmlMemory_v2)
    assert isinstance(v2, pynvml.c_nvmlMemory_v2_t)
    assert v1.used == v2.used + v2.reserved
    assert v1.free == v2.free

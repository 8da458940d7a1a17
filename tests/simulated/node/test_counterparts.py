"""The built-in node's answers behind the DCGM_FI_PROF_* counterparts: utilisation samples and
PCIe byte counters consistent with the board's activity, and the exporter serving them on
the profiles without GPM only."""

from __future__ import annotations

import itertools

import pynvml
import pytest

from exporter.devices.config import DeviceSettings
from exporter.devices.nvml import NvmlBackend
from exporter.fields.catalog import CATALOG
from exporter.simulated.node import SimNvml
from tests.simulated.node.conftest import SimFactory, nvml_code
from tests.support.clock import FakeClock

MIB = 1 << 20
COUNTERPARTS = {"DCGM_FI_PROF_GR_ENGINE_ACTIVE", "DCGM_FI_PROF_DRAM_ACTIVE",
                "DCGM_FI_PROF_PCIE_TX_BYTES", "DCGM_FI_PROF_PCIE_RX_BYTES",
                "DCGM_FI_PROF_NVLINK_TX_BYTES", "DCGM_FI_PROF_NVLINK_RX_BYTES"}


def test_samples_every_167_ms_agree_with_the_utilisation_rates(
        make_sim: SimFactory) -> None:
    sim, clock = make_sim("l4-1", seed=3)
    clock.advance(30.0)
    handle = sim.nvmlDeviceGetHandleByIndex(0)
    value_type, samples = sim.nvmlDeviceGetSamples(handle, pynvml.NVML_GPU_UTILIZATION_SAMPLES,
                                                   0)
    assert value_type == pynvml.NVML_VALUE_TYPE_UNSIGNED_INT
    stamps = [s.timeStamp for s in samples]
    assert len(stamps) == 120, "the buffer keeps the last 20 s"
    assert all(abs(b - a - 167_000) <= 1 for a, b in itertools.pairwise(stamps))
    # The six samples of the last second average to the 1 s utilisation NVML reports.
    last_second = [s.sampleValue.uiVal for s in samples[-6:]]
    rates = sim.nvmlDeviceGetUtilizationRates(handle)
    assert sum(last_second) / 6 == pytest.approx(rates.gpu, abs=1.0)
    assert nvml_code(lambda: sim.nvmlDeviceGetSamples(
        handle, pynvml.NVML_GPU_UTILIZATION_SAMPLES, stamps[-1])) == pynvml.NVML_ERROR_NOT_FOUND
    clock.advance(1.0)
    _, newer = sim.nvmlDeviceGetSamples(handle, pynvml.NVML_MEMORY_UTILIZATION_SAMPLES,
                                        stamps[-1])
    assert len(newer) == 6


def test_no_samples_under_mig(make_sim: SimFactory) -> None:
    sim, _ = make_sim("h200-mig")
    handle = sim.nvmlDeviceGetHandleByIndex(0)
    assert nvml_code(lambda: sim.nvmlDeviceGetSamples(
        handle, pynvml.NVML_GPU_UTILIZATION_SAMPLES, 0)) == pynvml.NVML_ERROR_NOT_SUPPORTED


def _pcie_bytes(sim: SimNvml, handle: object) -> tuple[int, int]:
    tx, rx = sim.nvmlDeviceGetFieldValues(handle, [(pynvml.NVML_FI_DEV_PCIE_COUNT_TX_BYTES, 0),
                                                   (pynvml.NVML_FI_DEV_PCIE_COUNT_RX_BYTES, 0)])
    assert tx.nvmlReturn == rx.nvmlReturn == pynvml.NVML_SUCCESS
    return tx.value.ullVal, rx.value.ullVal


def test_pcie_byte_counters_match_gpm_rates_over_the_same_interval(
        make_sim: SimFactory) -> None:
    sim, clock = make_sim("h100-8", seed=5)
    handle = sim.nvmlDeviceGetHandleByIndex(1)
    clock.advance(20.0)
    first, second = sim.nvmlGpmSampleAlloc(), sim.nvmlGpmSampleAlloc()
    sim.nvmlGpmSampleGet(handle, first)
    tx0, rx0 = _pcie_bytes(sim, handle)
    clock.advance(10.0)
    sim.nvmlGpmSampleGet(handle, second)
    tx1, rx1 = _pcie_bytes(sim, handle)
    request = pynvml.c_nvmlGpmMetricsGet_t()
    request.version = pynvml.NVML_GPM_METRICS_GET_VERSION
    request.numMetrics = 2
    request.sample1, request.sample2 = first, second
    request.metrics[0].metricId = pynvml.NVML_GPM_METRIC_PCIE_TX_PER_SEC
    request.metrics[1].metricId = pynvml.NVML_GPM_METRIC_PCIE_RX_PER_SEC
    sim.nvmlGpmMetricsGet(request)
    assert (tx1 - tx0) / 10.0 == pytest.approx(request.metrics[0].value * MIB, rel=1e-6)
    assert (rx1 - rx0) / 10.0 == pytest.approx(request.metrics[1].value * MIB, rel=1e-6)
    assert tx1 > tx0
    assert rx1 > rx0


def _poll_twice(profile: str, on: bool = True) -> tuple[dict[tuple[int, int], dict[str, float]],
                                                        SimNvml]:
    clock = FakeClock()
    sim = SimNvml(profile, seed=7, clock=clock)
    backend = NvmlBackend(sim, CATALOG, DeviceSettings(prof_counterparts=on), clock=clock,
                          wall_clock=clock)
    backend.start()
    backend.poll()
    clock.advance(5.0)
    return backend.poll().values, sim


@pytest.mark.parametrize("profile", ["l4-1", "a100-timesliced"])
def test_counterparts_served_where_there_is_no_gpm(profile: str) -> None:
    values, sim = _poll_twice(profile)
    for key, fields in values.items():
        prof = {name for name in fields if name.startswith("DCGM_FI_PROF_")}
        nvlink = {"DCGM_FI_PROF_NVLINK_TX_BYTES", "DCGM_FI_PROF_NVLINK_RX_BYTES"}
        expected = COUNTERPARTS if profile.startswith("a100") else COUNTERPARTS - nvlink
        assert prof == expected, (profile, key)
        assert 0.0 <= fields["DCGM_FI_PROF_GR_ENGINE_ACTIVE"] <= 1.0, (profile, key)
        # the GPU busy: the sampled share of time tracks NVML's 1 s utilisation
        assert fields["DCGM_FI_PROF_GR_ENGINE_ACTIVE"] == pytest.approx(
            fields["DCGM_FI_DEV_GPU_UTIL"] / 100, abs=0.25), (profile, key)
    assert sim.calls["nvmlDeviceGetSamples"] > 0


def test_none_with_the_switch_off() -> None:
    values, sim = _poll_twice("l4-1", on=False)
    assert not [n for fields in values.values() for n in fields if n.startswith("DCGM_FI_PROF")]
    assert sim.calls["nvmlDeviceGetSamples"] == 0


def test_gpm_wins_on_hopper() -> None:
    values, sim = _poll_twice("h100-8")
    assert all("DCGM_FI_PROF_SM_ACTIVE" in fields for fields in values.values())
    assert sim.calls["nvmlDeviceGetSamples"] == 0, "no counterpart read where GPM answers"
    assert values == _poll_twice("h100-8", on=False)[0]

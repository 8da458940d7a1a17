"""GPM through pynvml's own structs: sample buffers, scopes, the 100 ms rule, support."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pynvml
import pytest

from exporter.simulated.node import SimNvml
from tests.simulated.node.conftest import SimFactory, nvml_code
from tests.support.clock import FakeClock

UTIL_METRICS = (
    pynvml.NVML_GPM_METRIC_GRAPHICS_UTIL,
    pynvml.NVML_GPM_METRIC_SM_UTIL,
    pynvml.NVML_GPM_METRIC_SM_OCCUPANCY,
    pynvml.NVML_GPM_METRIC_ANY_TENSOR_UTIL,
    pynvml.NVML_GPM_METRIC_DRAM_BW_UTIL,
    pynvml.NVML_GPM_METRIC_FP64_UTIL,
    pynvml.NVML_GPM_METRIC_FP32_UTIL,
    pynvml.NVML_GPM_METRIC_FP16_UTIL,
)
RATE_METRICS = (
    pynvml.NVML_GPM_METRIC_PCIE_TX_PER_SEC,
    pynvml.NVML_GPM_METRIC_PCIE_RX_PER_SEC,
    pynvml.NVML_GPM_METRIC_NVLINK_TOTAL_RX_PER_SEC,
    pynvml.NVML_GPM_METRIC_NVLINK_TOTAL_TX_PER_SEC,
)


def _request(first: Any, second: Any, metric_ids: Sequence[int]) -> Any:
    request = pynvml.c_nvmlGpmMetricsGet_t()
    request.version = pynvml.NVML_GPM_METRICS_GET_VERSION
    request.numMetrics = len(metric_ids)
    request.sample1 = first
    request.sample2 = second
    for i, metric_id in enumerate(metric_ids):
        request.metrics[i].metricId = metric_id
    return request


def _measure(sim: SimNvml, clock: FakeClock, take: Any, gap: float,
             metric_ids: Sequence[int]) -> dict[int, tuple[int, float]]:
    """Two samples `gap` seconds apart -> {metric id: (nvmlReturn, value)}."""
    first, second = sim.nvmlGpmSampleAlloc(), sim.nvmlGpmSampleAlloc()
    try:
        take(first)
        clock.advance(gap)
        take(second)
        request = sim.nvmlGpmMetricsGet(_request(first, second, metric_ids))
        return {int(request.metrics[i].metricId): (int(request.metrics[i].nvmlReturn),
                                                   float(request.metrics[i].value))
                for i in range(len(metric_ids))}
    finally:
        sim.nvmlGpmSampleFree(first)
        sim.nvmlGpmSampleFree(second)


def test_whole_gpu_metrics_in_range(make_sim: SimFactory) -> None:
    sim, clock = make_sim("h100-8")
    h = sim.nvmlDeviceGetHandleByIndex(1)
    assert sim.nvmlGpmQueryDeviceSupport(h).isSupportedDevice == 1
    seen: set[float] = set()
    for _ in range(10):
        clock.advance(17.0)
        got = _measure(sim, clock, lambda s: sim.nvmlGpmSampleGet(h, s), 1.0,
                       UTIL_METRICS + RATE_METRICS)
        for metric_id in UTIL_METRICS:
            code, value = got[metric_id]
            assert code == pynvml.NVML_SUCCESS
            assert 0.0 <= value <= 100.0
        for metric_id in RATE_METRICS:
            code, value = got[metric_id]
            assert code == pynvml.NVML_SUCCESS
            assert 0.0 <= value < 1e6  # MiB/s
        seen.add(got[pynvml.NVML_GPM_METRIC_GRAPHICS_UTIL][1])
        # SM activity cannot exceed graphics-engine activity.
        assert got[pynvml.NVML_GPM_METRIC_SM_UTIL][1] <= \
            got[pynvml.NVML_GPM_METRIC_GRAPHICS_UTIL][1]
    assert len(seen) == 10


def test_samples_closer_than_100ms_are_refused(make_sim: SimFactory) -> None:
    sim, clock = make_sim("h100-8")
    h = sim.nvmlDeviceGetHandleByIndex(0)
    first, second = sim.nvmlGpmSampleAlloc(), sim.nvmlGpmSampleAlloc()
    sim.nvmlGpmSampleGet(h, first)
    clock.advance(0.05)
    sim.nvmlGpmSampleGet(h, second)
    request = _request(first, second, [pynvml.NVML_GPM_METRIC_SM_UTIL])
    assert nvml_code(lambda: sim.nvmlGpmMetricsGet(request)) == \
        pynvml.NVML_ERROR_INVALID_ARGUMENT
    clock.advance(0.1)
    sim.nvmlGpmSampleGet(h, second)
    assert sim.nvmlGpmMetricsGet(request).metrics[0].nvmlReturn == pynvml.NVML_SUCCESS


def test_unfilled_freed_and_mismatched_samples_are_refused(make_sim: SimFactory) -> None:
    sim, clock = make_sim("h100-8")
    h0, h1 = sim.nvmlDeviceGetHandleByIndex(0), sim.nvmlDeviceGetHandleByIndex(1)
    first, second = sim.nvmlGpmSampleAlloc(), sim.nvmlGpmSampleAlloc()
    sim.nvmlGpmSampleGet(h0, first)
    clock.advance(1.0)
    request = _request(first, second, [pynvml.NVML_GPM_METRIC_SM_UTIL])
    assert nvml_code(lambda: sim.nvmlGpmMetricsGet(request)) == \
        pynvml.NVML_ERROR_INVALID_ARGUMENT  # second never sampled
    sim.nvmlGpmSampleGet(h1, second)
    assert nvml_code(lambda: sim.nvmlGpmMetricsGet(request)) == \
        pynvml.NVML_ERROR_INVALID_ARGUMENT  # two different GPUs
    sim.nvmlGpmSampleFree(second)
    assert nvml_code(lambda: sim.nvmlGpmSampleGet(h0, second)) == \
        pynvml.NVML_ERROR_INVALID_ARGUMENT


def test_unmodelled_metric_fails_alone(make_sim: SimFactory) -> None:
    sim, clock = make_sim("h100-8")
    h = sim.nvmlDeviceGetHandleByIndex(0)
    got = _measure(sim, clock, lambda s: sim.nvmlGpmSampleGet(h, s), 1.0,
                   [pynvml.NVML_GPM_METRIC_C2C_TOTAL_TX_PER_SEC, pynvml.NVML_GPM_METRIC_SM_UTIL])
    # No C2C link on an H100 SXM board.
    assert got[pynvml.NVML_GPM_METRIC_C2C_TOTAL_TX_PER_SEC][0] == pynvml.NVML_ERROR_NOT_SUPPORTED
    assert got[pynvml.NVML_GPM_METRIC_SM_UTIL][0] == pynvml.NVML_SUCCESS


@pytest.mark.parametrize("profile", ["a100-timesliced", "l4-1"])
def test_pre_hopper_has_no_gpm(make_sim: SimFactory, profile: str) -> None:
    sim, _ = make_sim(profile)
    h = sim.nvmlDeviceGetHandleByIndex(0)
    assert sim.nvmlGpmQueryDeviceSupport(h).isSupportedDevice == 0
    sample = sim.nvmlGpmSampleAlloc()
    assert nvml_code(lambda: sim.nvmlGpmSampleGet(h, sample)) == \
        pynvml.NVML_ERROR_NOT_SUPPORTED


def test_mig_scopes(make_sim: SimFactory) -> None:
    sim, clock = make_sim("h200-mig", "idle,gpu=0,at=0s,gi=3")
    parent = sim.nvmlDeviceGetHandleByIndex(0)
    ci0 = sim.nvmlDeviceGetMigDeviceHandleByIndex(parent, 0)
    ids = [pynvml.NVML_GPM_METRIC_GRAPHICS_UTIL, pynvml.NVML_GPM_METRIC_PCIE_TX_PER_SEC,
           pynvml.NVML_GPM_METRIC_NVLINK_TOTAL_TX_PER_SEC]
    clock.advance(60.0)
    gi2 = _measure(sim, clock, lambda s: sim.nvmlGpmMigSampleGet(parent, 2, s), 2.0, ids)
    gi3 = _measure(sim, clock, lambda s: sim.nvmlGpmMigSampleGet(parent, 3, s), 2.0, ids)
    ci = _measure(sim, clock, lambda s: sim.nvmlGpmSampleGet(ci0, s), 2.0, ids)
    graphics = pynvml.NVML_GPM_METRIC_GRAPHICS_UTIL
    assert gi2[graphics][0] == ci[graphics][0] == pynvml.NVML_SUCCESS
    assert 0.0 < gi2[graphics][1] <= 100.0
    assert 0.0 < ci[graphics][1] <= 100.0
    # GPU instance 3 is idle by fault: allocated but doing nothing.
    assert gi3[graphics] == (pynvml.NVML_SUCCESS, 0.0)
    # No NVLink in MIG mode.
    nvlink = pynvml.NVML_GPM_METRIC_NVLINK_TOTAL_TX_PER_SEC
    assert gi2[nvlink][0] == pynvml.NVML_ERROR_NOT_SUPPORTED
    assert nvml_code(lambda: sim.nvmlGpmMigSampleGet(parent, 4, sim.nvmlGpmSampleAlloc())) == \
        pynvml.NVML_ERROR_INVALID_ARGUMENT
    whole = sim.nvmlDeviceGetHandleByIndex(3)
    assert nvml_code(lambda: sim.nvmlGpmMigSampleGet(whole, 2, sim.nvmlGpmSampleAlloc())) == \
        pynvml.NVML_ERROR_INVALID_ARGUMENT


def test_gpm_activity_agrees_with_utilisation(make_sim: SimFactory) -> None:
    sim, clock = make_sim("h100-8", seed=11)
    for index in range(8):
        h = sim.nvmlDeviceGetHandleByIndex(index)
        clock.advance(23.0)
        got = _measure(sim, clock, lambda s, h=h: sim.nvmlGpmSampleGet(h, s), 1.0,
                       [pynvml.NVML_GPM_METRIC_GRAPHICS_UTIL])
        gpu_util = sim.nvmlDeviceGetUtilizationRates(h).gpu
        # NVML's utilisation (any kernel running) is never below engine activity.
        assert gpu_util + 1 >= min(100.0, got[pynvml.NVML_GPM_METRIC_GRAPHICS_UTIL][1])


def test_profiling_restricted_to_admins_refuses_sampling_only(make_sim: SimFactory) -> None:
    # RmProfilingAdminOnly=1: GPM is still reported as supported; every sample is refused.
    sim, _clock = make_sim("h200-mig", "gpm-admin-only")
    sample = sim.nvmlGpmSampleAlloc()
    try:
        for index in (0, 2):  # a MIG-enabled GPU and a whole one
            handle = sim.nvmlDeviceGetHandleByIndex(index)
            assert sim.nvmlGpmQueryDeviceSupport(handle).isSupportedDevice == 1
        whole = sim.nvmlDeviceGetHandleByIndex(2)
        assert nvml_code(lambda: sim.nvmlGpmSampleGet(whole, sample)) == \
            pynvml.NVML_ERROR_NO_PERMISSION
        mig = sim.nvmlDeviceGetHandleByIndex(0)
        gi = sim.nvmlDeviceGetGpuInstanceId(sim.nvmlDeviceGetMigDeviceHandleByIndex(mig, 0))
        assert nvml_code(lambda: sim.nvmlGpmMigSampleGet(mig, gi, sample)) == \
            pynvml.NVML_ERROR_NO_PERMISSION
    finally:
        sim.nvmlGpmSampleFree(sample)

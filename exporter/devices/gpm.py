"""Profiling metrics from NVML's GPM API (Hopper and newer), per GPU or MIG GPU instance.

GPM values are rates between two samples, so each entity keeps two sample buffers that swap
roles every cycle; the first cycle after (re)start yields nothing.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import pynvml

from exporter.devices.nvml_api import NVML_GPM_METRICS_GET_VERSION, NVML_SUCCESS, Handle, NvmlLib

MIN_SAMPLE_GAP_S = 0.1
"""NVML refuses to compute metrics from samples taken closer together than this."""


@dataclass(slots=True)
class _Buffers:
    previous: Any
    current: Any
    taken_at: float | None = None
    last: tuple[dict[int, float], dict[int, int]] = ({}, {})
    """The last computed rates, repeated when a poll comes too soon for a new sample."""


class GpmReader:
    """Owns the GPM sample buffers of every entity and reads metrics in one call each."""

    def __init__(self, lib: NvmlLib, clock: Callable[[], float] = time.monotonic) -> None:
        self._lib = lib
        self._clock = clock
        self._buffers: dict[tuple[int, int], _Buffers] = {}

    def _buffers_for(self, key: tuple[int, int]) -> _Buffers:
        buffers = self._buffers.get(key)
        if buffers is None:
            buffers = _Buffers(self._lib.nvmlGpmSampleAlloc(), self._lib.nvmlGpmSampleAlloc())
            self._buffers[key] = buffers
        return buffers

    def read(
        self,
        key: tuple[int, int],
        parent: Handle,
        gpu_instance_id: int | None,
        metric_ids: Sequence[int],
    ) -> tuple[dict[int, float], dict[int, int]]:
        """Metric values by id and failed ids by return code; empty on the first sample.

        NVML errors from the sampling calls propagate to the caller.
        """
        buffers = self._buffers_for(key)
        now = self._clock()
        if buffers.taken_at is not None and now - buffers.taken_at < MIN_SAMPLE_GAP_S:
            return buffers.last
        if gpu_instance_id is None:
            self._lib.nvmlGpmSampleGet(parent, buffers.current)
        else:
            self._lib.nvmlGpmMigSampleGet(parent, gpu_instance_id, buffers.current)
        first = buffers.taken_at is None
        buffers.taken_at = now
        if first:
            buffers.previous, buffers.current = buffers.current, buffers.previous
            return {}, {}
        request = pynvml.c_nvmlGpmMetricsGet_t()
        request.version = NVML_GPM_METRICS_GET_VERSION
        request.numMetrics = len(metric_ids)
        request.sample1 = buffers.previous
        request.sample2 = buffers.current
        for i, metric_id in enumerate(metric_ids):
            request.metrics[i].metricId = metric_id
        buffers.previous, buffers.current = buffers.current, buffers.previous
        self._lib.nvmlGpmMetricsGet(request)
        values: dict[int, float] = {}
        failed: dict[int, int] = {}
        for i in range(len(metric_ids)):
            metric = request.metrics[i]
            code = int(metric.nvmlReturn)
            if code == NVML_SUCCESS:
                values[int(metric.metricId)] = float(metric.value)
            else:
                failed[int(metric.metricId)] = code
        buffers.last = (values, failed)
        return values, failed

    def forget(self, keep: set[tuple[int, int]] | None = None) -> None:
        """Free the buffers of entities not in `keep` (all when None), e.g. after
        re-enumeration, so a reused handle never pairs samples of two different devices."""
        for key in list(self._buffers):
            if keep is not None and key in keep:
                continue
            buffers = self._buffers.pop(key)
            for sample in (buffers.previous, buffers.current):
                # Freeing must never break a poll.
                with contextlib.suppress(Exception):
                    self._lib.nvmlGpmSampleFree(sample)

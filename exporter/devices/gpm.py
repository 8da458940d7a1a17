"""Profiling metrics from NVML's GPM API (Hopper and newer), per GPU or MIG GPU instance.

GPM values are rates between two samples, so each entity keeps two sample buffers that swap
roles every cycle; the first cycle after (re)start yields nothing. The metrics request is
allocated once per entity and its results are read through a plain ctypes view, since
pynvml's structs convert every attribute access.
"""

from __future__ import annotations

import contextlib
import ctypes
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import Any

import pynvml

from exporter.devices.enumerate import Enumeration
from exporter.devices.errors import describe, is_nvml_error, nvml_code
from exporter.devices.model import EntityKey, GpmSupport
from exporter.devices.nvml_api import (
    NVML_ERROR_NO_PERMISSION,
    NVML_GPM_METRICS_GET_VERSION,
    UNSUPPORTED_CODES,
    Handle,
    NvmlLib,
)

MIN_SAMPLE_GAP_S = 0.1
"""NVML refuses to compute metrics from samples taken closer together than this."""


class GpmMetric(ctypes.Structure):
    """NVML's `nvmlGpmMetric_t` struct as plain ctypes (a test checks its layout against
    pynvml's)."""

    _fields_ = [("metricId", ctypes.c_uint), ("nvmlReturn", ctypes.c_uint),
                ("value", ctypes.c_double), ("info", ctypes.c_void_p * 3)]


_METRICS_OFFSET = pynvml.c_nvmlGpmMetricsGet_t.metrics.offset

Rates = tuple[dict[int, float], dict[int, int]]


@dataclass(slots=True)
class _Entity:
    previous: Any
    current: Any
    request: Any
    view: Any
    metric_ids: tuple[int, ...]
    taken_at: float | None = None
    last: Rates = ({}, {})
    """The last computed rates, repeated when a poll comes too soon for a new sample."""


def _request(metric_ids: Sequence[int]) -> tuple[Any, Any]:
    request = pynvml.c_nvmlGpmMetricsGet_t()
    request.version = NVML_GPM_METRICS_GET_VERSION
    request.numMetrics = len(metric_ids)
    view = (GpmMetric * len(metric_ids)).from_buffer(request, _METRICS_OFFSET)
    for i, metric_id in enumerate(metric_ids):
        view[i].metricId = metric_id
    return request, view


class GpmReader:
    """Owns the GPM sample buffers of every entity and reads metrics in one call each."""

    def __init__(self, lib: NvmlLib, clock: Callable[[], float] = time.monotonic) -> None:
        self._lib = lib
        self._clock = clock
        self._entities: dict[EntityKey, _Entity] = {}

    def _entity(self, key: EntityKey, metric_ids: Sequence[int]) -> _Entity:
        state = self._entities.get(key)
        if state is None:
            request, view = _request(metric_ids)
            state = _Entity(self._lib.nvmlGpmSampleAlloc(), self._lib.nvmlGpmSampleAlloc(),
                            request, view, tuple(metric_ids))
            self._entities[key] = state
        elif state.metric_ids != tuple(metric_ids):
            state.request, state.view = _request(metric_ids)
            state.metric_ids = tuple(metric_ids)
        return state

    def read(
        self,
        key: EntityKey,
        parent: Handle,
        gpu_instance_id: int | None,
        metric_ids: Sequence[int],
    ) -> Rates:
        """Return the metric values by id and the failed ids by return code; both are empty on
        the first sample.

        NVML errors from the sampling calls propagate to the caller."""
        state = self._entity(key, metric_ids)
        now = self._clock()
        if state.taken_at is not None and now - state.taken_at < MIN_SAMPLE_GAP_S:
            return state.last
        if gpu_instance_id is None:
            self._lib.nvmlGpmSampleGet(parent, state.current)
        else:
            self._lib.nvmlGpmMigSampleGet(parent, gpu_instance_id, state.current)
        first = state.taken_at is None
        state.taken_at = now
        previous, current = state.previous, state.current
        state.previous, state.current = current, previous
        if first:
            return state.last
        request = state.request
        request.sample1 = previous
        request.sample2 = current
        self._lib.nvmlGpmMetricsGet(request)
        values: dict[int, float] = {}
        failed: dict[int, int] = {}
        for metric in state.view:
            if metric.nvmlReturn:
                failed[metric.metricId] = metric.nvmlReturn
            else:
                values[metric.metricId] = metric.value
        state.last = (values, failed)
        return state.last

    def forget(self) -> None:
        """Free every buffer, e.g. after re-enumeration, so a reused handle never pairs
        samples of two different devices."""
        self.keep_only(())

    def keep_only(self, keys: Collection[EntityKey]) -> None:
        """Free the buffers of every entity not in `keys` (no longer read), so that reading
        it again later starts a fresh pair rather than one spanning the gap."""
        for key in [k for k in self._entities if k not in keys]:
            state = self._entities.pop(key)
            for sample in (state.previous, state.current):
                # Freeing must never break a poll.
                with contextlib.suppress(Exception):
                    self._lib.nvmlGpmSampleFree(sample)


def probe(lib: NvmlLib, handle: Handle, gpu_instance_id: int | None = None) -> GpmSupport:
    """Return whether GPM answers on a GPU (with MIG, on one of its GPU instances): "supported",
    "unsupported", or "no_permission". One sample is taken, because a driver that restricts
    profiling to administrators still reports GPM support and refuses only the sampling. Other
    NVML errors propagate."""
    try:
        if not lib.nvmlGpmQueryDeviceSupport(handle).isSupportedDevice:
            return "unsupported"
        sample = lib.nvmlGpmSampleAlloc()
        try:
            if gpu_instance_id is None:
                lib.nvmlGpmSampleGet(handle, sample)
            else:
                lib.nvmlGpmMigSampleGet(handle, gpu_instance_id, sample)
        finally:
            with contextlib.suppress(Exception):
                lib.nvmlGpmSampleFree(sample)
    except Exception as exc:
        if not is_nvml_error(exc):
            raise
        if nvml_code(exc) == NVML_ERROR_NO_PERMISSION:
            return "no_permission"
        if nvml_code(exc) in UNSUPPORTED_CODES:
            return "unsupported"
        raise
    return "supported"


def probe_gpus(lib: NvmlLib, enum: Enumeration) -> dict[int, str]:
    """Return what `probe` answers on every enumerated GPU (with MIG, on its first GPU instance),
    by GPU index; an NVML error that means neither "unsupported" nor "no permission" is described
    instead."""
    found: dict[int, str] = {}
    for index, handle in sorted(enum.handles.gpu.items()):
        instances = sorted(gi for gpu, gi in enum.handles.instance if gpu == index)
        try:
            found[index] = probe(lib, handle, instances[0] if instances else None)
        except Exception as exc:
            if not is_nvml_error(exc):
                raise
            found[index] = describe(exc)
    return found

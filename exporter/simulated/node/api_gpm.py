"""The simulated node's GPM: sample buffers, metrics, and the scopes of a GPU, a GPU instance
and a compute instance."""

from __future__ import annotations

import ctypes
from typing import Any

import pynvml

from exporter.simulated.node.boards import BOARD_FIGURES
from exporter.simulated.node.core import (
    GpuEntry,
    Handle,
    MigEntry,
    SampleEntry,
    SimCore,
    address_of,
    fail,
)
from exporter.simulated.node.dynamics import GPM_UTIL_SHARES, Scope, gpm_metric
from exporter.simulated.node.fault_specs import GpmAdminOnlyFault

_MIN_GPM_GAP_S = 0.1


class GpmCalls(SimCore):
    """The simulated node's GPM calls: support, sample buffers and metrics."""

    def nvmlGpmQueryDeviceSupport(self, handle: Handle) -> Any:
        """Return whether the GPU's board supports GPM, in pynvml's support struct."""
        with self._lock:
            t = self._begin("nvmlGpmQueryDeviceSupport")
            device = self._resolve(handle, t)
            gpu = device if isinstance(device, GpuEntry) else device.gpu
            support = pynvml.c_nvmlGpmSupport_t()
            support.version = pynvml.NVML_GPM_SUPPORT_VERSION
            support.isSupportedDevice = int(gpu.spec.board.gpm)
            return support

    def nvmlGpmSampleAlloc(self) -> Any:
        """Allocate an empty GPM sample buffer and return its handle."""
        with self._lock:
            self._begin("nvmlGpmSampleAlloc")
            address = self._new_address()
            self._samples[address] = None
            return ctypes.cast(ctypes.c_void_p(address), pynvml.c_nvmlGpmSample_t)

    def nvmlGpmSampleFree(self, sample: Any) -> None:
        """Free the GPM sample buffer; an unknown one answers INVALID_ARGUMENT."""
        with self._lock:
            self._begin("nvmlGpmSampleFree")
            self._free(self._samples, sample)

    def _take_sample(self, gpu: GpuEntry, scope: Scope, sample: Any, t: float) -> Any:
        if not gpu.spec.board.gpm:
            fail(pynvml.NVML_ERROR_NOT_SUPPORTED)
        if any(isinstance(f, GpmAdminOnlyFault) for f in self.faults):
            fail(pynvml.NVML_ERROR_NO_PERMISSION)
        address = address_of(sample)
        if address is None or address not in self._samples:
            fail(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        self._samples[address] = SampleEntry(gpu.index, scope, t,
                                         gpu.dyn.activity_integral(0.0, t, scope))
        return sample

    def nvmlGpmSampleGet(self, handle: Handle, sample: Any) -> Any:
        """Sample the whole GPU for a GPU handle, its compute instance for a MIG device handle."""
        with self._lock:
            t = self._begin("nvmlGpmSampleGet")
            device = self._resolve(handle, t)
            if isinstance(device, MigEntry):
                return self._take_sample(device.gpu, (device.gi.gi_id, device.ci.ci_id),
                                         sample, t)
            return self._take_sample(device, (), sample, t)

    def nvmlGpmMigSampleGet(self, handle: Handle, gpu_instance_id: int, sample: Any) -> Any:
        """Take a GPM sample of one GPU instance into the buffer; a GPU without GPM answers
        NOT_SUPPORTED, and an instance the GPU does not have answers INVALID_ARGUMENT."""
        with self._lock:
            t = self._begin("nvmlGpmMigSampleGet")
            gpu = self._physical(handle, t)
            if not gpu.spec.board.gpm:
                fail(pynvml.NVML_ERROR_NOT_SUPPORTED)
            if not gpu.mig_on or not gpu.dyn.has_scope((gpu_instance_id,)):
                fail(pynvml.NVML_ERROR_INVALID_ARGUMENT)
            return self._take_sample(gpu, (gpu_instance_id,), sample, t)

    def nvmlGpmMetricsGet(self, metrics_get: Any) -> Any:
        """Fill in the requested GPM metrics from the two samples, checking the struct's version and
        metric count as NVML does."""
        with self._lock:
            self._begin("nvmlGpmMetricsGet")
            if metrics_get.version != pynvml.NVML_GPM_METRICS_GET_VERSION:
                fail(pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH)
            count = int(metrics_get.numMetrics)
            if not 0 < count <= pynvml.NVML_GPM_METRIC_MAX:
                fail(pynvml.NVML_ERROR_INVALID_ARGUMENT)
            first = self._samples.get(address_of(metrics_get.sample1) or 0)
            second = self._samples.get(address_of(metrics_get.sample2) or 0)
            if first is None or second is None:
                fail(pynvml.NVML_ERROR_INVALID_ARGUMENT)
            if (first.gpu, first.scope) != (second.gpu, second.scope):
                fail(pynvml.NVML_ERROR_INVALID_ARGUMENT)
            early, late = sorted((first, second), key=lambda s: s.t)
            span = late.t - early.t
            if span < _MIN_GPM_GAP_S:
                fail(pynvml.NVML_ERROR_INVALID_ARGUMENT)
            gpu = self._gpus[late.gpu]
            board = gpu.spec.board
            mean = max(0.0, min(1.0, (late.activity - early.activity) / span))
            weight = gpu.dyn.scope_weight(late.scope)
            nvlink = board.nvlink_links > 0 and not gpu.mig_on
            figures = BOARD_FIGURES[board.name]
            engines = (figures.nvdec, figures.nvjpg, figures.nvofa)
            for i in range(count):
                metric = metrics_get.metrics[i]
                value = gpm_metric(board.pcie_peak_mib_s, board.nvlink_peak_gib_s,
                                   int(metric.metricId), mean, weight, nvlink,
                                   engines, board.nvlink_links)
                if value is None:
                    metric.nvmlReturn = pynvml.NVML_ERROR_NOT_SUPPORTED
                    metric.value = 0.0
                else:
                    metric.nvmlReturn = pynvml.NVML_SUCCESS
                    metric.value = value
            return metrics_get


GPM_METRIC_IDS = tuple(sorted({*GPM_UTIL_SHARES, 20, 21, 60, 61, *range(62, 98),
                               *range(30, 38), *range(40, 48), 50, 51}))
"""GPM metric ids the simulation answers."""

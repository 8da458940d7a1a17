"""Running compute processes and their utilisation samples (the time-sliced GPUs' tenants)."""

from __future__ import annotations

import math
from typing import Any

import pynvml

from exporter.simulated.node.core import NOT_AVAILABLE, GpuEntry, Handle, SimCore, fail
from exporter.simulated.node.process_table import (
    SAMPLE_PERIOD_S,
    last_sample_time,
    process_memory_bytes,
)


class ProcessCalls(SimCore):
    """pynvml's process calls with pynvml's return shapes: friendly objects for the process
    list, `c_nvmlProcessUtilizationSample_t` structs for the samples."""

    def nvmlDeviceGetComputeRunningProcesses(self, handle: Handle) -> list[Any]:
        """Return the compute processes running on the GPU with the memory each holds; MIG devices
        and GPUs without simulated processes have none."""
        with self._lock:
            t = self._begin("nvmlDeviceGetComputeRunningProcesses")
            device = self._resolve(handle, t)
            # MIG devices and GPUs without modelled processes run none.
            if not isinstance(device, GpuEntry) or not self._running(device.index, t):
                return []
            used = device.dyn.memory_bytes(t)[3]
            out = []
            for proc in self._running(device.index, t):
                info = pynvml.c_nvmlProcessInfo_v3_t()
                info.pid = proc.pid
                info.usedGpuMemory = process_memory_bytes(used, proc.memory_share)
                info.gpuInstanceId = info.computeInstanceId = NOT_AVAILABLE  # MIG off
                out.append(pynvml.nvmlStructToFriendlyObject(info))
            return out

    def nvmlDeviceGetMPSComputeRunningProcesses_v3(self, handle: Handle) -> list[Any]:
        """Return no process: the simulated node runs no MPS control daemon (its tenants take
        turns by time-slicing), so no GPU has MPS clients to list."""
        with self._lock:
            t = self._begin("nvmlDeviceGetMPSComputeRunningProcesses_v3")
            self._resolve(handle, t)
            return []

    def nvmlDeviceGetProcessUtilization(self, handle: Handle, timeStamp: int) -> list[Any]:
        """Return one sample per process busy in NVML's latest sampling period, stamped with that
        sample's CPU time (µs); NOT_FOUND when there is none newer than `timeStamp`."""
        with self._lock:
            t = self._begin("nvmlDeviceGetProcessUtilization")
            gpu = self._no_mig(handle, t)
            at = last_sample_time(t)
            stamp = int((self._wall0 + at) * 1e6)
            if stamp <= timeStamp:
                fail(pynvml.NVML_ERROR_NOT_FOUND)
            gpu_pct, mem_pct = gpu.dyn.utilization_pct(at, SAMPLE_PERIOD_S)
            enc_pct, dec_pct = gpu.dyn.encoder_util(at), gpu.dyn.decoder_util(at)
            samples = []
            for proc in self._running(gpu.index, at):
                # Each process is busy for its share of the GPU's busy time; rounding down
                # keeps the sum within the device's own utilisation.
                sample = pynvml.c_nvmlProcessUtilizationSample_t()
                sample.pid, sample.timeStamp = proc.pid, stamp
                sample.smUtil, sample.memUtil, sample.encUtil, sample.decUtil = (
                    math.floor(pct * proc.busy_share)
                    for pct in (gpu_pct, mem_pct, enc_pct, dec_pct))
                if sample.smUtil or sample.memUtil or sample.encUtil or sample.decUtil:
                    samples.append(sample)
            if not samples:  # NVML lists only processes busy in the period
                fail(pynvml.NVML_ERROR_NOT_FOUND)
            return samples

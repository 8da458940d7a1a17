"""Device values: clocks, power, temperatures, utilisation, memory, field values."""

from __future__ import annotations

from typing import Any

import pynvml

from exporter.simulated.node.core import NOT_AVAILABLE, GpuEntry, Handle, MigEntry, SimCore, fail
from exporter.simulated.node.field_values import other_field_value

_SAMPLING_PERIOD_US = 167000
_SAMPLE_PERIOD_S = _SAMPLING_PERIOD_US / 1e6
"""The driver's utilisation samples: one every 1/6 s, each the share of that period."""
_SAMPLE_BUFFER = 120
"""Samples the driver keeps (20 s); older ones are gone."""
_UTILIZATION_SAMPLES = {pynvml.NVML_GPU_UTILIZATION_SAMPLES: 0,
                        pynvml.NVML_MEMORY_UTILIZATION_SAMPLES: 1}

_FI_ECC_SBE_VOL, _FI_ECC_DBE_VOL, _FI_ECC_SBE_AGG, _FI_ECC_DBE_AGG = 3, 4, 5, 6
_FI_VIOLATION = {74: "power", 75: "thermal", 76: "sync-boost", 77: "board-limit",
                 78: "low-util", 79: "reliability"}
_FI_MEMORY_TEMP = 82
_FI_NVLINK = {138: "tx", 139: "rx"}


class ValueCalls(SimCore):
    """The simulated node's device values; the calls about a physical GPU refuse MIG device
    handles."""

    def nvmlDeviceGetClockInfo(self, handle: Handle, clock_type: int) -> int:
        """Return the GPU's current clock of this type, in MHz."""
        with self._lock:
            t = self._begin("nvmlDeviceGetClockInfo")
            dyn = self._physical(handle, t).dyn
            if clock_type in (pynvml.NVML_CLOCK_GRAPHICS, pynvml.NVML_CLOCK_SM):
                return dyn.sm_clock_mhz(t)
            if clock_type == pynvml.NVML_CLOCK_MEM:
                return dyn.mem_clock_mhz(t)
            if clock_type == pynvml.NVML_CLOCK_VIDEO:
                # The capture: 765 MHz idle, 1545 MHz at the 1980 MHz SM clock.
                return max(765, dyn.sm_clock_mhz(t) * 1545 // 1980)
            fail(pynvml.NVML_ERROR_INVALID_ARGUMENT)

    def nvmlDeviceGetTemperature(self, handle: Handle, sensor: int) -> int:
        """Return the GPU's temperature in degrees Celsius; a sensor other than the GPU's answers
        INVALID_ARGUMENT."""
        with self._lock:
            t = self._begin("nvmlDeviceGetTemperature")
            dyn = self._physical(handle, t).dyn
            if sensor != pynvml.NVML_TEMPERATURE_GPU:
                fail(pynvml.NVML_ERROR_INVALID_ARGUMENT)
            return dyn.gpu_temp_c(t)

    def nvmlDeviceGetPowerUsage(self, handle: Handle) -> int:
        """Return the GPU's power draw, in milliwatts."""
        with self._lock:
            t = self._begin("nvmlDeviceGetPowerUsage")
            return round(self._physical(handle, t).dyn.power_mw(t))

    def nvmlDeviceGetPowerManagementLimit(self, handle: Handle) -> int:
        """Return the board's power limit, in milliwatts."""
        with self._lock:
            t = self._begin("nvmlDeviceGetPowerManagementLimit")
            return int(self._physical(handle, t).spec.board.power_limit_w * 1000)

    def nvmlDeviceGetTotalEnergyConsumption(self, handle: Handle) -> int:
        """Return the energy the GPU has used, in millijoules; it never decreases between calls."""
        with self._lock:
            t = self._begin("nvmlDeviceGetTotalEnergyConsumption")
            gpu = self._physical(handle, t)
            return self._monotonic("energy", gpu.index, gpu.dyn.energy_mj(t))

    def nvmlDeviceGetPcieReplayCounter(self, handle: Handle) -> int:
        """Return the GPU's PCIe replay count; it never decreases between calls."""
        with self._lock:
            t = self._begin("nvmlDeviceGetPcieReplayCounter")
            gpu = self._physical(handle, t)
            return self._monotonic("replays", gpu.index, gpu.dyn.pcie_replays(t))

    def nvmlDeviceGetUtilizationRates(self, handle: Handle) -> Any:
        """Return the GPU's compute and memory utilisation percent (refused under MIG)."""
        with self._lock:
            t = self._begin("nvmlDeviceGetUtilizationRates")
            gpu_pct, mem_pct = self._no_mig(handle, t).dyn.utilization(t)
            util = pynvml.c_nvmlUtilization_t()
            util.gpu, util.memory = gpu_pct, mem_pct
            return util

    def nvmlDeviceGetSamples(self, handle: Handle, sampling_type: int, last_seen: int
                             ) -> tuple[int, list[Any]]:
        """Return the utilisation samples newer than `last_seen` (CPU time in microseconds) still
        in the buffer, each the GPU or memory utilisation percent over its period of 1/6 s; raise
        NOT_FOUND when there is none."""
        with self._lock:
            t = self._begin("nvmlDeviceGetSamples")
            gpu = self._no_mig(handle, t)
            which = _UTILIZATION_SAMPLES.get(sampling_type)
            if which is None:
                fail(pynvml.NVML_ERROR_NOT_SUPPORTED)
            newest = int(t / _SAMPLE_PERIOD_S)
            samples = []
            for k in range(max(1, newest - _SAMPLE_BUFFER + 1), newest + 1):
                at = k * _SAMPLE_PERIOD_S
                stamp = int((self._wall0 + at) * 1e6)
                if stamp <= last_seen:
                    continue
                sample = pynvml.c_nvmlSample_t()
                sample.timeStamp = stamp
                sample.sampleValue.uiVal = round(
                    gpu.dyn.utilization_pct(at, _SAMPLE_PERIOD_S)[which])
                samples.append(sample)
            if not samples:
                fail(pynvml.NVML_ERROR_NOT_FOUND)
            return pynvml.NVML_VALUE_TYPE_UNSIGNED_INT, samples

    def nvmlDeviceGetEncoderUtilization(self, handle: Handle) -> list[int]:
        """Return the encoder's utilisation percent and the sampling period in microseconds."""
        with self._lock:
            t = self._begin("nvmlDeviceGetEncoderUtilization")
            return [self._no_mig(handle, t).dyn.encoder_util(t), _SAMPLING_PERIOD_US]

    def nvmlDeviceGetDecoderUtilization(self, handle: Handle) -> list[int]:
        """Return the decoder's utilisation percent and the sampling period in microseconds."""
        with self._lock:
            t = self._begin("nvmlDeviceGetDecoderUtilization")
            return [self._no_mig(handle, t).dyn.decoder_util(t), _SAMPLING_PERIOD_US]

    def nvmlDeviceGetMemoryInfo(self, handle: Handle, version: int | None = None) -> Any:
        """Return the framebuffer's total, reserved, free and used bytes, of the GPU or of a MIG
        device's GPU instance."""
        with self._lock:
            t = self._begin("nvmlDeviceGetMemoryInfo")
            device = self._resolve(handle, t)
            if isinstance(device, MigEntry):
                total, reserved, free, used = device.gpu.dyn.memory_bytes(t, device.gi.gi_id)
            else:
                total, reserved, free, used = device.dyn.memory_bytes(t)
            if not version:
                # v1 counts reserved memory as used.
                v1 = pynvml.c_nvmlMemory_t()
                v1.total, v1.free, v1.used = total, free, used + reserved
                return v1
            if version != pynvml.nvmlMemory_v2:
                fail(pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH)
            v2 = pynvml.c_nvmlMemory_v2_t()
            v2.version = version
            v2.total, v2.reserved, v2.free, v2.used = total, reserved, free, used
            return v2

    def nvmlDeviceGetRemappedRows(self, handle: Handle) -> tuple[int, int, int, int]:
        """Return the GPU's remapped rows: correctable, uncorrectable, pending and failure."""
        with self._lock:
            t = self._begin("nvmlDeviceGetRemappedRows")
            return self._no_mig(handle, t).dyn.remapped_rows(t)

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: Handle) -> int:
        """Return the bit mask of reasons the GPU's clocks are held down now."""
        with self._lock:
            t = self._begin("nvmlDeviceGetCurrentClocksEventReasons")
            return self._physical(handle, t).dyn.clock_event_reasons(t)

    def nvmlDeviceGetFieldValues(self, handle: Handle, field_ids: list[Any]) -> Any:
        """Return one field value per requested field id and scope, each with its own return
        code."""
        with self._lock:
            t = self._begin("nvmlDeviceGetFieldValues")
            device = self._resolve(handle, t)
            values = (pynvml.c_nvmlFieldValue_t * len(field_ids))()
            for entry, requested in zip(values, field_ids, strict=True):
                try:
                    field_id, scope_id = requested
                except TypeError:
                    field_id, scope_id = requested, 0
                entry.fieldId = field_id
                entry.scopeId = scope_id
                entry.timestamp = int((self._wall0 + t) * 1e6)
                if isinstance(device, MigEntry):
                    entry.nvmlReturn = pynvml.NVML_ERROR_NOT_SUPPORTED
                else:
                    self._field_value(device, int(field_id), int(scope_id), t, entry)
            return values

    def _field_value(self, gpu: GpuEntry, field_id: int, scope_id: int, t: float,
                     entry: Any) -> None:
        board, dyn = gpu.spec.board, gpu.dyn

        def put(value: int, member: str = "ullVal",
                value_type: int = pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG) -> None:
            entry.nvmlReturn = pynvml.NVML_SUCCESS
            entry.valueType = value_type
            setattr(entry.value, member, value)

        if not 0 <= field_id < pynvml.NVML_FI_MAX:
            entry.nvmlReturn = pynvml.NVML_ERROR_INVALID_ARGUMENT
        elif field_id in (_FI_ECC_SBE_VOL, _FI_ECC_DBE_VOL, _FI_ECC_SBE_AGG, _FI_ECC_DBE_AGG):
            aggregate = field_id in (_FI_ECC_SBE_AGG, _FI_ECC_DBE_AGG)
            sbe, dbe = dyn.ecc_aggregate(t) if aggregate else dyn.ecc_volatile(t)
            put(sbe if field_id in (_FI_ECC_SBE_VOL, _FI_ECC_SBE_AGG) else dbe)
        elif field_id in _FI_VIOLATION:
            put(dyn.violation_ns(t, _FI_VIOLATION[field_id]))
        elif field_id == _FI_MEMORY_TEMP:
            temp = dyn.memory_temp_c(t)
            if temp is None:
                entry.nvmlReturn = pynvml.NVML_ERROR_NOT_SUPPORTED
            else:
                put(temp, "uiVal", pynvml.NVML_VALUE_TYPE_UNSIGNED_INT)
        elif field_id in _FI_NVLINK:
            # The captures: "Nvlink queries are not supported for Devices in MIG mode".
            if not board.nvlink_links or gpu.mig_on:
                entry.nvmlReturn = pynvml.NVML_ERROR_NOT_SUPPORTED
            elif scope_id == NOT_AVAILABLE or 0 <= scope_id < board.nvlink_links:
                direction = _FI_NVLINK[field_id]
                total = self._monotonic(f"nvlink-{direction}", gpu.index,
                                        dyn.nvlink_kib(t, direction))
                put(total if scope_id == NOT_AVAILABLE else total // board.nvlink_links)
            else:
                entry.nvmlReturn = pynvml.NVML_ERROR_INVALID_ARGUMENT
        elif (answer := other_field_value(gpu, field_id, scope_id, t)) is not None:
            value, member, value_type = answer
            put(int(value), member, value_type)
        else:
            # Page retirement is replaced by row remapping from Ampere on (the captures
            # show N/A), and what other_field_value does not model is not supported.
            entry.nvmlReturn = pynvml.NVML_ERROR_NOT_SUPPORTED


"""Board queries beyond the default fields: limits, thresholds, PCIe link, BAR1, modes,
NVLink state and error counters, memory error counters.

Values follow the captures (`boards.BOARD_FIGURES`); what the captures show as N/A or
"deprecated" (fan, application clocks, auto boost, per-location ECC counters on Hopper)
answers NOT_SUPPORTED, as the driver does.
"""

from __future__ import annotations

from typing import Any

import pynvml

from exporter.simulated.node.boards import BOARD_FIGURES, BoardFigures
from exporter.simulated.node.core import GpuEntry, Handle, MigEntry, SimCore, fail

_MIB = 1024 * 1024
_PSTATE_IDLE, _PSTATE_BUSY = 8, 0
_VIRTUALIZATION_PASSTHROUGH = 2
"""NVML_GPU_VIRTUALIZATION_MODE_PASSTHROUGH: the capture's "Pass-Through"."""
_ECC_LOCATIONS_REPORTED = {pynvml.NVML_MEMORY_LOCATION_DEVICE_MEMORY,
                           pynvml.NVML_MEMORY_LOCATION_SRAM}
"""The memory locations Hopper and Ada report ECC counts for (the others read N/A)."""


class BoardCalls(SimCore):
    """Static board figures and the few that follow activity (video clock, P-state)."""

    def _figures(self, handle: Handle, name: str) -> tuple[GpuEntry, BoardFigures, float]:
        t = self._begin(name)
        gpu = self._physical(handle, t)
        return gpu, BOARD_FIGURES[gpu.spec.board.name], t

    def nvmlDeviceGetMaxClockInfo(self, handle: Handle, clock_type: int) -> int:
        with self._lock:
            gpu, fig, _ = self._figures(handle, "nvmlDeviceGetMaxClockInfo")
            board = gpu.spec.board
            return {pynvml.NVML_CLOCK_GRAPHICS: board.sm_clock_max_mhz,
                    pynvml.NVML_CLOCK_SM: board.sm_clock_max_mhz,
                    pynvml.NVML_CLOCK_MEM: board.mem_clock_max_mhz,
                    pynvml.NVML_CLOCK_VIDEO: fig.max_video_clock_mhz}.get(clock_type) or fail(
                pynvml.NVML_ERROR_INVALID_ARGUMENT)

    def nvmlDeviceGetApplicationsClock(self, handle: Handle,
                                       clock_type: int) -> int:  # noqa: ARG002 (pynvml's signature)
        with self._lock:
            self._figures(handle, "nvmlDeviceGetApplicationsClock")
            fail(pynvml.NVML_ERROR_NOT_SUPPORTED)  # "Requested functionality has been deprecated"

    def nvmlDeviceGetAutoBoostedClocksEnabled(self, handle: Handle) -> list[int]:
        with self._lock:
            self._figures(handle, "nvmlDeviceGetAutoBoostedClocksEnabled")
            fail(pynvml.NVML_ERROR_NOT_SUPPORTED)

    def nvmlDeviceGetFanSpeed(self, handle: Handle) -> int:
        with self._lock:
            self._figures(handle, "nvmlDeviceGetFanSpeed")
            fail(pynvml.NVML_ERROR_NOT_SUPPORTED)  # passively cooled boards: N/A

    def nvmlDeviceGetPerformanceState(self, handle: Handle) -> int:
        with self._lock:
            gpu, _, t = self._figures(handle, "nvmlDeviceGetPerformanceState")
            return _PSTATE_BUSY if gpu.dyn.activity(t) > 0.05 or gpu.spec.mig else _PSTATE_IDLE

    def nvmlDeviceGetTemperatureThreshold(self, handle: Handle, threshold: int) -> int:
        with self._lock:
            _, fig, _ = self._figures(handle, "nvmlDeviceGetTemperatureThreshold")
            value = {pynvml.NVML_TEMPERATURE_THRESHOLD_SHUTDOWN: fig.temp_shutdown_c,
                     pynvml.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN: fig.temp_slowdown_c,
                     pynvml.NVML_TEMPERATURE_THRESHOLD_GPU_MAX: fig.temp_limit_c,
                     pynvml.NVML_TEMPERATURE_THRESHOLD_MEM_MAX: fig.mem_temp_max_c}.get(threshold)
            if value is None:
                fail(pynvml.NVML_ERROR_NOT_SUPPORTED)
            return value

    def nvmlDeviceGetMarginTemperature(self, handle: Handle) -> int:
        with self._lock:
            gpu, fig, t = self._figures(handle, "nvmlDeviceGetMarginTemperature")
            return fig.temp_limit_c - gpu.dyn.gpu_temp_c(t)

    def nvmlDeviceGetPowerManagementLimitConstraints(self, handle: Handle) -> list[int]:
        with self._lock:
            _, fig, _ = self._figures(handle, "nvmlDeviceGetPowerManagementLimitConstraints")
            return [int(fig.power_limit_min_w * 1000), int(fig.power_limit_max_w * 1000)]

    def nvmlDeviceGetPowerManagementDefaultLimit(self, handle: Handle) -> int:
        with self._lock:
            gpu, _, _ = self._figures(handle, "nvmlDeviceGetPowerManagementDefaultLimit")
            return int(gpu.spec.board.power_limit_w * 1000)

    def nvmlDeviceGetEnforcedPowerLimit(self, handle: Handle) -> int:
        with self._lock:
            gpu, _, _ = self._figures(handle, "nvmlDeviceGetEnforcedPowerLimit")
            return int(gpu.spec.board.power_limit_w * 1000)

    def _pcie(self, handle: Handle, name: str, width: bool) -> int:
        with self._lock:
            _, fig, _ = self._figures(handle, name)
            return fig.pcie_width if width else fig.pcie_gen

    def nvmlDeviceGetMaxPcieLinkGeneration(self, handle: Handle) -> int:
        return self._pcie(handle, "nvmlDeviceGetMaxPcieLinkGeneration", False)

    def nvmlDeviceGetCurrPcieLinkGeneration(self, handle: Handle) -> int:
        return self._pcie(handle, "nvmlDeviceGetCurrPcieLinkGeneration", False)

    def nvmlDeviceGetMaxPcieLinkWidth(self, handle: Handle) -> int:
        return self._pcie(handle, "nvmlDeviceGetMaxPcieLinkWidth", True)

    def nvmlDeviceGetCurrPcieLinkWidth(self, handle: Handle) -> int:
        return self._pcie(handle, "nvmlDeviceGetCurrPcieLinkWidth", True)

    def nvmlDeviceGetBAR1MemoryInfo(self, handle: Handle) -> Any:
        """Per MIG device too (DCGM reads BAR1 of a GPU instance through its MIG handle)."""
        with self._lock:
            t = self._begin("nvmlDeviceGetBAR1MemoryInfo")
            device = self._resolve(handle, t)
            gpu = device.gpu if isinstance(device, MigEntry) else device
            total = BOARD_FIGURES[gpu.spec.board.name].bar1_total_mib * _MIB
            if isinstance(device, MigEntry):
                total = total * device.gi.slices // 7
            bar1 = pynvml.c_nvmlBAR1Memory_t()
            bar1.bar1Total, bar1.bar1Used = total, 1 * _MIB
            bar1.bar1Free = total - bar1.bar1Used
            return bar1

    def nvmlDeviceGetComputeMode(self, handle: Handle) -> int:
        with self._lock:
            self._figures(handle, "nvmlDeviceGetComputeMode")
            return int(pynvml.NVML_COMPUTEMODE_DEFAULT)

    def nvmlDeviceGetPersistenceMode(self, handle: Handle) -> int:
        with self._lock:
            self._figures(handle, "nvmlDeviceGetPersistenceMode")
            return int(pynvml.NVML_FEATURE_ENABLED)

    def nvmlDeviceGetVirtualizationMode(self, handle: Handle) -> int:
        with self._lock:
            self._figures(handle, "nvmlDeviceGetVirtualizationMode")
            return _VIRTUALIZATION_PASSTHROUGH

    def nvmlDeviceGetCudaComputeCapability(self, handle: Handle) -> tuple[int, int]:
        with self._lock:
            _, fig, _ = self._figures(handle, "nvmlDeviceGetCudaComputeCapability")
            return fig.compute_capability

    def nvmlDeviceGetMinorNumber(self, handle: Handle) -> int:
        with self._lock:
            gpu, _, _ = self._figures(handle, "nvmlDeviceGetMinorNumber")
            return gpu.index

    def nvmlDeviceGetInforomConfigurationChecksum(self, handle: Handle) -> int:
        with self._lock:
            gpu, _, _ = self._figures(handle, "nvmlDeviceGetInforomConfigurationChecksum")
            return 0x5A3C0000 + gpu.spec.board.pci_device_id % 0xFFFF

    def nvmlDeviceGetSerial(self, handle: Handle) -> str:
        with self._lock:
            self._figures(handle, "nvmlDeviceGetSerial")
            return "0000000000000"

    def nvmlDeviceGetVbiosVersion(self, handle: Handle) -> str:
        with self._lock:
            return self._figures(handle, "nvmlDeviceGetVbiosVersion")[1].vbios

    def nvmlDeviceGetInforomImageVersion(self, handle: Handle) -> str:
        with self._lock:
            return self._figures(handle, "nvmlDeviceGetInforomImageVersion")[1].inforom_image

    def nvmlDeviceGetInforomVersion(self, handle: Handle, infoROM_object: int) -> str:
        with self._lock:
            _, fig, _ = self._figures(handle, "nvmlDeviceGetInforomVersion")
            if infoROM_object == pynvml.NVML_INFOROM_OEM:
                return fig.inforom_oem
            if infoROM_object == pynvml.NVML_INFOROM_ECC:
                return fig.inforom_ecc
            fail(pynvml.NVML_ERROR_NOT_SUPPORTED)  # the power object reads N/A

    def nvmlDeviceGetPciInfo_v3(self, handle: Handle) -> Any:
        with self._lock:
            gpu, _, _ = self._figures(handle, "nvmlDeviceGetPciInfo_v3")
            info = pynvml.nvmlPciInfo_t()
            info.busId = gpu.spec.bus_id.encode()
            info.busIdLegacy = gpu.spec.bus_id_legacy.encode()
            info.bus, info.device = gpu.spec.bus, gpu.spec.pci_device
            info.pciDeviceId = gpu.spec.board.pci_device_id
            info.pciSubSystemId = gpu.spec.board.pci_subsystem_id
            return info

    def nvmlDeviceGetRowRemapperHistogram(self, handle: Handle) -> Any:
        with self._lock:
            gpu, fig, t = self._figures(handle, "nvmlDeviceGetRowRemapperHistogram")
            remapped = gpu.dyn.remapped_rows(t)[1]
            histogram = pynvml.c_nvmlRowRemapperHistogramValues()
            histogram.max = max(0, fig.bank_remap_max - remapped)
            histogram.high = min(remapped, fig.bank_remap_max)
            return histogram

    def nvmlDeviceGetMemoryErrorCounter(self, handle: Handle, error_type: int,
                                        counter_type: int, location: int) -> int:
        with self._lock:
            gpu, _, t = self._figures(handle, "nvmlDeviceGetMemoryErrorCounter")
            if location not in _ECC_LOCATIONS_REPORTED:
                fail(pynvml.NVML_ERROR_NOT_SUPPORTED)
            if location == pynvml.NVML_MEMORY_LOCATION_SRAM:
                return 0
            sbe, dbe = gpu.dyn.ecc_volatile(t)
            if counter_type == pynvml.NVML_AGGREGATE_ECC:
                sbe += gpu.dyn.aggregate_sbe
            return sbe if error_type == pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED else dbe

    def nvmlDeviceGetCpuAffinity(self, handle: Handle, cpu_set_size: int) -> list[int]:
        with self._lock:
            gpu, _, _ = self._figures(handle, "nvmlDeviceGetCpuAffinity")
            # Two sockets of 56 cores (112 threads): GPUs 0-3 on the first, 4-7 the second.
            words = [0] * cpu_set_size
            first = 0 if gpu.index < 4 else 56
            for cpu in (*range(first, first + 56), *range(first + 112, first + 168)):
                if cpu // 64 < cpu_set_size:
                    words[cpu // 64] |= 1 << (cpu % 64)
            return words

    def nvmlDeviceGetMemoryAffinity(self, handle: Handle, node_set_size: int,
                                    scope: int) -> list[int]:  # noqa: ARG002 (pynvml's signature)
        with self._lock:
            gpu, _, _ = self._figures(handle, "nvmlDeviceGetMemoryAffinity")
            words = [0] * node_set_size
            words[0] = 1 << (0 if gpu.index < 4 else 1)
            return words

    def nvmlDeviceGetGpuFabricInfoV(self, handle: Handle, info: Any) -> int:
        """Registration completed without error, as every NVLink capture shows; boards
        without NVLink have no fabric."""
        with self._lock:
            gpu, _, _ = self._figures(handle, "nvmlDeviceGetGpuFabricInfoV")
            if not gpu.spec.board.nvlink_links:
                fail(pynvml.NVML_ERROR_NOT_SUPPORTED)
            struct = getattr(info, "_obj", info)  # a ctypes.byref(...) or the struct
            struct.state, struct.status = pynvml.NVML_GPU_FABRIC_STATE_COMPLETED, 0
            struct.cliqueId, struct.healthMask, struct.healthSummary = 0, 0, 0
            return int(pynvml.NVML_SUCCESS)

    # -- NVLink ------------------------------------------------------------------------------

    def _link(self, handle: Handle, name: str, link: int) -> GpuEntry:
        t = self._begin(name)
        gpu = self._physical(handle, t)
        if not gpu.spec.board.nvlink_links or gpu.mig_on:
            fail(pynvml.NVML_ERROR_NOT_SUPPORTED)
        if not 0 <= link < gpu.spec.board.nvlink_links:
            fail(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return gpu

    def nvmlDeviceGetNvLinkState(self, handle: Handle, link: int) -> int:
        with self._lock:
            self._link(handle, "nvmlDeviceGetNvLinkState", link)
            return int(pynvml.NVML_FEATURE_ENABLED)

    def nvmlDeviceGetP2PStatus(self, handle: Handle, peer: Handle, caps_index: int) -> int:
        """NVLink P2P is OK between two NVLink GPUs without MIG (the NVSwitch fabric joins
        every pair); a PCIe board or a MIG-enabled GPU has none (NOT_SUPPORTED, 5)."""
        with self._lock:
            t = self._begin("nvmlDeviceGetP2PStatus")
            gpus = (self._physical(handle, t), self._physical(peer, t))
            if gpus[0].index == gpus[1].index:
                fail(pynvml.NVML_ERROR_INVALID_ARGUMENT)
            if caps_index != pynvml.NVML_P2P_CAPS_INDEX_NVLINK:
                fail(pynvml.NVML_ERROR_NOT_SUPPORTED)  # only the NVLink index is simulated
            if all(g.spec.board.nvlink_links and not g.mig_on for g in gpus):
                return int(pynvml.NVML_P2P_STATUS_OK)
            return int(pynvml.NVML_P2P_STATUS_NOT_SUPPORTED)

    def nvmlDeviceGetNvLinkErrorCounter(self, handle: Handle, link: int, counter: int) -> int:
        with self._lock:
            gpu = self._link(handle, "nvmlDeviceGetNvLinkErrorCounter", link)
            return gpu.dyn.nvlink_errors(self.now(), link, counter)

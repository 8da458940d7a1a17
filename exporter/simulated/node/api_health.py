"""Board health and identity queries that take a struct or answer in the return code: SRAM
ECC status, unrepairable memory, infoROM validation, platform info, brand, vGPU licensing
and the GPU instance profiles.

Values follow the captures: "SRAM Threshold Exceeded: No", "Unrepairable Memory: No" (N/A on
the Ada boards), "Product Brand: NVIDIA", Platform Info with only the Module Id reported
(7 on the H100 capture, 1 on the H200 and L40S ones; the rest N/A, which NVML reports as
0xFF bytes), and no vGPU licensing on these pass-through boards.
"""

from __future__ import annotations

import ctypes
from typing import Any

import pynvml

from exporter.simulated.node.api_board import BoardCalls
from exporter.simulated.node.core import Handle, fail

_BRAND_NVIDIA = 14
"""NVML_BRAND_NVIDIA: "Product Brand: NVIDIA" in every capture."""
_NOT_REPORTED = 0xFF

_GI_PROFILE_SLICES = {
    pynvml.NVML_GPU_INSTANCE_PROFILE_1_SLICE: 1, pynvml.NVML_GPU_INSTANCE_PROFILE_2_SLICE: 2,
    pynvml.NVML_GPU_INSTANCE_PROFILE_3_SLICE: 3, pynvml.NVML_GPU_INSTANCE_PROFILE_4_SLICE: 4,
    pynvml.NVML_GPU_INSTANCE_PROFILE_7_SLICE: 7,
    pynvml.NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV1: 1,
    pynvml.NVML_GPU_INSTANCE_PROFILE_2_SLICE_REV1: 2,
    pynvml.NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV2: 1,
}
"""The GPU instance profiles of a 7-slice A100/H100/H200 (1g, 2g, 3g, 4g, 7g, 1g+me,
2g+me (not on Hopper: answered anyway), 1g.2xgb); the others answer NOT_SUPPORTED."""


def _struct(pointer: Any) -> Any:
    """The struct a `ctypes.byref(...)` (or a pointer, or the struct itself) refers to."""
    if isinstance(pointer, ctypes._Pointer):
        return pointer.contents
    return getattr(pointer, "_obj", pointer)


class HealthCalls(BoardCalls):
    def nvmlDeviceGetSramEccErrorStatus(self, handle: Handle, status: Any) -> int:
        with self._lock:
            self._figures(handle, "nvmlDeviceGetSramEccErrorStatus")
            struct = _struct(status)
            for name, _ in struct._fields_[1:]:
                setattr(struct, name, 0)  # no SRAM errors, threshold not exceeded
            return int(pynvml.NVML_SUCCESS)

    def nvmlDeviceGetUnrepairableMemoryFlag_v1(self, handle: Handle, status: Any) -> None:
        """Called as the C function is (nvml.h's one-member struct), not as pynvml's
        wrapper (see exporter/devices/struct_reads.py)."""
        with self._lock:
            _, fig, _ = self._figures(handle, "nvmlDeviceGetUnrepairableMemoryFlag_v1")
            if fig.compute_capability < (9, 0):
                fail(pynvml.NVML_ERROR_NOT_SUPPORTED)  # Hopper and newer; N/A on the L40S
            _struct(status).bUnrepairableMemory = 0

    def nvmlDeviceValidateInforom(self, handle: Handle) -> None:
        with self._lock:
            self._figures(handle, "nvmlDeviceValidateInforom")

    def nvmlDeviceGetPlatformInfo(self, handle: Handle, info: Any) -> int:
        with self._lock:
            _, fig, _ = self._figures(handle, "nvmlDeviceGetPlatformInfo")
            if fig.module_id is None:
                fail(pynvml.NVML_ERROR_NOT_SUPPORTED)
            struct = _struct(info)
            ctypes.memset(ctypes.addressof(struct.chassisSerialNumber), _NOT_REPORTED, 16)
            struct.slotNumber = struct.trayIndex = struct.hostId = _NOT_REPORTED
            struct.peerType = _NOT_REPORTED
            struct.moduleId = fig.module_id
            return int(pynvml.NVML_SUCCESS)

    def nvmlDeviceGetBrand(self, handle: Handle) -> int:
        with self._lock:
            self._figures(handle, "nvmlDeviceGetBrand")
            return _BRAND_NVIDIA

    def nvmlDeviceGetGridLicensableFeatures(self, handle: Handle) -> Any:
        with self._lock:
            self._figures(handle, "nvmlDeviceGetGridLicensableFeatures")
            return pynvml.c_nvmlGridLicensableFeatures_v4_t()  # licensing not supported

    def nvmlDeviceGetGpuInstanceProfileInfo(self, handle: Handle, profile: int) -> Any:
        with self._lock:
            t = self._begin("nvmlDeviceGetGpuInstanceProfileInfo")
            gpu = self._physical(handle, t)
            slices = _GI_PROFILE_SLICES.get(profile)
            if not gpu.spec.board.mig_capable or slices is None:
                fail(pynvml.NVML_ERROR_NOT_SUPPORTED)
            info = pynvml.c_nvmlGpuInstanceProfileInfo_v2_t()
            info.id, info.sliceCount = profile, slices
            return info

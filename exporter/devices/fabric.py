"""The GPU's NVLink fabric registration (Fabric Manager on NVSwitch systems), read through
`nvmlDeviceGetGpuFabricInfoV` into a plain ctypes struct (`nvmlGpuFabricInfo_v3_t`, whose
layout a test checks against pynvml's)."""

from __future__ import annotations

import ctypes
from collections.abc import Callable

from exporter.devices.nvml_api import Handle, NvmlLib

NVML_GPU_FABRIC_STATE_COMPLETED = 3
NVML_GPU_FABRIC_UUID_LEN = 16


class FabricInfo(ctypes.Structure):
    """The `nvmlGpuFabricInfo_v3_t` struct that NVML fills with the GPU's fabric registration."""

    _fields_ = [("version", ctypes.c_uint),
                ("clusterUuid", ctypes.c_uint8 * NVML_GPU_FABRIC_UUID_LEN),
                ("status", ctypes.c_uint),
                ("cliqueId", ctypes.c_uint32),
                ("state", ctypes.c_uint),
                ("healthMask", ctypes.c_uint32),
                ("healthSummary", ctypes.c_uint8)]


FABRIC_INFO_V3 = ctypes.sizeof(FabricInfo) | 3 << 24
"""nvmlGpuFabricInfo_v3: its size and version, as NVML_STRUCT_VERSION builds it."""


def fabric_reader(lib: NvmlLib, handle: Handle) -> Callable[[], FabricInfo]:
    """Return a function that reads this GPU's fabric registration each time it is called."""
    def read() -> FabricInfo:
        info = FabricInfo(version=FABRIC_INFO_V3)
        lib.nvmlDeviceGetGpuFabricInfoV(handle, ctypes.byref(info))
        return info
    return read


def fabric_manager_status(info: FabricInfo) -> float:
    """Return the Fabric Manager status as DCGM numbers it (`dcgmFabricManagerStatus_t`): not
    supported 0, not started 1, in progress 2, success 3, failure 4 (registration completed with
    an error), unrecognized 5."""
    if info.state == NVML_GPU_FABRIC_STATE_COMPLETED:
        return 3.0 if info.status == 0 else 4.0
    return float(info.state) if info.state < NVML_GPU_FABRIC_STATE_COMPLETED else 5.0


_DCGM_RETURN = {0: 0.0, 1: -56.0, 2: -1.0, 3: -6.0, 4: -17.0, 6: -14.0, 10: -11.0, 15: -18.0,
                16: -19.0, 23: -49.0}
"""DCGM's dcgmReturn_t for an nvmlReturn_t (NvmlReturnToDcgmReturn): NOT_SUPPORTED -6,
NO_PERMISSION -17, NOT_FOUND -14 (no data), TIMEOUT -11, GPU_IS_LOST -18, RESET_REQUIRED -19,
INVALID_ARGUMENT -1, INSUFFICIENT_RESOURCES -49, UNINITIALIZED -56; any other code is
DCGM_ST_NVML_ERROR, -8."""
_DCGM_NVML_ERROR = -8.0
_DCGM_BADPARAM = -1.0


def fabric_manager_error(info: FabricInfo) -> float | None:
    """Return the value of DCGM_FI_DEV_FABRIC_MANAGER_ERROR: once registration completed, DCGM's
    return code for its status (0 for success). There is no value while registration is not
    supported, not started or in progress, and DCGM_ST_BADPARAM for a state NVML did not define."""
    if info.state < NVML_GPU_FABRIC_STATE_COMPLETED:
        return None
    if info.state > NVML_GPU_FABRIC_STATE_COMPLETED:
        return _DCGM_BADPARAM
    return _DCGM_RETURN.get(info.status, _DCGM_NVML_ERROR)


def cluster_uuid(info: FabricInfo) -> str | None:
    """Return the value of DCGM_FI_DEV_FABRIC_CLUSTER_UUID: the 16 bytes in order as a lowercase
    8-4-4-4-12 GUID. There is none before registration completed, since the UUID is not assigned
    yet (all zeros)."""
    if info.state != NVML_GPU_FABRIC_STATE_COMPLETED:
        return None
    digits = bytes(info.clusterUuid).hex()
    return "-".join((digits[:8], digits[8:12], digits[12:16], digits[16:20], digits[20:32]))

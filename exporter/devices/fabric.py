"""`nvmlDeviceGetGpuFabricInfoV`: the GPU's NVLink fabric registration (Fabric Manager on
NVSwitch systems), read into a plain ctypes struct (`nvmlGpuFabricInfo_v3_t`, whose layout a
test checks against pynvml's)."""

from __future__ import annotations

import ctypes
from collections.abc import Callable

from exporter.devices.nvml_api import Handle, NvmlLib

NVML_GPU_FABRIC_STATE_COMPLETED = 3
NVML_GPU_FABRIC_UUID_LEN = 16


class FabricInfo(ctypes.Structure):
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
    def read() -> FabricInfo:
        info = FabricInfo(version=FABRIC_INFO_V3)
        lib.nvmlDeviceGetGpuFabricInfoV(handle, ctypes.byref(info))
        return info
    return read


def fabric_manager_status(info: FabricInfo) -> float:
    """dcgmFabricManagerStatus_t: not supported 0, not started 1, in progress 2, success 3,
    failure 4 (registration completed with an error), unrecognized 5."""
    if info.state == NVML_GPU_FABRIC_STATE_COMPLETED:
        return 3.0 if info.status == 0 else 4.0
    return float(info.state) if info.state < NVML_GPU_FABRIC_STATE_COMPLETED else 5.0

"""NVML reads that are more than one plain call: a struct the caller fills in, a value that
lives in the return code, or one DCGM composes from several answers.

`STRUCT_READS` maps the NVML function a field's `Call` names to a maker: given the library
and an entity's handle, it returns the bound read the plan calls each poll (and `read_labels`
once per enumeration). The structs are laid out as nvml.h 13 declares them, not as pynvml
does where the two differ (a test checks sizes against the version macros), and are passed by
`ctypes.byref` to pynvml's function of that name.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable, Sequence
from typing import Any

from exporter.devices.errors import is_nvml_error, nvml_code
from exporter.devices.fabric import fabric_reader
from exporter.devices.nvml_api import (
    NVML_DEVICE_MIG_ENABLE,
    NVML_ERROR_GPU_IS_LOST,
    NVML_ERROR_INVALID_ARGUMENT,
    UNSUPPORTED_CODES,
    Handle,
    NvmlLib,
)
from exporter.devices.prm import counter_reader, ppcnt_reader

NVML_ERROR_CORRUPTED_INFOROM = 14
NVML_GPU_INSTANCE_PROFILE_COUNT = 0x12
"""GPU instance profile ids run 0 .. 0x11 in nvml.h 13 (the `+me`, `+gfx` ... variants
included)."""


def struct_version(struct: type[ctypes.Structure], version: int) -> int:
    """Return the struct's version as NVML_STRUCT_VERSION makes it: the struct's size with the
    version in the top byte."""
    return ctypes.sizeof(struct) | version << 24


class SramEccErrorStatus(ctypes.Structure):
    """NVML's `nvmlEccSramErrorStatus_v1_t` struct."""

    _fields_ = [("version", ctypes.c_uint),
                *((name, ctypes.c_ulonglong) for name in (
                    "aggregateUncParity", "aggregateUncSecDed", "aggregateCor",
                    "volatileUncParity", "volatileUncSecDed", "volatileCor",
                    "aggregateUncBucketL2", "aggregateUncBucketSm", "aggregateUncBucketPcie",
                    "aggregateUncBucketMcu", "aggregateUncBucketOther")),
                ("bThresholdExceeded", ctypes.c_uint)]


class PlatformInfo(ctypes.Structure):
    """NVML's `nvmlPlatformInfo_v2_t` struct. Its GUIDs are bytes rather than pynvml's `c_char`,
    which turns a GUID into a string cut at its first zero byte."""

    _fields_ = [("version", ctypes.c_uint),
                ("ibGuid", ctypes.c_uint8 * 16),
                ("chassisSerialNumber", ctypes.c_uint8 * 16),
                ("slotNumber", ctypes.c_uint8),
                ("trayIndex", ctypes.c_uint8),
                ("hostId", ctypes.c_uint8),
                ("peerType", ctypes.c_uint8),
                ("moduleId", ctypes.c_uint8)]


class UnrepairableMemoryStatus(ctypes.Structure):
    """NVML's `nvmlUnrepairableMemoryStatus_v1_t` struct: the flag alone. pynvml 13's wrapper
    passes a (version, flag) pair and reads the second word, which NVML never writes, so this
    struct is passed to the C function instead."""

    _fields_ = [("bUnrepairableMemory", ctypes.c_uint)]


SRAM_ECC_ERROR_STATUS_V1 = struct_version(SramEccErrorStatus, 1)
PLATFORM_INFO_V2 = struct_version(PlatformInfo, 2)

Read = Callable[[], Any]
Maker = Callable[..., Read]
"""A function that binds a read to its library, handle and the call's further arguments."""


def _filled(function: str, struct: type[ctypes.Structure], **init: int) -> Maker:
    """Return a read that passes a fresh struct (with `init` set, such as its version) to
    `function`."""
    def make(lib: NvmlLib, handle: Handle) -> Read:
        call = getattr(lib, function)

        def read() -> Any:
            answer = struct(**init)
            call(handle, ctypes.byref(answer))
            return answer
        return read
    return make


def _c_function(lib: NvmlLib, function: str) -> Callable[..., None]:
    """Return the C function itself, wrapped to raise pynvml's error for a failed return code; a
    stand-in library (which has no C functions) answers through its method of the same name."""
    pointer = getattr(lib, "_nvmlGetFunctionPointer", None)
    if pointer is None:
        method: Callable[..., None] = getattr(lib, function)
        return method
    c_function = pointer(function)
    # pynvml's error class, outside the protocol as the function-pointer lookup is.
    error: Callable[[int], Exception] = getattr(lib, "NVMLError")  # noqa: B009

    def call(*args: Any) -> None:
        code = c_function(*args)
        if code:
            raise error(code)
    return call


def _unrepairable(lib: NvmlLib, handle: Handle) -> Read:
    function = "nvmlDeviceGetUnrepairableMemoryFlag_v1"
    resolved: list[Callable[..., None]] = []

    def read() -> UnrepairableMemoryStatus:
        # The function is looked up at the first poll, so a missing symbol fails that call
        # rather than the plan.
        if not resolved:
            resolved.append(_c_function(lib, function))
        answer = UnrepairableMemoryStatus()
        resolved[0](handle, ctypes.byref(answer))
        return answer
    return read


def _inforom_valid(lib: NvmlLib, handle: Handle) -> Read:
    """Return DCGM_FI_DEV_INFOROM_VALID, which lives in the return code: SUCCESS gives 1 and
    CORRUPTED_INFOROM gives 0, while any other error is raised as it came and leaves the field
    blank."""
    def read() -> int:
        try:
            lib.nvmlDeviceValidateInforom(handle)
        except Exception as exc:
            if is_nvml_error(exc) and nvml_code(exc) == NVML_ERROR_CORRUPTED_INFOROM:
                return 0
            raise
        return 1
    return read


def _mig_max_slices(lib: NvmlLib, handle: Handle) -> Read:
    """Return a read of DCGM_FI_DEV_MIG_MAX_SLICES: 0 with MIG off, else the larger of the MIG
    device count and the largest GPU instance profile's slice count. It is fixed for a plan (a
    MIG mode change makes a new plan), so the profiles are walked once."""
    known: list[int] = []

    def read() -> int:
        if not known:
            known.append(_max_slices(lib, handle))
        return known[0]
    return read


def _max_slices(lib: NvmlLib, handle: Handle) -> int:
    try:
        mig_on = lib.nvmlDeviceGetMigMode(handle)[0] == NVML_DEVICE_MIG_ENABLE
    except Exception as exc:
        if is_nvml_error(exc) and nvml_code(exc) in UNSUPPORTED_CODES:
            return 0  # The GPU has no MIG, for which DCGM reports 0.
        raise
    if not mig_on:
        return 0
    try:
        largest = lib.nvmlDeviceGetMaxMigDeviceCount(handle)
    except Exception as exc:
        if not is_nvml_error(exc) or nvml_code(exc) == NVML_ERROR_GPU_IS_LOST:
            raise
        largest = 0  # As in DCGM, the profiles alone then give the answer.
    for profile in range(NVML_GPU_INSTANCE_PROFILE_COUNT):
        try:
            info = lib.nvmlDeviceGetGpuInstanceProfileInfo(handle, profile)
            largest = max(largest, int(info.sliceCount))
        except Exception as exc:
            # As DCGM: a profile this GPU lacks (NOT_SUPPORTED) is skipped, INVALID_ARGUMENT
            # (past the last profile this driver knows) ends the walk.
            if is_nvml_error(exc) and nvml_code(exc) == NVML_ERROR_INVALID_ARGUMENT:
                break
            if not is_nvml_error(exc) or nvml_code(exc) not in UNSUPPORTED_CODES:
                raise
    return largest


NVML_P2P_CAPS_INDEX_NVLINK = 2
NVML_P2P_STATUS_OK = 0


def _self_lost(lib: NvmlLib, handle: Handle) -> bool:
    """Return whether this GPU itself answers GPU_IS_LOST; it is asked only after a P2P call did,
    which may have meant the peer."""
    try:
        lib.nvmlDeviceGetUUID(handle)
    except Exception as exc:
        return is_nvml_error(exc) and nvml_code(exc) == NVML_ERROR_GPU_IS_LOST
    return False


def p2p_status(lib: NvmlLib, handle: Handle, peer: Handle) -> int | None:
    """Return the NVLink P2P status from `handle` to `peer`. GPU_IS_LOST is raised only when this
    GPU is the lost one; a lost peer gives None, so the pair has no value."""
    try:
        status: int = lib.nvmlDeviceGetP2PStatus(handle, peer, NVML_P2P_CAPS_INDEX_NVLINK)
    except Exception as exc:
        if is_nvml_error(exc) and nvml_code(exc) == NVML_ERROR_GPU_IS_LOST \
                and not _self_lost(lib, handle):
            return None
        raise
    return status


def p2p_bitmap(lib: NvmlLib, handle: Handle, peers: Sequence[tuple[int, Handle]]) -> int:
    """Return a read of DCGM_FI_DEV_NVLINK_P2P_STATUS: bit n is set when the NVLink P2P status
    towards GPU n (one of the enumerated GPUs besides this one) is OK, and this GPU's own bit
    never is. A lost peer's bit is clear; any other error leaves the field without a value, as in
    DCGM."""
    bitmap = 0
    for index, other in peers:
        if p2p_status(lib, handle, other) == NVML_P2P_STATUS_OK:
            bitmap |= 1 << index
    return bitmap


STRUCT_READS: dict[str, Maker] = {
    "nvmlDeviceGetSramEccErrorStatus": _filled(
        "nvmlDeviceGetSramEccErrorStatus", SramEccErrorStatus, version=SRAM_ECC_ERROR_STATUS_V1),
    "nvmlDeviceGetPlatformInfo": _filled(
        "nvmlDeviceGetPlatformInfo", PlatformInfo, version=PLATFORM_INFO_V2),
    "nvmlDeviceGetUnrepairableMemoryFlag_v1": _unrepairable,
    "nvmlDeviceValidateInforom": _inforom_valid,
    "nvmlDeviceGetMaxMigDeviceCount": _mig_max_slices,
    "nvmlDeviceGetGpuFabricInfoV": fabric_reader,
    "nvmlDeviceReadWritePRM_v1": ppcnt_reader,  # (link, PPCNT group)
    "nvmlDeviceReadPRMCounters_v1": counter_reader,  # (link, counter id)
}
"""By the NVML function a field's `Call` names: how to read it."""

_ALSO_CALLS = {
    "nvmlDeviceGetMaxMigDeviceCount": ("nvmlDeviceGetMigMode",
                                       "nvmlDeviceGetGpuInstanceProfileInfo"),
}


def available(lib: NvmlLib, function: str) -> bool:
    """Return whether the library has what the struct read of `function` calls. pynvml defines
    every function it knows, but a stand-in library may lack one, and the field then has no
    value."""
    return all(callable(getattr(lib, name, None))
               for name in (function, *_ALSO_CALLS.get(function, ())))

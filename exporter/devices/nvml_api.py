"""The exact slice of pynvml that the NVML backend calls.

The real backend passes the `pynvml` module itself; the simulated node passes an object with
the same functions, so the demo and most tests drive the same backend code a GPU node runs.
Return shapes are pynvml's: ctypes structs (or anything with the same attributes), `str` for
strings, and errors raised as `pynvml.NVMLError` subclasses carrying `.value`.
"""

from __future__ import annotations

import ctypes
from typing import Any, Protocol

Handle = Any
"""An opaque device handle (pynvml: a ctypes pointer; simulated: any object)."""

# NVML constants used by the backend (values from nvml.h; pynvml exposes the same names).
NVML_CLOCK_SM = 1
NVML_CLOCK_MEM = 2
NVML_TEMPERATURE_GPU = 0
NVML_DEVICE_MIG_ENABLE = 1
NVML_EVENT_TYPE_XID_CRITICAL_ERROR = 0x0000000000000008
NVML_VALUE_NOT_AVAILABLE_UINT = 0xFFFFFFFF
NVML_GPM_METRICS_GET_VERSION = 1
NVML_NVLINK_MAX_LINKS = 36

# nvmlReturn_t codes the backend reacts to.
NVML_SUCCESS = 0
NVML_ERROR_UNINITIALIZED = 1
NVML_ERROR_INVALID_ARGUMENT = 2
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_NO_PERMISSION = 4
NVML_ERROR_NOT_FOUND = 6
NVML_ERROR_DRIVER_NOT_LOADED = 9
NVML_ERROR_TIMEOUT = 10
NVML_ERROR_LIBRARY_NOT_FOUND = 12
NVML_ERROR_FUNCTION_NOT_FOUND = 13
NVML_ERROR_GPU_IS_LOST = 15
NVML_ERROR_LIB_RM_VERSION_MISMATCH = 18
NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25
NVML_ERROR_UNKNOWN = 999

ERROR_NAMES: dict[int, str] = {
    NVML_ERROR_UNINITIALIZED: "UNINITIALIZED",
    NVML_ERROR_INVALID_ARGUMENT: "INVALID_ARGUMENT",
    NVML_ERROR_NOT_SUPPORTED: "NOT_SUPPORTED",
    NVML_ERROR_NO_PERMISSION: "NO_PERMISSION",
    NVML_ERROR_NOT_FOUND: "NOT_FOUND",
    NVML_ERROR_DRIVER_NOT_LOADED: "DRIVER_NOT_LOADED",
    NVML_ERROR_TIMEOUT: "TIMEOUT",
    NVML_ERROR_LIBRARY_NOT_FOUND: "LIBRARY_NOT_FOUND",
    NVML_ERROR_FUNCTION_NOT_FOUND: "FUNCTION_NOT_FOUND",
    NVML_ERROR_GPU_IS_LOST: "GPU_IS_LOST",
    NVML_ERROR_LIB_RM_VERSION_MISMATCH: "LIB_RM_VERSION_MISMATCH",
    NVML_ERROR_ARGUMENT_VERSION_MISMATCH: "ARGUMENT_VERSION_MISMATCH",
    NVML_ERROR_UNKNOWN: "UNKNOWN",
}

UNSUPPORTED_CODES = frozenset({
    NVML_ERROR_NOT_SUPPORTED,
    NVML_ERROR_FUNCTION_NOT_FOUND,
    NVML_ERROR_NO_PERMISSION,
    NVML_ERROR_ARGUMENT_VERSION_MISMATCH,  # a struct version this driver does not take
})
"""Codes that mean "this device will not answer this", remembered until re-enumeration."""

LIBRARY_GONE_CODES = frozenset({NVML_ERROR_UNINITIALIZED, NVML_ERROR_DRIVER_NOT_LOADED})
"""Codes a device call answers once the driver was unloaded or reloaded under an initialised
library: nothing answers until nvmlInit succeeds again."""


class NvmlValue(ctypes.Union):
    """NVML's `nvmlValue_t`: the 8-byte union in which NVML answers field values and PRM
    counters."""

    _fields_ = [("dVal", ctypes.c_double), ("uiVal", ctypes.c_uint),
                ("ulVal", ctypes.c_ulong), ("ullVal", ctypes.c_ulonglong),
                ("sllVal", ctypes.c_longlong), ("siVal", ctypes.c_int),
                ("usVal", ctypes.c_ushort)]


VALUE_MEMBERS: tuple[str, ...] = tuple(field[0] for field in NvmlValue._fields_)
"""`NvmlValue`'s members by nvmlValueType_t (0 double ... 6 unsigned short)."""


def error_name(code: int) -> str:
    """Return the name of an NVML return code (such as "NOT_SUPPORTED"), or the number when it has
    no known name."""
    return ERROR_NAMES.get(code, str(code))


class NvmlLib(Protocol):
    """Functions with pynvml's names, arguments and return shapes.

    Fields read through `Reader.CALL` name their pynvml function in the field table
    (`exporter/fields/dcgm-names.csv`) and are looked up on the library by that name; a test
    checks that pynvml and the simulated node have each of them."""

    # Library life cycle and system
    def nvmlInit(self) -> None:
        """Initialise NVML."""
        ...
    def nvmlShutdown(self) -> None:
        """Release NVML."""
        ...
    def nvmlSystemGetDriverVersion(self) -> str:
        """Return the driver's version."""
        ...

    # Enumeration and identity
    def nvmlDeviceGetCount(self) -> int:
        """Return how many GPUs NVML sees."""
        ...
    def nvmlDeviceGetHandleByIndex(self, index: int) -> Handle:
        """Return the handle of the GPU with this index."""
        ...
    def nvmlDeviceGetUUID(self, handle: Handle) -> str:
        """Return the device's UUID."""
        ...
    def nvmlDeviceGetName(self, handle: Handle) -> str:
        """Return the device's product name."""
        ...
    def nvmlDeviceGetPciInfo(self, handle: Handle) -> Any:
        """Return the device's PCI information, whose `.busId` is a string such as
        "00000000:83:00.0"."""
        ...

    # MIG
    def nvmlDeviceGetMigMode(self, handle: Handle) -> list[int]:
        """Return the GPU's current and pending MIG modes."""
        ...
    def nvmlDeviceGetMaxMigDeviceCount(self, handle: Handle) -> int:
        """Return how many MIG device slots the GPU has."""
        ...
    def nvmlDeviceGetMigDeviceHandleByIndex(self, handle: Handle, index: int) -> Handle:
        """Return the handle of the MIG device in this slot; an empty slot raises NOT_FOUND,
        since the slots in use need not be contiguous."""
        ...
    def nvmlDeviceGetGpuInstanceProfileInfo(self, handle: Handle, profile: int) -> Any:
        """Return a GPU instance profile's information, whose `.sliceCount` is used; a profile
        the GPU lacks answers NOT_SUPPORTED."""
        ...
    def nvmlDeviceGetGpuInstanceId(self, mig_handle: Handle) -> int:
        """Return the id of the GPU instance that holds this MIG device."""
        ...
    def nvmlDeviceGetComputeInstanceId(self, mig_handle: Handle) -> int:
        """Return the id of this MIG device's compute instance."""
        ...
    def nvmlDeviceGetDeviceHandleFromMigDeviceHandle(self, mig_handle: Handle) -> Handle:
        """Return the handle of the GPU that holds this MIG device."""
        ...

    # Values
    def nvmlDeviceGetClockInfo(self, handle: Handle, clock_type: int) -> int:
        """Return the current clock of this type, in MHz."""
        ...
    def nvmlDeviceGetTemperature(self, handle: Handle, sensor: int) -> int:
        """Return the temperature of this sensor, in degrees Celsius."""
        ...
    def nvmlDeviceGetPowerUsage(self, handle: Handle) -> int:
        """Return the power draw, in milliwatts."""
        ...
    def nvmlDeviceGetPowerManagementLimit(self, handle: Handle) -> int:
        """Return the power limit, in milliwatts."""
        ...
    def nvmlDeviceGetTotalEnergyConsumption(self, handle: Handle) -> int:
        """Return the energy used since the driver was loaded, in millijoules."""
        ...
    def nvmlDeviceGetPcieReplayCounter(self, handle: Handle) -> int:
        """Return how many PCIe replays happened."""
        ...
    def nvmlDeviceGetUtilizationRates(self, handle: Handle) -> Any:
        """Return the GPU's utilisation, with `.gpu` and `.memory` in percent."""
        ...
    def nvmlDeviceGetEncoderUtilization(self, handle: Handle) -> list[int]:
        """Return the encoder's utilisation percent and the sampling period in microseconds."""
        ...
    def nvmlDeviceGetDecoderUtilization(self, handle: Handle) -> list[int]:
        """Return the decoder's utilisation percent and the sampling period in microseconds."""
        ...
    def nvmlDeviceGetMemoryInfo(self, handle: Handle, version: int | None = None) -> Any:
        """Return the framebuffer's `.total`, `.reserved`, `.free` and `.used` bytes; it is
        called with `version=pynvml.nvmlMemory_v2`."""
        ...
    def nvmlDeviceGetRemappedRows(self, handle: Handle) -> tuple[int, int, int, int]:
        """Return the remapped rows: correctable rows, uncorrectable rows, pending (0 or 1) and
        failure (0 or 1)."""
        ...
    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: Handle) -> int:
        """Return the bit mask of reasons the clocks are being held down now."""
        ...
    def nvmlDeviceGetNvLinkState(self, handle: Handle, link: int) -> int:
        """Return 1 when the link is up; a link the GPU lacks answers NOT_SUPPORTED or
        INVALID_ARGUMENT."""
        ...
    def nvmlDeviceReadWritePRM_v1(self, handle: Handle, tlv: Any) -> None:
        """Access a register: `tlv` (an `nvmlPRMTLV_v1_t`, which pynvml passes by reference)
        holds the request and, after the call, the reply."""
        ...
    def nvmlDeviceReadPRMCounters_v1(self, handle: Handle, counters: Any) -> None:
        """Fill each `nvmlPRMCounter_v1_t` of the counter list `counters` (an
        `nvmlPRMCounterList_v1_t`)."""
        ...
    def nvmlDeviceGetP2PStatus(self, handle: Handle, peer: Handle, caps_index: int) -> int:
        """Return the P2P status towards the peer (`nvmlGpuP2PStatus_t`): 0 when it is OK, 1 to 6
        for why not."""
        ...
    def nvmlDeviceValidateInforom(self, handle: Handle) -> None:
        """Check the InfoROM, raising CORRUPTED_INFOROM when it fails the check."""
        ...
    def nvmlDeviceGetGpuFabricInfoV(self, handle: Handle, info: Any) -> Any:
        """Fill the `nvmlGpuFabricInfo_v3_t` that `info` (a `ctypes.byref`) points to."""
        ...
    def nvmlDeviceGetSamples(self, handle: Handle, sampling_type: int, last_seen: int
                             ) -> tuple[int, list[Any]]:
        """Return the value type (`nvmlValueType_t`) and the samples newer than `last_seen` (CPU
        time in microseconds), each with `.timeStamp` and `.sampleValue` (a union, as below)."""
        ...
    def nvmlDeviceGetFieldValues(self, handle: Handle, field_ids: list[Any]) -> Any:
        """Return the values of the requested fields. Each entry is an int or a (field id, scope
        id) pair; each answer is a struct with `.fieldId`, `.scopeId`, `.nvmlReturn`,
        `.valueType` and `.value` (a union with `.dVal`, `.uiVal`, `.ulVal`, `.ullVal`, `.sllVal`
        and `.siVal`)."""
        ...

    # Processes (per-container attribution on shared devices)
    def nvmlDeviceGetHandleByUUID(self, uuid: str) -> Handle:
        """Return the handle of the GPU or MIG device with this UUID."""
        ...
    def nvmlDeviceGetComputeRunningProcesses(self, handle: Handle) -> list[Any]:
        """Return the compute processes, with `.pid`, `.usedGpuMemory` (bytes, or None when NVML
        cannot say) and, on MIG-enabled GPUs, `.gpuInstanceId`."""
        ...
    def nvmlDeviceGetMPSComputeRunningProcesses_v3(self, handle: Handle) -> list[Any]:
        """Return the MPS clients, with entries as above; drivers list them here rather than in
        the compute list. Where MPS is not available it raises NOT_SUPPORTED or
        FUNCTION_NOT_FOUND. The versioned name is used because pynvml's unversioned one turns
        FUNCTION_NOT_FOUND into an error that is not an NVMLError."""
        ...
    def nvmlDeviceGetProcessUtilization(self, handle: Handle, timeStamp: int) -> list[Any]:
        """Return the samples newer than `timeStamp` (CPU time in microseconds), each with
        `.pid`, `.timeStamp` and `.smUtil` (percent); raise NOT_FOUND when there are none."""
        ...

    # GPM (Hopper and newer)
    def nvmlGpmQueryDeviceSupport(self, handle: Handle) -> Any:
        """Return whether the GPU supports GPM, in `.isSupportedDevice`."""
        ...
    def nvmlGpmSampleAlloc(self) -> Any:
        """Allocate a GPM sample buffer."""
        ...
    def nvmlGpmSampleFree(self, sample: Any) -> None:
        """Free a GPM sample buffer."""
        ...
    def nvmlGpmSampleGet(self, handle: Handle, sample: Any) -> Any:
        """Take a GPM sample of the whole GPU into the buffer."""
        ...
    def nvmlGpmMigSampleGet(self, handle: Handle, gpu_instance_id: int, sample: Any) -> Any:
        """Take a GPM sample of one MIG GPU instance into the buffer."""
        ...
    def nvmlGpmMetricsGet(self, metrics_get: Any) -> Any:
        """Compute GPM metrics from two samples: the `c_nvmlGpmMetricsGet_t` passed in holds the
        version, the metric count, both samples and each `metrics[i].metricId`, and the call
        fills each `metrics[i].value` and `.nvmlReturn`."""
        ...

    # XID events
    def nvmlEventSetCreate(self) -> Any:
        """Create an event set to register devices on."""
        ...
    def nvmlDeviceRegisterEvents(self, handle: Handle, event_types: int, event_set: Any) -> None:
        """Ask for the device's events of these types to be delivered to the event set."""
        ...
    def nvmlEventSetWait_v2(self, event_set: Any, timeout_ms: int) -> Any:
        """Wait up to `timeout_ms` for an event and return it, as a struct with `.device` (a
        handle), `.eventType`, `.eventData` (the XID), `.gpuInstanceId` and `.computeInstanceId`;
        raise TIMEOUT when nothing came."""
        ...
    def nvmlEventSetFree(self, event_set: Any) -> None:
        """Free an event set."""
        ...


def load_pynvml() -> NvmlLib:
    """Return the pynvml module, typed as this protocol; raise ImportError when pynvml is not
    installed."""
    import pynvml

    lib: NvmlLib = pynvml  # pynvml carries no types: it is taken at its word
    return lib

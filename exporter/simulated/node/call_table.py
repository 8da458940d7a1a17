"""Every NVML call a simulated GPU answers from plain values, described once for both
simulators: limits, thresholds, PCIe link, BAR1, modes, infoROM, memory error counters,
affinity, NVLink state and error counters, fabric registration, platform and health structs.

Each `SimCall` (see `call_shapes`) is read by both simulated NVMLs. The built-in node
(`SimNvml`, the demo's and the in-process tests') answers it through `api_table` from the
entry's demo figure. The test library (tests/nvmlsim, a real `libnvidia-ml.so.1` driven
through pynvml's ctypes path) generates its C entry point from the entry at build time and
answers from its scenario's value under the entry's key. A new field read through another
such call is one more entry here.

Demo figures follow the captures (`boards.BOARD_FIGURES`): what they show as N/A or
"deprecated" (fan, application clocks, auto boost, per-location ECC counters on Hopper)
answers NOT_SUPPORTED, as the driver does. `COMPUTED` lists the calls each simulator
answers by its own mechanism instead: enumeration, the MIG tree, values that move with
time, field values, GPM, events, processes, PRM registers.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pynvml

from exporter.simulated.node import profiles as P
from exporter.simulated.node.call_shapes import (
    Form,
    Handles,
    Member,
    ReturnCode,
    SimCall,
    Struct,
    Text,
    Value,
    Values,
    Words,
)
from exporter.simulated.node.core import Asked, fail

_MIB = 1024 * 1024
_PSTATE_IDLE, _PSTATE_BUSY = 8, 0
_VIRTUALIZATION_PASSTHROUGH = 2
"""NVML_GPU_VIRTUALIZATION_MODE_PASSTHROUGH: the capture's "Pass-Through"."""
_BRAND_NVIDIA = 14
"""NVML_BRAND_NVIDIA: "Product Brand: NVIDIA" in every capture."""
_NOT_REPORTED = 0xFF
"""What Platform Info's byte members hold where the capture shows N/A."""

CLOCKS = (0, 1, 2, 3)  # NVML_CLOCK_GRAPHICS, _SM, _MEM, _VIDEO
THRESHOLDS = tuple(range(8))  # NVML_TEMPERATURE_THRESHOLD_SHUTDOWN .. _GPS_CURR
ERROR_TYPES = COUNTER_TYPES = (0, 1)  # corrected / uncorrected; volatile / aggregate
LOCATIONS = tuple(range(8))  # NVML_MEMORY_LOCATION_L1_CACHE .. _SRAM
INFOROM_OBJECTS = tuple(range(4))  # NVML_INFOROM_OEM, _ECC, _POWER, _DEN
NVLINK_COUNTERS = tuple(range(5))  # NVML_NVLINK_ERROR_DL_REPLAY .. _ECC_DATA
AFFINITY_SCOPES = (0, 1)  # NVML_AFFINITY_SCOPE_NODE, _SOCKET
SET_SIZES = (4,)  # DCGM asks for 4 words (256 CPUs / NUMA nodes)
GPU_INSTANCE_PROFILES = tuple(range(0x12))  # nvml.h 13: _1_SLICE (0) .. 0x11

_ECC_LOCATIONS_REPORTED = {pynvml.NVML_MEMORY_LOCATION_DEVICE_MEMORY,
                           pynvml.NVML_MEMORY_LOCATION_SRAM}
"""The memory locations Hopper and Ada report ECC counts for (the others read N/A)."""
_GI_PROFILE_SLICES = {
    pynvml.NVML_GPU_INSTANCE_PROFILE_1_SLICE: 1, pynvml.NVML_GPU_INSTANCE_PROFILE_2_SLICE: 2,
    pynvml.NVML_GPU_INSTANCE_PROFILE_3_SLICE: 3, pynvml.NVML_GPU_INSTANCE_PROFILE_4_SLICE: 4,
    pynvml.NVML_GPU_INSTANCE_PROFILE_7_SLICE: 7,
    pynvml.NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV1: 1,
    pynvml.NVML_GPU_INSTANCE_PROFILE_2_SLICE_REV1: 2,
    pynvml.NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV2: 1,
}
"""The GPU instance profiles of a 7-slice A100/H100/H200 (1g, 2g, 3g, 4g, 7g, 1g+me, 2g+me
(not on Hopper: answered anyway), 1g.2xgb); the others answer NOT_SUPPORTED."""


def _max_clock(a: Asked, clock: int) -> int:
    b = a.board
    return (b.sm_clock_max_mhz, b.sm_clock_max_mhz, b.mem_clock_max_mhz,
            a.figures.max_video_clock_mhz)[clock]


def _threshold(a: Asked, threshold: int) -> int | None:
    f = a.figures
    return {pynvml.NVML_TEMPERATURE_THRESHOLD_SHUTDOWN: f.temp_shutdown_c,
            pynvml.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN: f.temp_slowdown_c,
            pynvml.NVML_TEMPERATURE_THRESHOLD_GPU_MAX: f.temp_limit_c,
            pynvml.NVML_TEMPERATURE_THRESHOLD_MEM_MAX: f.mem_temp_max_c}.get(threshold)


def _bar1(a: Asked) -> dict[str, int]:
    """Answer per MIG device too (DCGM reads BAR1 of a GPU instance through its MIG handle): the
    GPU instance's share of the slices."""
    total = a.figures.bar1_total_mib * _MIB
    if a.mig is not None:
        total = total * a.mig.gi.slices // 7
    return {"bar1Total": total, "bar1Used": _MIB, "bar1Free": total - _MIB}


def _remapper(a: Asked) -> dict[str, int]:
    remapped = a.dyn.remapped_rows(a.t)[1]
    banks = a.figures.bank_remap_max
    return {"max": max(0, banks - remapped), "high": min(remapped, banks), "partial": 0,
            "low": 0, "none": 0}


def _ecc(a: Asked, error_type: int, counter_type: int, location: int) -> int | None:
    if location not in _ECC_LOCATIONS_REPORTED:
        return None
    if location == pynvml.NVML_MEMORY_LOCATION_SRAM:
        return 0
    aggregate = counter_type == pynvml.NVML_AGGREGATE_ECC
    sbe, dbe = a.dyn.ecc_aggregate(a.t) if aggregate else a.dyn.ecc_volatile(a.t)
    return sbe if error_type == pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED else dbe


def _cpus(a: Asked, size: int) -> list[int]:
    """Answer as two sockets of 56 cores (112 threads): GPUs 0-3 on the first, 4-7 on the second."""
    words = [0] * size
    first = 0 if a.gpu.index < 4 else 56
    for cpu in (*range(first, first + 56), *range(first + 112, first + 168)):
        if cpu // 64 < size:
            words[cpu // 64] |= 1 << (cpu % 64)
    return words


def _numa_nodes(a: Asked, size: int, scope: int) -> list[int]:  # noqa: ARG001 (NVML's scope)
    words = [0] * size
    words[0] = 1 << (0 if a.gpu.index < 4 else 1)
    return words


def _fabric(a: Asked) -> dict[str, int] | None:
    """Answer that registration completed without error, as every NVLink capture shows; boards
    without NVLink have no fabric."""
    if not a.board.nvlink_links:
        return None
    return {"state": pynvml.NVML_GPU_FABRIC_STATE_COMPLETED, "status": 0}


def _platform(a: Asked) -> dict[str, int] | None:
    """Answer with the Module Id only (7 on the H100 capture, 1 on the H200 and L40S ones);
    none where no capture shows it."""
    module = a.figures.module_id
    return None if module is None else {"moduleId": module}


def _licensing(state: int | None) -> Any:
    """Return the vGPU feature's state; None: licensing not supported (the pass-through boards)."""
    features = pynvml.c_nvmlGridLicensableFeatures_v4_t()
    if state is not None:
        features.isGridLicenseSupported, features.licensableFeaturesCount = 1, 1
        feature = features.gridLicensableFeatures[0]
        feature.featureCode = pynvml.NVML_GRID_LICENSE_FEATURE_CODE_VGPU
        feature.featureState = state
    return features


def _profile_info(slices: int | None, profile: int) -> Any:
    if slices is None:
        fail(pynvml.NVML_ERROR_NOT_SUPPORTED)
    info = pynvml.c_nvmlGpuInstanceProfileInfo_v2_t()
    info.id, info.sliceCount = profile, slices
    return info


def _slices(a: Asked, profile: int) -> int | None:
    return _GI_PROFILE_SLICES.get(profile) if a.board.mig_capable else None


def _fixed(value: Any) -> Callable[..., Any]:
    """Return a figure that is the same on every board, whatever the arguments."""
    return lambda *_: value


_no = _fixed(None)


_GPU, _DEVICE, _LINK, _SYSTEM = Handles.GPU, Handles.DEVICE, Handles.LINK, Handles.SYSTEM
_ONE = Value()

CALLS: tuple[SimCall, ...] = (
    # clocks, P-state, thresholds, power limits
    SimCall("nvmlDeviceGetMaxClockInfo", _ONE, _max_clock, (CLOCKS,)),
    SimCall("nvmlDeviceGetApplicationsClock", _ONE, _no, (CLOCKS,)),  # "deprecated"
    SimCall("nvmlDeviceGetAutoBoostedClocksEnabled", Values(2), _no),
    SimCall("nvmlDeviceGetFanSpeed", _ONE, _no),  # passively cooled boards: N/A
    SimCall("nvmlDeviceGetPerformanceState", _ONE,
            lambda a: _PSTATE_BUSY if a.dyn.activity(a.t) > 0.05 or a.gpu.mig_on
            else _PSTATE_IDLE),
    SimCall("nvmlDeviceGetTemperatureThreshold", _ONE, _threshold, (THRESHOLDS,)),
    SimCall("nvmlDeviceGetMarginTemperature",
            Value(member="marginTemperature", version="nvmlMarginTemperature_v1"),
            lambda a: a.figures.temp_limit_c - a.dyn.gpu_temp_c(a.t)),
    SimCall("nvmlDeviceGetPowerManagementLimitConstraints", Values(2),
            lambda a: (int(a.figures.power_limit_min_w * 1000),
                       int(a.figures.power_limit_max_w * 1000))),
    SimCall("nvmlDeviceGetPowerManagementDefaultLimit", _ONE,
            lambda a: int(a.board.power_limit_w * 1000)),
    SimCall("nvmlDeviceGetEnforcedPowerLimit", _ONE, lambda a: int(a.board.power_limit_w * 1000)),
    # PCIe link, BAR1, modes
    SimCall("nvmlDeviceGetMaxPcieLinkGeneration", _ONE, lambda a: a.figures.pcie_gen),
    SimCall("nvmlDeviceGetCurrPcieLinkGeneration", _ONE, lambda a: a.figures.pcie_gen),
    SimCall("nvmlDeviceGetMaxPcieLinkWidth", _ONE, lambda a: a.figures.pcie_width),
    SimCall("nvmlDeviceGetCurrPcieLinkWidth", _ONE, lambda a: a.figures.pcie_width),
    SimCall("nvmlDeviceGetBAR1MemoryInfo",
            Struct((Member("bar1Total"), Member("bar1Used"), Member("bar1Free")),
                   "c_nvmlBAR1Memory_t"), _bar1, handles=_DEVICE),
    SimCall("nvmlDeviceGetComputeMode", _ONE, _fixed(pynvml.NVML_COMPUTEMODE_DEFAULT)),
    SimCall("nvmlDeviceGetPersistenceMode", _ONE, _fixed(pynvml.NVML_FEATURE_ENABLED)),
    SimCall("nvmlDeviceGetVirtualizationMode", _ONE, _fixed(_VIRTUALIZATION_PASSTHROUGH)),
    SimCall("nvmlDeviceGetCudaComputeCapability", Values(2),
            lambda a: a.figures.compute_capability),
    SimCall("nvmlDeviceGetBrand", _ONE, _fixed(_BRAND_NVIDIA)),
    # infoROM and board strings (the captures' serial numbers are redacted: zeros)
    SimCall("nvmlDeviceGetInforomConfigurationChecksum", _ONE,
            lambda a: 0x5A3C0000 + a.board.pci_device_id % 0xFFFF),
    SimCall("nvmlDeviceValidateInforom", ReturnCode("NVML_ERROR_CORRUPTED_INFOROM"),
            lambda a: a.dyn.inforom_valid(a.t)),
    SimCall("nvmlDeviceGetSerial", Text(), _fixed("0000000000000")),
    SimCall("nvmlDeviceGetVbiosVersion", Text(), lambda a: a.figures.vbios),
    SimCall("nvmlDeviceGetInforomImageVersion", Text(), lambda a: a.figures.inforom_image),
    SimCall("nvmlDeviceGetInforomVersion", Text(),  # the power object reads N/A
            lambda a, obj: {pynvml.NVML_INFOROM_OEM: a.figures.inforom_oem,
                            pynvml.NVML_INFOROM_ECC: a.figures.inforom_ecc}.get(obj),
            (INFOROM_OBJECTS,)),
    # memory errors and health
    SimCall("nvmlDeviceGetRowRemapperHistogram",
            Struct(tuple(Member(m) for m in ("max", "high", "partial", "low", "none")),
                   "c_nvmlRowRemapperHistogramValues"), _remapper),
    SimCall("nvmlDeviceGetMemoryErrorCounter", _ONE, _ecc,
            (ERROR_TYPES, COUNTER_TYPES, LOCATIONS)),
    SimCall("nvmlDeviceGetSramEccErrorStatus",  # "SRAM Threshold Exceeded: No"
            Struct((Member("bThresholdExceeded"),), version="nvmlEccSramErrorStatus_v1",
                   cleared=True), _fixed({"bThresholdExceeded": 0})),
    SimCall("nvmlDeviceGetUnrepairableMemoryFlag_v1",  # Hopper and newer; N/A on the L40S
            Struct((Member("bUnrepairableMemory"),)),
            lambda a: {"bUnrepairableMemory": 0} if a.figures.compute_capability >= (9, 0)
            else None),
    SimCall("nvmlDeviceGetPlatformInfo",
            Struct((Member("moduleId"),
                    *(Member(m, _NOT_REPORTED) for m in
                      ("slotNumber", "trayIndex", "hostId", "peerType")),
                    Member("ibGuid", 0, Form.BYTES),
                    Member("chassisSerialNumber", _NOT_REPORTED, Form.TEXT)),
                   version="nvmlPlatformInfo_v2", cleared=True), _platform),
    SimCall("nvmlDeviceGetGridLicensableFeatures", Value(), _no,  # no vGPU licensing
            symbols=("nvmlDeviceGetGridLicensableFeatures_v4",), c_by_hand=True,
            shape=_licensing),
    SimCall("nvmlDeviceGetGpuInstanceProfileInfo", Value(), _slices, (GPU_INSTANCE_PROFILES,),
            symbols=("nvmlDeviceGetGpuInstanceProfileInfoV",
                     "nvmlDeviceGetGpuInstanceProfileInfo"), c_by_hand=True,
            shape=_profile_info),
    # affinity
    SimCall("nvmlDeviceGetCpuAffinity", Words(), _cpus, (SET_SIZES,)),
    SimCall("nvmlDeviceGetMemoryAffinity", Words(), _numa_nodes, (SET_SIZES, AFFINITY_SCOPES)),
    # NVLink
    SimCall("nvmlDeviceGetGpuFabricInfoV",
            Struct((Member("state"), *(Member(m, 0) for m in
                                       ("status", "cliqueId", "healthMask", "healthSummary")),
                    Member("clusterUuid", 0, Form.HEX)), version="nvmlGpuFabricInfo_v3"),
            _fabric),
    SimCall("nvmlDeviceGetNvLinkState", Value(unset=pynvml.NVML_FEATURE_ENABLED),
            lambda a, link: pynvml.NVML_FEATURE_ENABLED if a.dyn.link_up(a.t, link)
            else pynvml.NVML_FEATURE_DISABLED, handles=_LINK),
    SimCall("nvmlDeviceGetNvLinkErrorCounter", Value(unset=0),
            lambda a, link, counter: a.dyn.nvlink_errors(a.t, link, counter),
            (NVLINK_COUNTERS,), handles=_LINK),
    # the node
    SimCall("nvmlSystemGetCudaDriverVersion_v2", Value(unset=P.CUDA_DRIVER_VERSION),
            _fixed(P.CUDA_DRIVER_VERSION), handles=_SYSTEM),
    SimCall("nvmlSystemGetConfComputeState",  # confidential computing off, as in every capture
            Struct(tuple(Member(m, 0) for m in ("environment", "ccFeature", "devToolsMode")),
                   "c_nvmlConfComputeSystemState_t"), _fixed({}), handles=_SYSTEM),
)

CALLS_BY_NAME: dict[str, SimCall] = {c.function: c for c in CALLS}

COMPUTED = frozenset({
    # life cycle, system, enumeration and identity
    "nvmlInit", "nvmlInitWithFlags", "nvmlShutdown", "nvmlSystemGetDriverVersion",
    "nvmlSystemGetNVMLVersion", "nvmlDeviceGetCount", "nvmlDeviceGetHandleByIndex",
    "nvmlDeviceGetHandleByUUID", "nvmlDeviceGetIndex", "nvmlDeviceGetMinorNumber",
    "nvmlDeviceGetUUID", "nvmlDeviceGetName", "nvmlDeviceGetPciInfo", "nvmlDeviceGetPciInfo_v3",
    # the MIG tree
    "nvmlDeviceGetMigMode", "nvmlDeviceGetMaxMigDeviceCount",
    "nvmlDeviceGetMigDeviceHandleByIndex", "nvmlDeviceIsMigDeviceHandle",
    "nvmlDeviceGetGpuInstanceId", "nvmlDeviceGetComputeInstanceId",
    "nvmlDeviceGetDeviceHandleFromMigDeviceHandle", "nvmlDeviceGetAttributes_v2",
    "nvmlDeviceGetGpuInstanceById", "nvmlGpuInstanceGetInfo",
    "nvmlDeviceGetGpuInstanceProfileInfoByIdV",
    # values that move with time (the test library: its named device keys)
    "nvmlDeviceGetClockInfo", "nvmlDeviceGetTemperature", "nvmlDeviceGetPowerUsage",
    "nvmlDeviceGetPowerManagementLimit", "nvmlDeviceGetTotalEnergyConsumption",
    "nvmlDeviceGetPcieReplayCounter", "nvmlDeviceGetUtilizationRates",
    "nvmlDeviceGetEncoderUtilization", "nvmlDeviceGetDecoderUtilization",
    "nvmlDeviceGetMemoryInfo", "nvmlDeviceGetRemappedRows",
    "nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetFieldValues",
    # GPM, XID events, processes
    "nvmlGpmQueryDeviceSupport", "nvmlGpmSampleAlloc", "nvmlGpmSampleFree", "nvmlGpmSampleGet",
    "nvmlGpmMigSampleGet", "nvmlGpmMetricsGet", "nvmlEventSetCreate", "nvmlDeviceRegisterEvents",
    "nvmlEventSetWait_v2", "nvmlEventSetFree", "nvmlDeviceGetComputeRunningProcesses",
    "nvmlDeviceGetMPSComputeRunningProcesses_v3", "nvmlDeviceGetProcessUtilization",
    # NVLink registers (a TLV each simulator packs) and the P2P status towards a peer handle
    "nvmlDeviceReadWritePRM_v1", "nvmlDeviceReadPRMCounters_v1", "nvmlDeviceGetP2PStatus",
})
"""The calls (pynvml's names) both simulators answer by a mechanism of their own, not from a
value under a key: every other call either simulator answers is an entry of `CALLS`."""

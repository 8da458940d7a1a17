"""Fields read through a struct, a return code or a composed value (`struct_reads`): on the
simulated node as the captures show them, and DCGM's rules for each conversion."""

from __future__ import annotations

import ctypes
from collections.abc import Iterator
from typing import Any

import pynvml
import pytest

from exporter.devices.convert import CONVERTERS, LABEL_CONVERTERS
from exporter.devices.fabric import FabricInfo
from exporter.devices.model import Readings
from exporter.devices.nvml import NvmlBackend
from exporter.devices.prm import (
    PpcntCounters,
    PrmCounter,
    PrmCounterList,
    PrmTlv,
    local_port,
    ppcnt_request,
)
from exporter.devices.struct_reads import (
    PLATFORM_INFO_V2,
    SRAM_ECC_ERROR_STATUS_V1,
    STRUCT_READS,
    UnrepairableMemoryStatus,
)
from exporter.fields.catalog import Convert, FieldSpec
from exporter.fields.csv import parse_collectors
from exporter.simulated.node import SimNvml
from tests.support.clock import FakeClock

NUMBERS = """\
DCGM_FI_DEV_SRAM_EXCEEDED, gauge, x
DCGM_FI_DEV_MEMORY_UNREPAIRABLE, gauge, x
DCGM_FI_DEV_INFOROM_VALID, gauge, x
DCGM_FI_DEV_MIG_MAX_SLICES, gauge, x
DCGM_FI_DEV_VGPU_LICENSE_STATUS, gauge, x
DCGM_FI_DEV_PLATFORM_MODULE_ID, gauge, x
DCGM_FI_DEV_PLATFORM_CHASSIS_SLOT_NUMBER, gauge, x
DCGM_FI_DEV_PLATFORM_HOST_ID, gauge, x
DCGM_FI_DEV_FABRIC_MANAGER_ERROR, gauge, x
DCGM_FI_DEV_GPU_BRAND, label, x
DCGM_FI_DEV_PLATFORM_CHASSIS_SERIAL_NUMBER, label, x
DCGM_FI_DEV_PLATFORM_INFINIBAND_GUID, label, x
DCGM_FI_DEV_FABRIC_CLUSTER_UUID, label, x
"""


def _specs() -> tuple[FieldSpec, ...]:
    return parse_collectors(NUMBERS, "c.csv").specs


@pytest.fixture
def poll() -> Iterator[Any]:
    backends: list[NvmlBackend] = []

    def run(profile: str) -> Readings:
        clock = FakeClock(start=1_700_000_000.0)
        backend = NvmlBackend(SimNvml(profile, seed=5, clock=clock), _specs(), clock=clock,
                              wall_clock=clock)
        backends.append(backend)
        backend.start()
        return backend.poll()
    yield run
    for backend in backends:
        backend.close()


def test_hopper_values_are_the_captures(poll: Any) -> None:
    readings = poll("h100-8")
    values = readings.values[(0, -1)]
    # "SRAM Threshold Exceeded: No", "Unrepairable Memory: No", infoROM valid, MIG off,
    # no vGPU licensing, Platform Info's "Module Id: 7" with the rest N/A (0xFF: left out),
    # fabric registration "Completed", "Success".
    assert values == {
        "DCGM_FI_DEV_SRAM_EXCEEDED": 0.0, "DCGM_FI_DEV_MEMORY_UNREPAIRABLE": 0.0,
        "DCGM_FI_DEV_INFOROM_VALID": 1.0, "DCGM_FI_DEV_MIG_MAX_SLICES": 0.0,
        "DCGM_FI_DEV_VGPU_LICENSE_STATUS": 0.0, "DCGM_FI_DEV_PLATFORM_MODULE_ID": 7.0,
        "DCGM_FI_DEV_PLATFORM_HOST_ID": 255.0, "DCGM_FI_DEV_FABRIC_MANAGER_ERROR": 0.0}
    # "Product Brand: NVIDIA", "ClusterUUID: 00000000-...", chassis serial N/A: no label.
    assert readings.labels[(0, -1)] == {
        "DCGM_FI_DEV_GPU_BRAND": "NVIDIA",
        "DCGM_FI_DEV_PLATFORM_INFINIBAND_GUID": "0x0000000000000000",
        "DCGM_FI_DEV_FABRIC_CLUSTER_UUID": "00000000-0000-0000-0000-000000000000"}


def test_mig_max_slices_is_the_largest_profile_on_a_mig_gpu(poll: Any) -> None:
    readings = poll("h200-mig")
    assert readings.values[(0, -1)]["DCGM_FI_DEV_MIG_MAX_SLICES"] == 7.0  # MIG on: 7g
    assert readings.values[(2, -1)]["DCGM_FI_DEV_MIG_MAX_SLICES"] == 0.0  # MIG off


def test_a_board_without_them_omits_them(poll: Any) -> None:
    readings = poll("l4-1")
    values = readings.values[(0, -1)]
    assert "DCGM_FI_DEV_MEMORY_UNREPAIRABLE" not in values  # Hopper and newer: N/A on Ada
    assert "DCGM_FI_DEV_FABRIC_MANAGER_ERROR" not in values  # no NVLink fabric
    assert values["DCGM_FI_DEV_MIG_MAX_SLICES"] == 0.0  # no MIG: DCGM's 0


def test_struct_sizes_are_nvml_h_versions() -> None:
    # NVML_STRUCT_VERSION(x, v) = sizeof | v << 24, as pynvml also states them.
    assert pynvml.nvmlEccSramErrorStatus_v1 == SRAM_ECC_ERROR_STATUS_V1
    assert pynvml.nvmlPlatformInfo_v2 == PLATFORM_INFO_V2
    assert ctypes.sizeof(UnrepairableMemoryStatus) == 4  # nvml.h: the flag alone


def test_inforom_validity_is_the_return_code() -> None:
    class Lib:
        code = 0

        def nvmlDeviceValidateInforom(self, handle: object) -> None:  # noqa: ARG002
            if self.code:
                raise pynvml.NVMLError(self.code)

    lib = Lib()
    read = STRUCT_READS["nvmlDeviceValidateInforom"](lib, object())
    assert read() == 1
    lib.code = pynvml.NVML_ERROR_CORRUPTED_INFOROM
    assert read() == 0
    lib.code = pynvml.NVML_ERROR_UNKNOWN  # any other error: no value, as DCGM
    with pytest.raises(pynvml.NVMLError):
        read()


@pytest.mark.parametrize(("state", "status", "want"), [
    (0, 0, None), (1, 0, None), (2, 0, None),  # not supported, not started, in progress
    (3, 0, 0.0), (3, 3, -6.0), (3, 4, -17.0), (3, 6, -14.0), (3, 10, -11.0), (3, 15, -18.0),
    (3, 16, -19.0), (3, 2, -1.0), (3, 23, -49.0), (3, 1, -56.0), (3, 999, -8.0),
    (3, 25, -8.0), (7, 0, -1.0),
])
def test_fabric_manager_error_is_dcgms_return_code(state: int, status: int,
                                                   want: float | None) -> None:
    info = FabricInfo(state=state, status=status)
    assert CONVERTERS[Convert.FABRIC_MANAGER_ERROR](info) == want


def _features(supported: int, *features: tuple[int, int]) -> Any:
    answer = pynvml.c_nvmlGridLicensableFeatures_v4_t()
    answer.isGridLicenseSupported = supported
    answer.licensableFeaturesCount = len(features)
    for entry, (code, state) in zip(answer.gridLicensableFeatures, features, strict=False):
        entry.featureCode, entry.featureState = code, state
    return answer


@pytest.mark.parametrize(("features", "want"), [
    (_features(0), 0.0),  # licensing not supported
    (_features(1, (1, 1)), 1.0), (_features(1, (1, 0)), 0.0),
    (_features(1, (2, 1), (1, 3)), 1.0),  # the vGPU feature, wherever it is listed
    (_features(1, (2, 1)), None),  # no vGPU feature listed: no value
])
def test_vgpu_license_status(features: Any, want: float | None) -> None:
    assert CONVERTERS[Convert.VGPU_LICENSED](features) == want


@pytest.mark.parametrize(("convert", "raw", "want"), [
    (Convert.BRAND_NAME, 2, "Tesla"), (Convert.BRAND_NAME, 14, "NVIDIA"),
    (Convert.BRAND_NAME, 19, "Unknown"),
    (Convert.GUID_HEX, bytes([0x60, 0x5F, 0x4E, 0x3D, 0x2C, 0x1B, 0x0A, 0, 9, 9]),
     "0x000a1b2c3d4e5f60"),  # little-endian, bytes 8-15 ignored
    (Convert.SERIAL_BYTES, b"1650924060012\0\0\0", "1650924060012"),
    (Convert.SERIAL_BYTES, b"\xff" * 16, None), (Convert.SERIAL_BYTES, b"\0abc", None),
    (Convert.UUID_BYTES, FabricInfo(state=3, clusterUuid=(ctypes.c_uint8 * 16)(*range(16))),
     "00010203-0405-0607-0809-0a0b0c0d0e0f"),
    (Convert.UUID_BYTES, FabricInfo(state=2), None),  # registration in progress: no UUID yet
])
def test_label_conversions(convert: Convert, raw: Any, want: str | None) -> None:
    assert LABEL_CONVERTERS[convert](raw) == want


def test_platform_numbers_left_out_at_0xff() -> None:
    assert CONVERTERS[Convert.UNSET_0XFF](0xFF) is None
    assert CONVERTERS[Convert.UNSET_0XFF](3) == 3.0


PRM = """\
DCGM_FI_DEV_NVLINK_PPCNT_RECOVERY_SUCCESSFUL_TOTAL, counter, x
DCGM_FI_DEV_NVLINK_PPCNT_RECOVERY_TIME_SINCE_LAST, gauge, x
DCGM_FI_DEV_NVLINK_PPCNT_PHYSICAL_LINK_DOWN_TOTAL, counter, x
DCGM_FI_DEV_NVLINK_PPCNT_PLR_RX_CODE_TOTAL, counter, x
DCGM_FI_DEV_NVLINK_PPCNT_PLR_TX_RETRY_CODE_TOTAL, counter, x
DCGM_FI_DEV_NVLINK_PPRM_OPER_RECOVERY, gauge, x
DCGM_FI_DEV_NVLINK_PPCNT_IBPC_TX_WAIT_TOTAL, counter, x
"""


def test_prm_link_counters_on_the_simulated_node() -> None:
    clock = FakeClock(start=1_700_000_000.0)
    lib = SimNvml("h100-8", seed=5, clock=clock)
    backend = NvmlBackend(lib, parse_collectors(PRM, "c.csv").specs, clock=clock,
                          wall_clock=clock)
    backend.start()
    try:
        first = backend.poll()
        clock.advance(60)
        second = backend.poll()
    finally:
        backend.close()
    assert sorted(k for k in second.links if k[0] == 0) == [(0, n) for n in range(18)]
    before, after = first.links[(0, 3)], second.links[(0, 3)]
    assert after["DCGM_FI_DEV_NVLINK_PPCNT_PHYSICAL_LINK_DOWN_TOTAL"] == 0
    assert after["DCGM_FI_DEV_NVLINK_PPRM_OPER_RECOVERY"] == 0
    assert after["DCGM_FI_DEV_NVLINK_PPCNT_RECOVERY_TIME_SINCE_LAST"] == \
        before["DCGM_FI_DEV_NVLINK_PPCNT_RECOVERY_TIME_SINCE_LAST"] + 60
    # Codes flow with the link's traffic: a busy minute moves them on.
    assert after["DCGM_FI_DEV_NVLINK_PPCNT_PLR_RX_CODE_TOTAL"] > \
        before["DCGM_FI_DEV_NVLINK_PPCNT_PLR_RX_CODE_TOTAL"]
    # One PPCNT read per group and link (18 links, 3 groups: 0x1A, 0x12, 0x22), one
    # counter read per counter and link.
    assert lib.calls["nvmlDeviceReadWritePRM_v1"] == 2 * 8 * 18 * 3
    assert lib.calls["nvmlDeviceReadPRMCounters_v1"] == 2 * 8 * 18 * 2


def test_ppcnt_request_is_dcgms_packing() -> None:
    tlv = ppcnt_request(0, 0x1A)
    # Operation TLV (query of PPCNT), register TLV of 62 words, local port 1, group 0x1A.
    assert bytes(tlv.data[:28]).hex() == (
        "08040000" "50080101" "00000000" "00000000" "183e0000" "0001001a" "00000000")
    assert not any(tlv.data[28:])
    assert tlv.dataSize == 264
    assert ppcnt_request(35, 0x22).dataSize == 268
    assert bytes(ppcnt_request(35, 0x22).data[16:24]).hex() == "183f0000" "00240022"


def test_a_ppcnt_reply_dcgm_would_reject_gives_no_values() -> None:
    good = bytearray(ppcnt_request(2, 0x12).data)
    good[220:228] = bytes.fromhex("00000007" "00000009")
    assert vars(PpcntCounters(bytes(good), 0x12)) == {
        "link_down_events": 7, "successful_recovery_events": 9}
    for index, byte in ((2, 3), (16, 0x08), (23, 0x1A)):  # status, TLV type, group
        bad = bytearray(good)
        bad[index] = byte
        assert set(vars(PpcntCounters(bytes(bad), 0x12)).values()) == {None}


def test_prm_structs_match_nvml_h() -> None:
    assert ctypes.sizeof(PrmTlv) == 504
    assert ctypes.sizeof(PrmCounter) == ctypes.sizeof(pynvml.c_nvmlPRMCounter_v1_t) == 24
    assert ctypes.sizeof(PrmCounterList) == 16
    assert local_port(0, 1001) == 1  # PPRM: link index + 1
    assert local_port(0, 201) == 0  # PORT_XMIT_WAIT: the link index itself


def test_p2p_on_the_simulated_node() -> None:
    clock = FakeClock(start=1_700_000_000.0)
    specs = parse_collectors("DCGM_FI_DEV_NVLINK_P2P_STATUS, gauge, x\n"
                             "DCGM_EXP_P2P_STATUS, gauge, x\n", "c.csv").specs
    backend = NvmlBackend(SimNvml("h200-mig", seed=5, clock=clock), specs, clock=clock,
                          wall_clock=clock)
    backend.start()
    try:
        readings = backend.poll()
    finally:
        backend.close()
    # GPUs 0 and 1 run MIG: no NVLink P2P to or from them; 2-7 reach each other.
    assert readings.values[(0, -1)]["DCGM_FI_DEV_NVLINK_P2P_STATUS"] == 0
    assert readings.values[(2, -1)]["DCGM_FI_DEV_NVLINK_P2P_STATUS"] == 0b11111000
    assert len(readings.peers) == 8 * 7
    assert readings.peers[(2, 3)] == {"DCGM_EXP_P2P_STATUS": 0.0}
    assert readings.peers[(2, 0)] == {"DCGM_EXP_P2P_STATUS": 5.0}  # NotSupported


def test_cuda_visible_devices_per_entity() -> None:
    clock = FakeClock(start=1_700_000_000.0)
    lib = SimNvml("h200-mig", seed=5, clock=clock)
    specs = parse_collectors("DCGM_FI_DEV_FB_USED, gauge, x\n"
                             "DCGM_FI_CUDA_GPU_VISIBLE_DEVICES, label, x\n", "c.csv").specs
    backend = NvmlBackend(lib, specs, clock=clock, wall_clock=clock)
    backend.start()
    try:
        labels = backend.poll().labels
        uuid = {n: lib.nvmlDeviceGetUUID(lib.nvmlDeviceGetHandleByIndex(n)) for n in (0, 2)}
    finally:
        backend.close()
    name = "DCGM_FI_CUDA_GPU_VISIBLE_DEVICES"
    assert uuid[0].startswith("GPU-")
    # DCGM's strings: the UUID; with MIG on, MIG- before it; on a GPU instance, /<gi> after.
    assert labels[(2, -1)][name] == uuid[2]
    assert labels[(0, -1)][name] == f"MIG-{uuid[0]}"
    instances = {gi: value[name] for (gpu, gi), value in labels.items() if gpu == 0 and gi >= 0}
    assert len(instances) == 4
    assert instances == {gi: f"MIG-{uuid[0]}/{gi}" for gi in instances}


class _Without:
    """The simulated node without some functions (a stand-in library that lacks them)."""

    def __init__(self, lib: SimNvml, *missing: str) -> None:
        self._lib, self._missing = lib, missing

    def __getattr__(self, name: str) -> Any:
        if name in self._missing:
            raise AttributeError(name)
        return getattr(self._lib, name)


def test_a_library_without_a_struct_call_omits_its_fields() -> None:
    clock = FakeClock(start=1_700_000_000.0)
    lib = _Without(SimNvml("h100-8", seed=5, clock=clock), "nvmlDeviceGetPlatformInfo",
                   "nvmlDeviceReadWritePRM_v1", "nvmlDeviceGetGpuInstanceProfileInfo")
    specs = parse_collectors(NUMBERS + PRM, "c.csv").specs
    backend = NvmlBackend(lib, specs, clock=clock, wall_clock=clock)
    backend.start()
    try:
        readings = backend.poll()
    finally:
        backend.close()
    values = readings.values[(0, -1)]
    assert "DCGM_FI_DEV_PLATFORM_MODULE_ID" not in values
    assert "DCGM_FI_DEV_MIG_MAX_SLICES" not in values
    assert values["DCGM_FI_DEV_SRAM_EXCEEDED"] == 0.0  # the others are read
    assert "DCGM_FI_DEV_PLATFORM_INFINIBAND_GUID" not in readings.labels[(0, -1)]
    link = readings.links[(0, 0)]
    assert "DCGM_FI_DEV_NVLINK_PPCNT_PLR_RX_CODE_TOTAL" not in link
    assert link["DCGM_FI_DEV_NVLINK_PPRM_OPER_RECOVERY"] == 0.0

"""Fields served through the generic readers: how the reference table's rows become specs."""

from __future__ import annotations

import pynvml
import pytest

from exporter.devices.convert import CONVERTERS
from exporter.fields.catalog import (
    HANDLE,
    LINK,
    NVLINK_SCOPE_ALL_LINKS,
    Call,
    Convert,
    FieldRefs,
    FieldSpec,
    GpmLink,
    MetricType,
    Reader,
    Scope,
)
from exporter.fields.dcgm_names import dcgm_names
from exporter.fields.parts import format_part, parse_part
from exporter.simulated.node import SimNvml


def served(name: str) -> FieldSpec:
    table = dcgm_names()
    field = table.field(name)
    assert field is not None, name
    spec = table.served_spec(field)
    assert spec is not None, name
    return spec


@pytest.mark.parametrize(("name", "reader", "part", "convert", "scope", "type_", "unit"), [
    ("DCGM_FI_DEV_PSTATE", Reader.CALL, Call("nvmlDeviceGetPerformanceState"),
     Convert.NONE, Scope.GPU, MetricType.GAUGE, "enum"),
    ("DCGM_FI_DEV_POWER_MGMT_LIMIT_MIN",
     Reader.CALL, Call("nvmlDeviceGetPowerManagementLimitConstraints", (HANDLE,), 0),
     Convert.MILLIWATT_TO_WATT_FLOOR, Scope.GPU, MetricType.GAUGE, "W"),
    ("DCGM_FI_DEV_POWER_MGMT_LIMIT_MAX",
     Reader.CALL, Call("nvmlDeviceGetPowerManagementLimitConstraints", (HANDLE,), 1),
     Convert.MILLIWATT_TO_WATT_FLOOR, Scope.GPU, MetricType.GAUGE, "W"),
    ("DCGM_FI_DEV_FAN_SPEED_RATIO", Reader.CALL, Call("nvmlDeviceGetFanSpeed"),
     Convert.PERCENT_TO_RATIO, Scope.GPU, MetricType.GAUGE, "ratio"),
    ("DCGM_FI_DEV_VIDEO_CLOCK", Reader.CALL,
     Call("nvmlDeviceGetClockInfo", (HANDLE, pynvml.NVML_CLOCK_VIDEO)),
     Convert.NONE, Scope.GPU, MetricType.GAUGE, "MHz"),
    ("DCGM_FI_DEV_PCIE_LINK_WIDTH", Reader.CALL, Call("nvmlDeviceGetCurrPcieLinkWidth"),
     Convert.NONE, Scope.GPU, MetricType.GAUGE, "lanes"),
    ("DCGM_FI_DEV_FB_TOTAL", Reader.MEMORY, "total", Convert.BYTES_TO_MIB, Scope.INSTANCE,
     MetricType.GAUGE, "MiB"),
    ("DCGM_FI_DEV_FB_USED_PERCENT", Reader.MEMORY, None, Convert.FB_USED_RATIO,
     Scope.INSTANCE, MetricType.GAUGE, "ratio"),
    ("DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_L3", Reader.CALL,
     Call("nvmlDeviceGetNvLinkErrorCounter",
          (HANDLE, 3, pynvml.NVML_NVLINK_ERROR_DL_CRC_FLIT)),
     Convert.NONE, Scope.GPU, MetricType.COUNTER, "count"),
    ("DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL", Reader.FIELD_VALUES,
     pynvml.NVML_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL, Convert.NONE, Scope.GPU,
     MetricType.COUNTER, "count"),
    ("DCGM_FI_DEV_NVLINK_BANDWIDTH_L2", Reader.FIELD_VALUES,
     FieldRefs(((pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX, 2),
                (pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, 2))),
     Convert.NONE, Scope.GPU, MetricType.COUNTER, "KiB"),
    ("DCGM_FI_DEV_NVLINK_SYMBOL_BER_RATIO", Reader.FIELD_VALUES,
     FieldRefs(((pynvml.NVML_FI_DEV_NVLINK_COUNT_SYMBOL_BER, NVLINK_SCOPE_ALL_LINKS),)),
     Convert.BER, Scope.GPU, MetricType.GAUGE, "BER"),
    ("DCGM_FI_DEV_POWER_USAGE_INSTANT", Reader.FIELD_VALUES,
     pynvml.NVML_FI_DEV_POWER_INSTANT, Convert.MILLIWATT_TO_WATT, Scope.GPU,
     MetricType.GAUGE, "W"),
    ("DCGM_FI_PROF_PIPE_INT_ACTIVE", Reader.GPM, pynvml.NVML_GPM_METRIC_INTEGER_UTIL,
     Convert.PERCENT_TO_RATIO, Scope.INSTANCE, MetricType.GAUGE, "ratio"),
    ("DCGM_FI_PROF_NVDEC0_ACTIVE", Reader.GPM, pynvml.NVML_GPM_METRIC_NVDEC_0_UTIL,
     Convert.PERCENT_TO_RATIO, Scope.INSTANCE, MetricType.GAUGE, "ratio"),
    ("DCGM_FI_PROF_NVLINK_L0_TX_BYTES", Reader.GPM,
     pynvml.NVML_GPM_METRIC_NVLINK_L0_TX_PER_SEC, Convert.MIB_PER_S_TO_BYTES_PER_S,
     Scope.INSTANCE, MetricType.GAUGE, "bytes/s"),
    ("DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_PER_LINK_TOTAL", Reader.CALL,
     Call("nvmlDeviceGetNvLinkErrorCounter",
          (HANDLE, LINK, pynvml.NVML_NVLINK_ERROR_DL_CRC_FLIT)),
     Convert.NONE, Scope.LINK, MetricType.COUNTER, "count"),
    ("DCGM_FI_DEV_NVLINK_TX_THROUGHPUT_PER_LINK", Reader.FIELD_VALUES,
     FieldRefs(((pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, LINK),)),
     Convert.NONE, Scope.LINK, MetricType.COUNTER, "KiB"),
    ("DCGM_FI_PROF_NVLINK_RX_BYTES_PER_LINK", Reader.GPM, GpmLink(62, 212),
     Convert.MIB_PER_S_TO_BYTES_PER_S, Scope.LINK, MetricType.GAUGE, "bytes/s"),
    ("DCGM_FI_DEV_CPU_AFFINITY_1", Reader.CALL, Call("nvmlDeviceGetCpuAffinity", (HANDLE, 4), 1),
     Convert.NONE, Scope.GPU, MetricType.GAUGE, "bitmask"),
    ("DCGM_FI_DEV_COMPUTE_MODE", Reader.CALL, Call("nvmlDeviceGetComputeMode"),
     Convert.COMPUTE_MODE, Scope.GPU, MetricType.GAUGE, "enum"),
    ("DCGM_FI_CUDA_DRIVER_VERSION", Reader.CALL, Call("nvmlSystemGetCudaDriverVersion_v2", ()),
     Convert.NONE, Scope.GPU, MetricType.GAUGE, ""),
    ("DCGM_FI_DEV_FABRIC_MANAGER_STATUS", Reader.FABRIC, None, Convert.FABRIC_MANAGER_STATUS,
     Scope.GPU, MetricType.GAUGE, "enum"),
    ("DCGM_FI_DEV_FABRIC_HEALTH_MASK", Reader.FABRIC, "healthMask", Convert.NONE, Scope.GPU,
     MetricType.GAUGE, "bitmask"),
    ("DCGM_FI_DEV_SERIAL", Reader.CALL, Call("nvmlDeviceGetSerial"), Convert.NONE, Scope.GPU,
     MetricType.LABEL, ""),
    ("DCGM_FI_DEV_PCI_BUSID", Reader.CALL, Call("nvmlDeviceGetPciInfo_v3", (HANDLE,), "busId"),
     Convert.NONE, Scope.GPU, MetricType.LABEL, ""),
])
def test_a_row_becomes_the_read_dcgm_does(name: str, reader: Reader, part: object,
                                          convert: Convert, scope: Scope, type_: MetricType,
                                          unit: str) -> None:
    spec = served(name)
    assert (spec.reader, spec.part, spec.convert, spec.scope, spec.type, spec.unit) == \
        (reader, part, convert, scope, type_, unit)


def test_a_per_link_gpm_metric_follows_nvml_numbering() -> None:
    tx = GpmLink(pynvml.NVML_GPM_METRIC_NVLINK_L0_TX_PER_SEC,
                 pynvml.NVML_GPM_METRIC_NVLINK_L18_TX_PER_SEC)
    assert [tx.metric(n) for n in (0, 5, 17, 18, 35)] == [
        pynvml.NVML_GPM_METRIC_NVLINK_L0_TX_PER_SEC, pynvml.NVML_GPM_METRIC_NVLINK_L5_TX_PER_SEC,
        pynvml.NVML_GPM_METRIC_NVLINK_L17_TX_PER_SEC,
        pynvml.NVML_GPM_METRIC_NVLINK_L18_TX_PER_SEC,
        pynvml.NVML_GPM_METRIC_NVLINK_L35_TX_PER_SEC]


def test_every_source_survives_the_shipped_text_form() -> None:
    for spec in dcgm_names().served.values():
        assert parse_part(format_part(spec.part)) == spec.part, spec.name


def test_every_call_exists_in_pynvml_and_on_the_simulated_node() -> None:
    sim = SimNvml("h100-8")
    calls = {s.part.function for s in dcgm_names().served.values() if isinstance(s.part, Call)}
    assert len(calls) > 30
    for function in sorted(calls):
        assert callable(getattr(pynvml, function, None)), function
        assert callable(getattr(sim, function, None)), function


@pytest.mark.parametrize(("convert", "raw", "value"), [
    (Convert.MILLIWATT_TO_WATT_FLOOR, 699999, 699.0),
    (Convert.MILLIWATT_TO_WATT, 699999, 699.999),
    (Convert.MHZ_TO_HZ, 1980, 1.98e9),
    (Convert.MILLIJOULE_TO_JOULE, 5500, 5.5),
    (Convert.TRUNCATE, 42.9, 42.0),
    (Convert.COMPUTE_MODE, 0, 0.0),
    (Convert.COMPUTE_MODE, 2, 1.0),  # prohibited
    (Convert.COMPUTE_MODE, 3, 2.0),  # exclusive process
    (Convert.COMPUTE_MODE, 1, None),  # exclusive thread: no DCGM value
    (Convert.COMPUTE_CAPABILITY, (9, 0), float(9 << 16)),
    (Convert.COMPUTE_CAPABILITY, (8, 9), float((8 << 16) | 9)),
    (Convert.BER, 0x0312, 3e-18),
    (Convert.BER, 0, 0.0),
])
def test_conversions(convert: Convert, raw: object, value: float | None) -> None:
    result = CONVERTERS[convert](raw)
    assert result == pytest.approx(value) if value is not None else result is None


def test_fb_used_ratio_leaves_reserved_memory_out() -> None:
    memory = pynvml.c_nvmlMemory_v2_t()
    memory.total, memory.reserved, memory.used = 1000, 200, 200
    assert CONVERTERS[Convert.FB_USED_RATIO](memory) == 0.25
    memory.total = memory.reserved
    assert CONVERTERS[Convert.FB_USED_RATIO](memory) is None


def test_fabric_manager_status_follows_dcgm() -> None:
    from exporter.devices.fabric import FabricInfo

    status = CONVERTERS[Convert.FABRIC_MANAGER_STATUS]
    assert [status(FabricInfo(state=state)) for state in (0, 1, 2)] == [0.0, 1.0, 2.0]
    assert status(FabricInfo(state=3, status=0)) == 3.0  # success
    assert status(FabricInfo(state=3, status=999)) == 4.0  # completed with an error
    assert status(FabricInfo(state=7)) == 5.0  # a state DCGM does not know

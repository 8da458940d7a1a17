"""One NVML call per reader, and the unit conversions of the catalog.

A reader returns the raw parts of its answer keyed by the catalog's `part`; the backend turns
them into exported values with `convert`. Keeping calls and conversions here lets the backend
stay about life cycle and error handling.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Any

from exporter.devices.nvml_api import (
    NVML_CLOCK_MEM,
    NVML_CLOCK_SM,
    NVML_SUCCESS,
    NVML_TEMPERATURE_GPU,
    Handle,
    NvmlLib,
)
from exporter.fields.catalog import (
    FI_NVLINK_THROUGHPUT_DATA_RX,
    FI_NVLINK_THROUGHPUT_DATA_TX,
    NVLINK_BANDWIDTH_PART,
    NVLINK_SCOPE_ALL_LINKS,
    Convert,
    FieldSpec,
    Reader,
)

RawParts = dict[str | int | None, float]
ReadFn = Callable[[NvmlLib, Handle], RawParts]

NVML_MEMORY_V2 = 0x02000028
"""nvmlMemory_v2: sizeof(nvmlMemory_v2_t) | 2 << 24. v1 counts reserved memory as used."""


def _single(value: float) -> RawParts:
    return {None: value}


def _memory(lib: NvmlLib, h: Handle) -> RawParts:
    mem = lib.nvmlDeviceGetMemoryInfo(h, version=NVML_MEMORY_V2)
    return {"free": mem.free, "used": mem.used, "reserved": mem.reserved, "total": mem.total}


def _utilization(lib: NvmlLib, h: Handle) -> RawParts:
    util = lib.nvmlDeviceGetUtilizationRates(h)
    return {"gpu": util.gpu, "memory": util.memory}


def _remapped_rows(lib: NvmlLib, h: Handle) -> RawParts:
    corr, unc, pending, failure = lib.nvmlDeviceGetRemappedRows(h)
    return {"correctable": corr, "uncorrectable": unc, "pending": pending, "failure": failure}


SIMPLE_READERS: dict[Reader, ReadFn] = {
    Reader.CLOCK_SM: lambda lib, h: _single(lib.nvmlDeviceGetClockInfo(h, NVML_CLOCK_SM)),
    Reader.CLOCK_MEM: lambda lib, h: _single(lib.nvmlDeviceGetClockInfo(h, NVML_CLOCK_MEM)),
    Reader.TEMPERATURE: lambda lib, h: _single(
        lib.nvmlDeviceGetTemperature(h, NVML_TEMPERATURE_GPU)
    ),
    Reader.POWER: lambda lib, h: _single(lib.nvmlDeviceGetPowerUsage(h)),
    Reader.POWER_LIMIT: lambda lib, h: _single(lib.nvmlDeviceGetPowerManagementLimit(h)),
    Reader.ENERGY: lambda lib, h: _single(lib.nvmlDeviceGetTotalEnergyConsumption(h)),
    Reader.PCIE_REPLAY: lambda lib, h: _single(lib.nvmlDeviceGetPcieReplayCounter(h)),
    Reader.UTILIZATION: _utilization,
    Reader.ENCODER: lambda lib, h: _single(lib.nvmlDeviceGetEncoderUtilization(h)[0]),
    Reader.DECODER: lambda lib, h: _single(lib.nvmlDeviceGetDecoderUtilization(h)[0]),
    Reader.MEMORY: _memory,
    Reader.REMAPPED_ROWS: _remapped_rows,
    Reader.CLOCK_EVENTS: lambda lib, h: _single(lib.nvmlDeviceGetCurrentClocksEventReasons(h)),
}

FUNCTION_OF: dict[Reader, str] = {r: r.value.split("(")[0] for r in Reader}
"""The NVML function name behind each reader, for error accounting."""


def field_value_requests(specs: Iterable[FieldSpec]) -> list[tuple[int, int]]:
    """The (field id, scope id) list for one batched nvmlDeviceGetFieldValues call."""
    requests: list[tuple[int, int]] = []
    for spec in specs:
        if spec.reader is not Reader.FIELD_VALUES:
            continue
        if spec.part == NVLINK_BANDWIDTH_PART:
            wanted = [
                (FI_NVLINK_THROUGHPUT_DATA_TX, NVLINK_SCOPE_ALL_LINKS),
                (FI_NVLINK_THROUGHPUT_DATA_RX, NVLINK_SCOPE_ALL_LINKS),
            ]
        else:
            assert isinstance(spec.part, int)
            wanted = [(spec.part, 0)]
        requests.extend(w for w in wanted if w not in requests)
    return requests


# nvmlValueType_t -> union member
_VALUE_MEMBER = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal",
                 6: "usVal"}


def field_value(entry: Any) -> float:
    member = _VALUE_MEMBER.get(int(entry.valueType), "ullVal")
    return float(getattr(entry.value, member))


def read_field_values(
    lib: NvmlLib, h: Handle, requests: list[tuple[int, int]]
) -> tuple[dict[int, float], dict[int, int]]:
    """Values by field id, and failed ids with their per-entry return code."""
    entries = lib.nvmlDeviceGetFieldValues(h, list(requests))
    values: dict[int, float] = {}
    failed: dict[int, int] = {}
    for entry in entries:
        field_id = int(entry.fieldId)
        code = int(entry.nvmlReturn)
        if code == NVML_SUCCESS:
            values[field_id] = field_value(entry)
        else:
            failed[field_id] = code
    return values, failed


def field_values_part(spec: FieldSpec, values: dict[int, float]) -> float | None:
    """A field's raw value out of the batch, or None when (part of) it is missing."""
    if spec.part == NVLINK_BANDWIDTH_PART:
        tx = values.get(FI_NVLINK_THROUGHPUT_DATA_TX)
        rx = values.get(FI_NVLINK_THROUGHPUT_DATA_RX)
        return None if tx is None or rx is None else tx + rx
    assert isinstance(spec.part, int)
    return values.get(spec.part)


_MIB = 1024 * 1024
_TEMPERATURE_CEILING = 200.0
"""NVML answers absurd temperatures for absent sensors; DCGM drops values above this."""


def convert(kind: Convert, raw: float) -> float | None:
    """The exported value, or None when the raw value must not be exported."""
    if math.isnan(raw):
        return None
    if kind is Convert.NONE:
        return raw
    if kind is Convert.MILLIWATT_TO_WATT:
        return raw / 1000.0
    if kind is Convert.BYTES_TO_MIB:
        return float(int(raw) // _MIB)
    if kind is Convert.PERCENT_TO_RATIO:
        return raw / 100.0
    if kind is Convert.MIB_PER_S_TO_BYTES_PER_S:
        return raw * _MIB
    if kind is Convert.TEMPERATURE:
        return None if raw > _TEMPERATURE_CEILING else raw
    raise AssertionError(kind)

"""Read plans: per entity, the NVML calls to make each poll and what each answer yields.

A plan is built once per enumeration (or field change), so a poll is a flat walk over bound
calls with no per-field decisions left; a call that answers "not supported" is dropped from
the plan until the next enumeration. This keeps the backend within a small factor of the bare
cost of the NVML calls themselves (see benchmarks/bench_nvml_poll.py).
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import operator
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from exporter.devices.nvml_api import (
    NVML_CLOCK_MEM,
    NVML_CLOCK_SM,
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

NVML_MEMORY_V2 = 0x02000028
"""nvmlMemory_v2: sizeof(nvmlMemory_v2_t) | 2 << 24. v1 counts reserved memory as used."""

Conv = Callable[[Any], float | None]

_TEMPERATURE_CEILING = 200
"""NVML answers absurd temperatures for absent sensors; DCGM drops values above this."""


def _finite(v: float) -> float | None:
    return None if v != v else float(v)  # NaN is the one value unequal to itself


CONVERTERS: dict[Convert, Conv] = {
    Convert.NONE: _finite,
    Convert.MILLIWATT_TO_WATT: lambda v: v / 1000.0,
    Convert.BYTES_TO_MIB: lambda v: float(int(v) >> 20),
    Convert.PERCENT_TO_RATIO: lambda v: None if v != v else v / 100.0,
    Convert.MIB_PER_S_TO_BYTES_PER_S: lambda v: None if v != v else v * 1048576.0,
    Convert.TEMPERATURE: lambda v: float(v) if v <= _TEMPERATURE_CEILING else None,
}

# For each simple reader: the call (given lib and handle) and how to pick a part of the answer.
_CALLS: dict[Reader, tuple[str, Callable[[NvmlLib, Handle], Callable[[], Any]]]] = {
    Reader.CLOCK_SM: ("nvmlDeviceGetClockInfo",
                      lambda lib, h: functools.partial(lib.nvmlDeviceGetClockInfo, h,
                                                       NVML_CLOCK_SM)),
    Reader.CLOCK_MEM: ("nvmlDeviceGetClockInfo",
                       lambda lib, h: functools.partial(lib.nvmlDeviceGetClockInfo, h,
                                                        NVML_CLOCK_MEM)),
    Reader.TEMPERATURE: ("nvmlDeviceGetTemperature",
                         lambda lib, h: functools.partial(lib.nvmlDeviceGetTemperature, h,
                                                          NVML_TEMPERATURE_GPU)),
    Reader.POWER: ("nvmlDeviceGetPowerUsage",
                   lambda lib, h: functools.partial(lib.nvmlDeviceGetPowerUsage, h)),
    Reader.POWER_LIMIT: ("nvmlDeviceGetPowerManagementLimit",
                         lambda lib, h: functools.partial(lib.nvmlDeviceGetPowerManagementLimit,
                                                          h)),
    Reader.ENERGY: ("nvmlDeviceGetTotalEnergyConsumption",
                    lambda lib, h: functools.partial(lib.nvmlDeviceGetTotalEnergyConsumption, h)),
    Reader.PCIE_REPLAY: ("nvmlDeviceGetPcieReplayCounter",
                         lambda lib, h: functools.partial(lib.nvmlDeviceGetPcieReplayCounter, h)),
    Reader.UTILIZATION: ("nvmlDeviceGetUtilizationRates",
                         lambda lib, h: functools.partial(lib.nvmlDeviceGetUtilizationRates, h)),
    Reader.ENCODER: ("nvmlDeviceGetEncoderUtilization",
                     lambda lib, h: functools.partial(lib.nvmlDeviceGetEncoderUtilization, h)),
    Reader.DECODER: ("nvmlDeviceGetDecoderUtilization",
                     lambda lib, h: functools.partial(lib.nvmlDeviceGetDecoderUtilization, h)),
    Reader.MEMORY: ("nvmlDeviceGetMemoryInfo",
                    lambda lib, h: functools.partial(lib.nvmlDeviceGetMemoryInfo, h,
                                                     version=NVML_MEMORY_V2)),
    Reader.REMAPPED_ROWS: ("nvmlDeviceGetRemappedRows",
                           lambda lib, h: functools.partial(lib.nvmlDeviceGetRemappedRows, h)),
    Reader.CLOCK_EVENTS: ("nvmlDeviceGetCurrentClocksEventReasons",
                          lambda lib, h: functools.partial(
                              lib.nvmlDeviceGetCurrentClocksEventReasons, h)),
}

_REMAPPED_INDEX = {"correctable": 0, "uncorrectable": 1, "pending": 2, "failure": 3}


def _picker(reader: Reader, part: str | int | None) -> Callable[[Any], Any] | None:
    if reader in (Reader.ENCODER, Reader.DECODER):
        return operator.itemgetter(0)
    if reader is Reader.REMAPPED_ROWS:
        return operator.itemgetter(_REMAPPED_INDEX[str(part)])
    if isinstance(part, str):
        return operator.attrgetter(part)
    return None


def _by_id(value_id: int) -> Callable[[dict[int, float]], float | None]:
    """Picks one id's value from an answer by field or metric id; None when it is absent
    (that entry failed)."""
    return operator.methodcaller("get", value_id)


def _nvlink_total(values: dict[int, float]) -> float | None:
    """TX plus RX over all links; None unless both were read."""
    tx = values.get(FI_NVLINK_THROUGHPUT_DATA_TX)
    rx = values.get(FI_NVLINK_THROUGHPUT_DATA_RX)
    return None if tx is None or rx is None else tx + rx


@dataclass(slots=True)
class Output:
    """One series from one answer: which part of it, converted how."""

    name: str
    pick: Callable[[Any], Any] | None
    """None: the answer itself is the value. A pick may yield None: nothing to store."""
    conv: Conv


@dataclass(slots=True)
class CallStep:
    function: str
    call: Callable[[], Any]
    outputs: list[Output]


FieldRequest = tuple[int, int]
"""(field id, scope id) as nvmlDeviceGetFieldValues takes it."""


@dataclass(slots=True)
class FieldValuesStep:
    requests: list[FieldRequest]
    outputs: list[Output]
    """Each picks from the answer's values by field id."""


@dataclass(slots=True)
class GpmStep:
    metric_ids: list[int]
    outputs: list[Output]
    """Each picks from the answer's values by metric id."""


@dataclass(slots=True)
class EntityPlan:
    uid: str
    """Names the entity in logs."""
    handle: Handle
    calls: list[CallStep] = field(default_factory=list)
    field_values: FieldValuesStep | None = None
    gpm: GpmStep | None = None


def build_plan(lib: NvmlLib, handle: Handle, uid: str, specs: Iterable[FieldSpec]) -> EntityPlan:
    plan = EntityPlan(uid, handle)
    calls: dict[Reader, CallStep] = {}
    for spec in specs:
        conv = CONVERTERS[spec.convert]
        if spec.reader in _CALLS:
            step = calls.get(spec.reader)
            if step is None:
                function, make = _CALLS[spec.reader]
                step = calls[spec.reader] = CallStep(function, make(lib, handle), [])
            step.outputs.append(Output(spec.name, _picker(spec.reader, spec.part), conv))
        elif spec.reader is Reader.FIELD_VALUES:
            fv = plan.field_values = plan.field_values or FieldValuesStep([], [])
            if spec.part == NVLINK_BANDWIDTH_PART:
                wanted = [(FI_NVLINK_THROUGHPUT_DATA_TX, NVLINK_SCOPE_ALL_LINKS),
                          (FI_NVLINK_THROUGHPUT_DATA_RX, NVLINK_SCOPE_ALL_LINKS)]
                fv.outputs.append(Output(spec.name, _nvlink_total, conv))
            else:
                assert isinstance(spec.part, int)
                wanted = [(spec.part, 0)]
                fv.outputs.append(Output(spec.name, _by_id(spec.part), conv))
            fv.requests.extend(w for w in wanted if w not in fv.requests)
        elif spec.reader is Reader.GPM:
            assert isinstance(spec.part, int)
            gpm = plan.gpm = plan.gpm or GpmStep([], [])
            if spec.part not in gpm.metric_ids:
                gpm.metric_ids.append(spec.part)
            gpm.outputs.append(Output(spec.name, _by_id(spec.part), conv))
    plan.calls = list(calls.values())
    return plan


class _Value(ctypes.Union):
    _fields_ = [("dVal", ctypes.c_double), ("uiVal", ctypes.c_uint),
                ("ulVal", ctypes.c_ulong), ("ullVal", ctypes.c_ulonglong),
                ("sllVal", ctypes.c_longlong), ("siVal", ctypes.c_int),
                ("usVal", ctypes.c_ushort)]


class FieldValue(ctypes.Structure):
    """nvmlFieldValue_t without pynvml's per-attribute str conversion (tested for layout)."""

    _fields_ = [("fieldId", ctypes.c_uint32), ("scopeId", ctypes.c_uint32),
                ("timestamp", ctypes.c_int64), ("latencyUsec", ctypes.c_int64),
                ("valueType", ctypes.c_uint), ("nvmlReturn", ctypes.c_uint),
                ("value", _Value)]


_MEMBER = ("dVal", "uiVal", "ulVal", "ullVal", "sllVal", "siVal", "usVal")


def read_field_values(lib: NvmlLib, handle: Handle, requests: list[FieldRequest]
                      ) -> tuple[dict[int, float], dict[int, int]]:
    """Values by field id, and failed ids with their per-entry return code."""
    entries: Any = lib.nvmlDeviceGetFieldValues(handle, requests)
    # A stand-in library may answer with something other than a ctypes array: read it as is.
    with contextlib.suppress(TypeError):
        entries = (FieldValue * len(requests)).from_buffer(entries)
    values: dict[int, float] = {}
    failed: dict[int, int] = {}
    for entry in entries:
        code = entry.nvmlReturn
        if code:
            failed[entry.fieldId] = code
        else:
            kind = entry.valueType
            member = _MEMBER[kind] if 0 <= kind < len(_MEMBER) else "ullVal"
            values[entry.fieldId] = getattr(entry.value, member)
    return values, failed

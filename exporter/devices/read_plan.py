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
import logging
import operator
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from exporter.devices.convert import CONVERTERS, Conv
from exporter.devices.counterparts import CounterpartStep, served_for
from exporter.devices.fabric import fabric_reader
from exporter.devices.nvml_api import (
    NVML_CLOCK_MEM,
    NVML_CLOCK_SM,
    NVML_TEMPERATURE_GPU,
    VALUE_MEMBERS,
    Handle,
    NvmlLib,
    NvmlValue,
)
from exporter.devices.struct_reads import STRUCT_READS, available, p2p_bitmap, p2p_status
from exporter.fields.catalog import (
    FI_NVLINK_THROUGHPUT_DATA_RX,
    FI_NVLINK_THROUGHPUT_DATA_TX,
    HANDLE,
    LINK,
    NVLINK_BANDWIDTH_PART,
    NVLINK_SCOPE_ALL_LINKS,
    P2P_BITMAP_PART,
    Arg,
    Call,
    FieldRefs,
    FieldSpec,
    GpmLink,
    Reader,
    Scope,
)

log = logging.getLogger(__name__)

NVML_MEMORY_V2 = 0x02000028
"""nvmlMemory_v2: sizeof(nvmlMemory_v2_t) | 2 << 24. v1 counts reserved memory as used."""

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
    Reader.FABRIC: ("nvmlDeviceGetGpuFabricInfoV", fabric_reader),
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
    if isinstance(part, int):
        return operator.itemgetter(part)
    return None


FieldKey = tuple[int, int]
"""(field id, scope id): a `nvmlDeviceGetFieldValues` entry, as requested and as answered."""


def _by_key(key: FieldKey | int) -> Callable[[dict[Any, float]], float | None]:
    """Return a function that picks one entry's value from an answer (field values by `FieldKey`,
    GPM metrics by metric id), or None when the entry is absent because it failed."""
    return operator.methodcaller("get", key)


def _sum_of(keys: tuple[FieldKey, ...]) -> Callable[[dict[FieldKey, float]], float | None]:
    """Return a function that sums several entries (such as NVLink TX and RX), or gives None
    unless all of them were read."""
    def pick(values: dict[FieldKey, float]) -> float | None:
        total = 0.0
        for key in keys:
            value = values.get(key)
            if value is None:
                return None
            total += value
        return total
    return pick


@dataclass(slots=True)
class Output:
    """One series from one answer: which part of it, converted how."""

    name: str
    pick: Callable[[Any], Any] | None
    """None: the answer itself is the value. A pick may yield None: nothing to store."""
    conv: Conv
    link: int | None = None
    """The link entity the series belongs to; None: the entity read."""
    peer: int | None = None
    """The peer GPU (its index) of a GPU-pair series; None: not a pair series."""


@dataclass(slots=True)
class CallStep:
    """One plain NVML call bound to its device, and the values taken from its answer."""

    function: str
    call: Callable[[], Any]
    outputs: list[Output]


@dataclass(slots=True)
class FieldValuesStep:
    """One batched `nvmlDeviceGetFieldValues` call and the values taken from its answer."""

    requests: list[FieldKey]
    outputs: list[Output]
    """Each picks from the answer's values by (field id, scope id)."""


@dataclass(slots=True)
class GpmStep:
    """The GPM metrics to compute for one entity and the values taken from them."""

    metric_ids: list[int]
    outputs: list[Output]
    """Each picks from the answer's values by metric id."""


@dataclass(slots=True)
class EntityPlan:
    """Everything to read for one GPU or MIG GPU instance each poll."""

    uid: str
    """Names the entity in logs."""
    handle: Handle
    calls: list[CallStep] = field(default_factory=list)
    field_values: FieldValuesStep | None = None
    gpm: GpmStep | None = None
    counterparts: CounterpartStep | None = None
    """GPM fields served from NVML's counterparts, should the GPU have no GPM (only on a
    whole GPU with MIG off: NVML keeps no utilisation samples under MIG)."""
    links: tuple[int, ...] = ()
    """Active NVLinks, each a link entity for `Scope.LINK` fields."""
    peers: tuple[tuple[int, Handle], ...] = ()
    """The other GPUs (index, handle), each a pair with this one for `Scope.PEER` fields."""


def _bind(arg: Arg, handle: Handle, link: int | None) -> Any:
    if arg == HANDLE:
        return handle
    if arg == LINK:
        return link
    return arg


class _Planner:
    """Collects the steps of one entity's plan, one step per distinct call."""

    def __init__(self, lib: NvmlLib, plan: EntityPlan, counterparts: bool = False) -> None:
        self.lib = lib
        self.plan = plan
        self.calls: dict[object, CallStep] = {}
        self.counterparts = counterparts
        self.output_keys: set[FieldKey] = set()
        """The field-value entries some series other than a counterpart reads."""

    def call(self, key: object, function: str, make: Callable[[], Callable[[], Any]]
             ) -> CallStep:
        step = self.calls.get(key)
        if step is None:
            step = self.calls[key] = CallStep(function, make(), [])
        return step

    def add(self, spec: FieldSpec, link: int | None,
            peer: tuple[int, Handle] | None = None) -> None:
        conv = CONVERTERS[spec.convert]
        part = spec.part
        if spec.reader is Reader.P2P and part == P2P_BITMAP_PART:
            # Over the GPUs enumerated with this one (a lost GPU is never asked).
            step = self.call(("p2p", "bitmap"), "nvmlDeviceGetP2PStatus",
                             lambda: functools.partial(p2p_bitmap, self.lib, self.plan.handle,
                                                       self.plan.peers))
            step.outputs.append(Output(spec.name, None, conv, link))
        elif spec.reader is Reader.P2P:
            assert peer is not None
            index, other = peer
            step = self.call(("p2p", index), "nvmlDeviceGetP2PStatus", lambda: functools.partial(
                p2p_status, self.lib, self.plan.handle, other))
            step.outputs.append(Output(spec.name, None, conv, peer=index))
        elif spec.reader in _CALLS:
            assert not isinstance(part, (Call, FieldRefs, GpmLink))
            function, make = _CALLS[spec.reader]
            step = self.call(spec.reader, function, lambda: make(self.lib, self.plan.handle))
            step.outputs.append(Output(spec.name, _picker(spec.reader, part), conv, link))
        elif spec.reader is Reader.CALL:
            assert isinstance(part, Call)
            self._add_call(spec.name, part, conv, link)
        elif spec.reader is Reader.FIELD_VALUES:
            self._add_field_values(spec.name, part, conv, link)
        elif spec.reader is Reader.GPM:
            metric = part.metric(link or 0) if isinstance(part, GpmLink) else part
            assert isinstance(metric, int)
            gpm = self.plan.gpm = self.plan.gpm or GpmStep([], [])
            if metric not in gpm.metric_ids:
                gpm.metric_ids.append(metric)
            gpm.outputs.append(Output(spec.name, _by_key(metric), conv, link))
            if self.counterparts and link is None:
                self._add_counterpart(spec)

    def _add_counterpart(self, spec: FieldSpec) -> None:
        served = served_for(spec)
        if served is None:
            return
        step = self.plan.counterparts = self.plan.counterparts or CounterpartStep()
        step.outputs.append((spec.name, served))
        if served.counter is not None:
            fv = self.plan.field_values = self.plan.field_values or FieldValuesStep([], [])
            if served.counter not in fv.requests:
                fv.requests.append(served.counter)
            step.requests.append(served.counter)

    def _add_call(self, name: str, call: Call, conv: Conv, link: int | None) -> None:
        read = bound_call(self.lib, self.plan.handle, call, link)
        if read is None:
            log.info("%s: %s is not available; %s is omitted", self.plan.uid, call.function,
                     name)
            return
        args = tuple(_bind(a, self.plan.handle, link) for a in call.args)
        step = self.call((call.function, tuple(map(_arg_key, args))), call.function,
                         lambda: read)
        step.outputs.append(Output(name, _picker(Reader.CALL, call.pick), conv, link))

    def _add_field_values(self, name: str, part: object, conv: Conv, link: int | None) -> None:
        keys: tuple[FieldKey, ...]
        if part == NVLINK_BANDWIDTH_PART:
            keys = ((FI_NVLINK_THROUGHPUT_DATA_TX, NVLINK_SCOPE_ALL_LINKS),
                    (FI_NVLINK_THROUGHPUT_DATA_RX, NVLINK_SCOPE_ALL_LINKS))
        elif isinstance(part, FieldRefs):
            keys = tuple((f, int(_bind(s, None, link))) for f, s in part.refs)
        else:
            assert isinstance(part, int)
            keys = ((part, 0),)
        fv = self.plan.field_values = self.plan.field_values or FieldValuesStep([], [])
        fv.requests.extend(k for k in keys if k not in fv.requests)
        self.output_keys.update(keys)
        pick = _by_key(keys[0]) if len(keys) == 1 else _sum_of(keys)
        fv.outputs.append(Output(name, pick, conv, link))


def bound_call(lib: NvmlLib, handle: Handle, call: Call, link: int | None = None
               ) -> Callable[[], Any] | None:
    """Return `call` as a read without arguments: a struct read (bound with the arguments after
    the handle), or the pynvml function bound to its arguments. Return None when the library
    lacks what it calls: pynvml defines every function it knows (a missing symbol fails at the
    call), but a stand-in library may lack one, and the field then has no value there."""
    if not available(lib, call.function):
        return None
    struct_read = STRUCT_READS.get(call.function)
    if struct_read is not None:
        return struct_read(lib, handle, *(_bind(a, handle, link) for a in call.args
                                          if a != HANDLE))
    function: Callable[..., Any] = getattr(lib, call.function)
    return functools.partial(function, *(_bind(a, handle, link) for a in call.args))


def _arg_key(arg: Any) -> object:
    """Return the key that identifies a call by its arguments. Handles are ctypes pointers (a new
    object each time, not hashable by value), so they are keyed by position only: every call of
    one plan has the same handle."""
    return arg if isinstance(arg, (int, str)) else "handle"


def build_plan(lib: NvmlLib, handle: Handle, uid: str, specs: Iterable[FieldSpec],
               links: tuple[int, ...] = (), peers: tuple[tuple[int, Handle], ...] = (),
               counterparts: bool = False) -> EntityPlan:
    """Return the read plan of one entity. `Scope.LINK` fields are planned once per link in
    `links`, and `Scope.PEER` fields once per GPU in `peers`. With `counterparts`, NVML's
    counterparts of the GPM fields are planned too, to be read instead should the GPU have no
    GPM."""
    plan = EntityPlan(uid, handle, links=links, peers=peers)
    planner = _Planner(lib, plan, counterparts)
    for spec in specs:
        if spec.scope is Scope.LINK:
            for link in links:
                planner.add(spec, link)
        elif spec.scope is Scope.PEER:
            for peer in peers:
                planner.add(spec, None, peer)
        else:
            planner.add(spec, None)
    plan.calls = list(planner.calls.values())
    if plan.counterparts is not None:
        plan.counterparts.requests = [r for r in plan.counterparts.requests
                                      if r not in planner.output_keys]
    return plan


class FieldValue(ctypes.Structure):
    """NVML's `nvmlFieldValue_t` struct, without pynvml's conversion of each attribute to str (a
    test checks its layout)."""

    _fields_ = [("fieldId", ctypes.c_uint32), ("scopeId", ctypes.c_uint32),
                ("timestamp", ctypes.c_int64), ("latencyUsec", ctypes.c_int64),
                ("valueType", ctypes.c_uint), ("nvmlReturn", ctypes.c_uint),
                ("value", NvmlValue)]




_NARROW = frozenset({1, 5, 6})
"""nvmlValueType_t of the 32-bit and 16-bit members: uiVal, siVal, usVal."""


def read_field_values(lib: NvmlLib, handle: Handle, requests: list[FieldKey],
                      narrow: set[FieldKey] | None = None
                      ) -> tuple[dict[FieldKey, float], dict[FieldKey, int]]:
    """Return the values by (field id, scope id), and the failed entries with their return code.
    `narrow`, when given, receives the entries answered in fewer than 64 bits (a counter that
    wraps at 4 GiB or sooner)."""
    entries: Any = lib.nvmlDeviceGetFieldValues(handle, requests)
    # A stand-in library may answer with something other than a ctypes array: read it as is.
    with contextlib.suppress(TypeError):
        entries = (FieldValue * len(requests)).from_buffer(entries)
    values: dict[FieldKey, float] = {}
    failed: dict[FieldKey, int] = {}
    for entry in entries:
        code = entry.nvmlReturn
        if code:
            failed[(entry.fieldId, entry.scopeId)] = code
        else:
            kind = entry.valueType
            member = VALUE_MEMBERS[kind] if 0 <= kind < len(VALUE_MEMBERS) else "ullVal"
            values[(entry.fieldId, entry.scopeId)] = getattr(entry.value, member)
            if narrow is not None and kind in _NARROW:
                narrow.add((entry.fieldId, entry.scopeId))
    return values, failed

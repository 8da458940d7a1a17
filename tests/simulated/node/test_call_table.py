"""The built-in node answers the call table (`call_table.CALLS`) and nothing else by hand.

Every NVML call the node has is either an entry of the table, answered by the method made
from that entry alone, or one of the calls both simulators compute (`COMPUTED`); every call
the exporter reads a field through is one or the other, so a new field's call is one new
entry. tests/nvmlsim/test_call_table.py holds the test library to the same table.
"""

from __future__ import annotations

import ctypes
import inspect
from typing import Any

import pynvml
import pytest

from exporter.devices.nvml_api import NvmlLib
from exporter.fields.catalog import CATALOG, Call, Reader
from exporter.fields.dcgm_names import dcgm_names
from exporter.fields.health_rules import READ_SPECS as HEALTH_READS
from exporter.simulated.node import SimNvml, profile_names
from exporter.simulated.node.call_shapes import Handles, Struct
from exporter.simulated.node.call_table import CALLS, CALLS_BY_NAME, COMPUTED
from tests.nvmlsim.table_calls import CALLER_STRUCTS, answers, asked
from tests.support.clock import FakeClock


def test_the_node_has_the_table_and_the_computed_calls_and_no_other() -> None:
    have = {name for name, _ in inspect.getmembers(SimNvml, callable) if name.startswith("nvml")}
    table = {call.function for call in CALLS}
    assert len(table) > 35
    assert table & COMPUTED == set()
    assert have == table | COMPUTED


def test_every_table_call_is_answered_by_its_entry_alone() -> None:
    """No class of the node overrides an entry's method with one written by hand."""
    for call in CALLS:
        method = getattr(SimNvml, call.function)
        assert getattr(method, "answers", None) is call, call.function
        assert call.function not in {name for cls in SimNvml.__mro__[:-1]
                                     for name in vars(cls) if cls.__name__ != "TableCalls"}


def test_every_call_a_field_is_read_through_is_described() -> None:
    """The catalog's named readers and every `Call` part of a served field: a call the table
    does not describe and no simulator computes would be a field neither can answer."""
    specs = [*CATALOG, *dcgm_names().served.values(), *HEALTH_READS]
    calls = {s.part.function for s in specs if isinstance(s.part, Call)}
    # The health field is read through the calls of its reads (HEALTH_READS).
    readers = {r.value.split("(")[0] for r in Reader if r not in (Reader.CALL, Reader.HEALTH)}
    assert len(calls) > 40
    missing = sorted((calls | readers) - set(CALLS_BY_NAME) - COMPUTED)
    assert missing == []


def test_the_protocol_is_described_or_computed() -> None:
    protocol = {name for name, _ in inspect.getmembers(NvmlLib, inspect.isfunction)
                if name.startswith("nvml")}
    assert len(protocol) > 30
    assert sorted(protocol - set(CALLS_BY_NAME) - COMPUTED) == []


def test_each_key_is_one_entrys() -> None:
    seen: dict[str, str] = {}
    for _, call, args in asked(CALLS, [4]):
        for _, key in call.keys(args):
            assert seen.setdefault(key, call.function) == call.function, key


def test_an_argument_nvml_does_not_know_is_refused() -> None:
    sim = SimNvml("h100-8")
    sim.nvmlInit()
    handle = sim.nvmlDeviceGetHandleByIndex(0)
    for call, bad in (("nvmlDeviceGetMaxClockInfo", (9,)),
                      ("nvmlDeviceGetTemperatureThreshold", (8,)),
                      ("nvmlDeviceGetMemoryErrorCounter", (0, 0, 8)),
                      ("nvmlDeviceGetNvLinkErrorCounter", (18, 0)),  # past the last link
                      ("nvmlDeviceGetCpuAffinity", (0,))):
        with pytest.raises(pynvml.NVMLError) as info:
            getattr(sim, call)(handle, *bad)
        assert info.value.value == pynvml.NVML_ERROR_INVALID_ARGUMENT, call
    assert len(sim.nvmlDeviceGetCpuAffinity(handle, 7)) == 7  # any size of set


@pytest.mark.parametrize("profile", profile_names())
def test_every_entry_answers_in_its_shape_on_every_board(profile: str) -> None:
    clock = FakeClock(start=50.0)
    sim = SimNvml(profile, seed=3, clock=clock)
    sim.nvmlInit()
    links = [18] * sim.nvmlDeviceGetCount()  # past a board's links: INVALID_ARGUMENT
    got = answers(sim, CALLS, links, c_library=False)
    failed = {k: v for k, v in got.items() if isinstance(v, str) and v.startswith("error ")}
    assert set(failed.values()) <= {f"error {pynvml.NVML_ERROR_NOT_SUPPORTED}",
                                    f"error {pynvml.NVML_ERROR_INVALID_ARGUMENT}"}
    assert len(got) - len(failed) > 40
    for key, value in got.items():
        call = CALLS_BY_NAME[key.split(":", 1)[1].split("(")[0]]
        if isinstance(call.answer, Struct) and key not in failed:  # every member named
            assert set(value) == {m.name for m in call.answer.members}, key


def test_a_mig_device_answers_the_device_calls_only() -> None:
    sim = SimNvml("h200-mig")
    sim.nvmlInit()
    mig = sim.nvmlDeviceGetMigDeviceHandleByIndex(sim.nvmlDeviceGetHandleByIndex(0), 0)
    answered: dict[str, Any] = {}
    for call in CALLS:
        if call.handles is Handles.SYSTEM:
            continue
        args = next(iter(call.arguments(1)))
        answered[call.function] = answers_one(sim, call.function, mig, args)
    devices = {c.function for c in CALLS if c.handles is Handles.DEVICE}
    assert devices == {"nvmlDeviceGetBAR1MemoryInfo"}
    assert {f for f, v in answered.items() if v != pynvml.NVML_ERROR_NOT_SUPPORTED} == devices


def answers_one(sim: SimNvml, function: str, handle: Any, args: tuple[int, ...]) -> Any:
    """The answer, or the NVML error code."""
    extra = (ctypes.byref(CALLER_STRUCTS[function]()),) if function in CALLER_STRUCTS else ()
    try:
        return getattr(sim, function)(handle, *args, *extra)
    except pynvml.NVMLError as exc:
        return exc.value

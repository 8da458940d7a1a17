"""The call table (`exporter/simulated/node/call_table.py`) is the one description of every
call a simulated GPU answers from plain values, for the test library as for the built-in node.

The library exports the table's entries and the calls both simulators compute
(`COMPUTED`), nothing else but NVML's own aliases; no handwritten C source defines a
generated entry point; each entry answers exactly the values under the keys the table names
(and its `unset` defaults without them); given the built-in node's answers for a profile as
its scenario, it answers every call of every GPU as the built-in node does; and one more
entry is all it takes for both to answer a call neither knew.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pynvml
import pytest

from exporter.simulated.node import SimNvml, profile_names
from exporter.simulated.node.api_table import add_calls
from exporter.simulated.node.call_shapes import Handles, SimCall, Value
from exporter.simulated.node.call_table import CALLS, COMPUTED
from tests.support.clock import FakeClock

from .build import build_library
from .harness import run_child, write_scenario
from .table_calls import answers, asked, expected, scenario_values
from .test_layout import pynvml_symbols

HERE = Path(__file__).resolve().parent

NVML_ALIASES = {
    # Entry points of NVML's ABI the library exports beside the ones pynvml's functions
    # call: the unversioned and older versions of versioned calls, the error strings,
    # event types, and the ECC total the field values also answer.
    "nvmlInit", "nvmlInit_v2", "nvmlErrorString", "nvmlDeviceGetCount",
    "nvmlDeviceGetHandleByIndex", "nvmlDeviceGetPciInfo", "nvmlDeviceGetPciInfo_v2",
    "nvmlDeviceGetAttributes", "nvmlDeviceGetAttributes_v2", "nvmlDeviceGetMemoryInfo",
    "nvmlDeviceGetCurrentClocksThrottleReasons", "nvmlEventSetWait",
    "nvmlDeviceGetSupportedEventTypes", "nvmlDeviceGetTotalEccErrors",
}

_DEFINITION = re.compile(r"^nvmlReturn_t (nvml\w+)\(", re.M)


def test_the_library_exports_the_table_and_the_computed_calls(nvmlsim_lib: Path) -> None:
    table = {symbol for call in CALLS for symbol in call.c_symbols}
    computed: set[str] = set()
    for function in COMPUTED:
        computed |= pynvml_symbols(function)
    result = run_child(nvmlsim_lib, 'out["functions"] = sim.functions()')
    exported = set(result["functions"])
    assert len(table) > 35
    assert table <= exported
    assert exported - table - computed == NVML_ALIASES - table - computed


def test_no_handwritten_source_defines_a_generated_entry_point() -> None:
    defined: dict[str, list[str]] = {}
    for source in sorted(HERE.glob("*.c")):
        for symbol in _DEFINITION.findall(source.read_text()):
            defined.setdefault(symbol, []).append(source.name)
    generated = {s for call in CALLS if not call.c_by_hand for s in call.c_symbols}
    by_hand = {s for call in CALLS if call.c_by_hand for s in call.c_symbols}
    assert len(defined) > 40
    assert generated & set(defined) == set()
    assert {s: defined.get(s) for s in by_hand} == {s: ["sim_calls.c"] for s in by_hand}


def _distinct_values() -> tuple[dict[str, Any], list[tuple[SimCall, tuple[int, ...]]]]:
    """A GPU with two NVLinks whose every key holds its own value (small enough for a byte
    member), and the calls to make."""
    calls: dict[str, Any] = {}
    strings: dict[str, Any] = {}
    made = []
    n = 0
    for _, call, args in asked(CALLS, [2]):
        made.append((call, args))
        for table, key in call.keys(args):
            n += 1
            if table == "calls":
                calls[key] = 1 + n % 250
            elif key.endswith(".clusterUuid"):
                strings[key] = f"{n:032x}"
            else:
                strings[key] = f"text {n}"
    return {"nvlink_links": 2, "calls": calls, "strings": strings}, made


ASK = """
from exporter.simulated.node.call_table import CALLS
from tests.nvmlsim.table_calls import answers
pynvml.nvmlInit()
out["answers"] = answers(pynvml, CALLS, {links}, c_library=True)
"""


def test_every_key_of_the_table_is_answered_and_nothing_else(nvmlsim_lib: Path,
                                                             tmp_path: Path) -> None:
    """Every value under its key, then an empty scenario: the unset defaults or
    NOT_SUPPORTED."""
    device, made = _distinct_values()
    path = write_scenario(tmp_path, {"devices": [device, {"nvlink_links": 2}]})
    got = run_child(nvmlsim_lib, ASK.format(links=[2, 2]), scenario_file=path)["answers"]
    values = {"calls": device["calls"], "strings": device["strings"]}
    empty: dict[str, dict[str, Any]] = {"calls": {}, "strings": {}}
    wrong = {}
    for call, args in made:
        key = call.keys(args)[0][1]
        if got[f"0:{key}"] != expected(call, args, values):
            wrong[f"0:{key}"] = (got[f"0:{key}"], expected(call, args, values))
        if call.handles is not Handles.SYSTEM and got[f"1:{key}"] != expected(call, args, empty):
            wrong[f"1:{key}"] = (got[f"1:{key}"], expected(call, args, empty))
    assert len(made) > 100
    assert wrong == {}


def _built_in_answers(profile: str) -> tuple[list[int], dict[str, Any], SimNvml]:
    clock = FakeClock(start=1_000.0)
    sim = SimNvml(profile, seed=11, clock=clock)
    clock.advance(600.0)  # loaded, with counters and temperatures under way
    sim.nvmlInit()
    links = [gpu_links(sim, i) for i in range(sim.nvmlDeviceGetCount())]
    return links, answers(sim, CALLS, links, c_library=False), sim


def gpu_links(sim: SimNvml, index: int) -> int:
    """The GPU's NVLink count, as its state calls answer (none under MIG)."""
    handle = sim.nvmlDeviceGetHandleByIndex(index)
    count = 0
    while count < 64:
        try:
            sim.nvmlDeviceGetNvLinkState(handle, count)
        except pynvml.NVMLError:  # INVALID_ARGUMENT past the last, NOT_SUPPORTED without
            break
        count += 1
    return count


@pytest.mark.parametrize("profile", profile_names())
def test_given_the_built_in_node_as_its_scenario_it_answers_alike(
        profile: str, nvmlsim_lib: Path, tmp_path: Path) -> None:
    """Each physical GPU's answers to every table call, from the built-in node at one moment,
    become the test library's scenario; then both answer every call of every GPU alike."""
    links, built_in, sim = _built_in_answers(profile)
    devices: list[dict[str, Any]] = []
    for index, count in enumerate(links):
        handle = sim.nvmlDeviceGetHandleByIndex(index)
        try:
            mig_capable, mig_mode = 1, sim.nvmlDeviceGetMigMode(handle)[0]
        except pynvml.NVMLError:  # NOT_SUPPORTED: a board without MIG
            mig_capable, mig_mode = 0, 0
        devices.append({"nvlink_links": count, "mig_capable": mig_capable,
                        "mig_mode": mig_mode, "calls": {}, "strings": {}})
    for gpu, call, args in asked(CALLS, links):
        values = scenario_values(call, args, built_in[f"{gpu}:{call.keys(args)[0][1]}"])
        devices[gpu]["calls"].update(values["calls"])
        devices[gpu]["strings"].update(values["strings"])
    path = write_scenario(tmp_path, {"device_count": len(devices), "devices": devices})
    got = run_child(nvmlsim_lib, ASK.format(links=links), scenario_file=path)["answers"]
    assert len(built_in) >= 100 * len(links)
    assert {k: (got.get(k), v) for k, v in built_in.items() if got.get(k) != v} == {}
    assert set(got) == set(built_in)
    # the answers are the boards' own, not all alike: errors and values both occur
    assert any(str(v).startswith("error ") for v in built_in.values())
    assert len({json.dumps(v, sort_keys=True) for v in built_in.values()}) > 30


BUS_WIDTH = SimCall("nvmlDeviceGetMemoryBusWidth", Value(), lambda *_: 5120)
"""A call neither simulator answers: NVML's memory bus width (HBM3: 5120 bits)."""


def test_a_new_entry_is_all_a_new_call_needs(nvmlsim_lib: Path, tmp_path: Path) -> None:
    lib_dir = build_library(tmp_path / "lib", (*CALLS, BUS_WIDTH))
    path = write_scenario(tmp_path, {"device_count": 2, "devices": [
        {"calls": {"nvmlDeviceGetMemoryBusWidth()": 4096}}, {}]})
    code = """
        pynvml.nvmlInit()
        width = []
        for i in range(2):
            try:
                width.append(pynvml.nvmlDeviceGetMemoryBusWidth(
                    pynvml.nvmlDeviceGetHandleByIndex(i)))
            except pynvml.NVMLError as exc:
                width.append(f"error {exc.value}")
        out["width"] = width
    """
    assert run_child(lib_dir, code, scenario_file=path)["width"] == [4096, "error 3"]
    # without the entry, the library does not have the function at all
    assert run_child(nvmlsim_lib, code, scenario_file=path)["width"] == ["error 13", "error 13"]

    class WithBusWidth(SimNvml):
        pass

    add_calls(WithBusWidth, [BUS_WIDTH])
    sim = WithBusWidth("h200-mig")
    sim.nvmlInit()
    assert sim.nvmlDeviceGetMemoryBusWidth(sim.nvmlDeviceGetHandleByIndex(2)) == 5120
    assert not hasattr(SimNvml("h200-mig"), "nvmlDeviceGetMemoryBusWidth")

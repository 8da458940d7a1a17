"""Asking either simulated NVML every call of the call table, and comparing what they answer.

`ask` makes one call the way the exporter makes it: pynvml's function, or, for a struct the
caller passes, the C function itself with nvml.h's struct (as `exporter/devices` does), the
built-in node's method of the same name. `plain` turns the answer into JSON-friendly data
(an int, a list, a member -> value mapping, a str; "error <code>" for an NVML error) so the
answers of a child process holding the test library compare with the built-in node's.
`scenario_values` turns a plain answer back into the test library's scenario values, and
`expected` says what the test library answers for given scenario values.

Imported by the child processes of `harness.run_child` too.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable, Iterator
from typing import Any

import pynvml

from exporter.devices.fabric import FABRIC_INFO_V3, FabricInfo
from exporter.devices.struct_reads import (
    PLATFORM_INFO_V2,
    SRAM_ECC_ERROR_STATUS_V1,
    PlatformInfo,
    SramEccErrorStatus,
    UnrepairableMemoryStatus,
)
from exporter.simulated.node.call_shapes import (
    Form,
    Handles,
    ReturnCode,
    SimCall,
    Struct,
    Text,
    Value,
    Values,
    Words,
)

CALLER_STRUCTS: dict[str, Callable[[], ctypes.Structure]] = {
    "nvmlDeviceGetSramEccErrorStatus": lambda: SramEccErrorStatus(
        version=SRAM_ECC_ERROR_STATUS_V1),
    "nvmlDeviceGetPlatformInfo": lambda: PlatformInfo(version=PLATFORM_INFO_V2),
    "nvmlDeviceGetUnrepairableMemoryFlag_v1": UnrepairableMemoryStatus,
    "nvmlDeviceGetGpuFabricInfoV": lambda: FabricInfo(version=FABRIC_INFO_V3),
}
"""The nvml.h structs the exporter passes to the calls that fill the caller's struct."""

SHAPED: dict[str, Callable[[Any], Any]] = {
    # The calls whose pynvml answer the table makes with its own `shape`: what the value is.
    "nvmlDeviceGetGridLicensableFeatures": lambda f: (
        f.gridLicensableFeatures[0].featureState if f.isGridLicenseSupported else None),
    "nvmlDeviceGetGpuInstanceProfileInfo": lambda info: int(info.sliceCount),
}


def passes_struct(call: SimCall) -> bool:
    return isinstance(call.answer, Struct) and not call.answer.pynvml_class


def plain(call: SimCall, answer: Any) -> Any:
    """The answer as data: what `scenario_device` and the comparisons read."""
    shape = call.answer
    if call.function in SHAPED:
        return SHAPED[call.function](answer)
    if isinstance(shape, Value):
        return int(answer)
    if isinstance(shape, Values | Words):
        return [int(v) for v in answer]
    if isinstance(shape, Text):
        return answer.decode() if isinstance(answer, bytes) else str(answer)
    if isinstance(shape, ReturnCode):
        return "ok"
    assert isinstance(shape, Struct)
    return {m.name: int(getattr(answer, m.name)) if m.form is Form.NUMBER
            else bytes(getattr(answer, m.name)).hex() for m in shape.members}


def ask(lib: Any, call: SimCall, handle: Any, args: tuple[int, ...], *,
        c_library: bool) -> Any:
    """`plain` of the call's answer, or "error <code>"."""
    given = () if call.handles is Handles.SYSTEM else (handle,)
    try:
        if passes_struct(call):
            answer = CALLER_STRUCTS[call.function]()
            if c_library:  # the C function itself, as exporter/devices calls it
                code = lib._nvmlGetFunctionPointer(call.c_symbols[0])(
                    *given, *args, ctypes.byref(answer))
                if code:
                    raise lib.NVMLError(code)
            else:
                getattr(lib, call.function)(*given, *args, ctypes.byref(answer))
        else:
            answer = getattr(lib, call.function)(*given, *args)
    except pynvml.NVMLError as exc:
        return f"error {exc.value}"
    return plain(call, answer)


Asked = tuple[int, SimCall, tuple[int, ...]]


def asked(calls: tuple[SimCall, ...], links: list[int]) -> Iterator[Asked]:
    """(GPU, entry, arguments) of every call to make on GPUs with these NVLink counts; a
    call without a device once."""
    for call in calls:
        for gpu, count in enumerate(links):
            if call.handles is Handles.SYSTEM and gpu:
                break
            for args in call.arguments(count):
                yield gpu, call, args


def answers(lib: Any, calls: tuple[SimCall, ...], links: list[int], *,
            c_library: bool) -> dict[str, Any]:
    """Every answer, by "<gpu>:<key of the call>"."""
    handles = [lib.nvmlDeviceGetHandleByIndex(i) for i in range(len(links))]
    return {f"{gpu}:{call.keys(args)[0][1]}": ask(lib, call, handles[gpu], args,
                                                  c_library=c_library)
            for gpu, call, args in asked(calls, links)}


ScenarioValues = dict[str, dict[str, Any]]
"""A scenario's {"calls": {key: number}, "strings": {key: text}}."""


def scenario_values(call: SimCall, args: tuple[int, ...], answer: Any) -> ScenarioValues:
    """The scenario's "calls" and "strings" values that make the test library answer
    `answer` (an error: none, so it answers NOT_SUPPORTED or the entry's unset default)."""
    out: ScenarioValues = {"calls": {}, "strings": {}}
    keys = call.keys(args)
    shape = call.answer
    if isinstance(shape, ReturnCode) and answer == f"error {getattr(pynvml, shape.error)}":
        out["calls"][keys[0][1]] = 0
    if answer is None or (isinstance(answer, str) and answer.startswith("error ")):
        return out
    if isinstance(shape, Values | Words):
        out["calls"].update((key, v) for (_, key), v in zip(keys, answer, strict=True))
    elif isinstance(shape, Struct):
        for member, (table, key) in zip(shape.members, keys, strict=True):
            value = answer[member.name]
            if member.form is Form.NUMBER:
                out["calls"][key] = value
            elif member.form is Form.BYTES:
                out["calls"][key] = int.from_bytes(bytes.fromhex(value)[:8], "little")
            elif member.form is Form.HEX:
                if int(value, 16):
                    out[table][key] = value
            elif set(bytes.fromhex(value)) != {int(member.unset or 0)}:
                out[table][key] = bytes.fromhex(value).rstrip(b"\0").decode()
    elif isinstance(shape, ReturnCode):
        out["calls"][keys[0][1]] = 1
    else:
        out[keys[0][0]][keys[0][1]] = answer
    return out


def _member_size(call: SimCall, member: str) -> int:
    shape = call.answer
    assert isinstance(shape, Struct)
    struct = (CALLER_STRUCTS[call.function]() if passes_struct(call)
              else getattr(pynvml, shape.pynvml_class)())
    return ctypes.sizeof(getattr(struct, member))


def expected(call: SimCall, args: tuple[int, ...], values: ScenarioValues) -> Any:
    """`plain` of what the test library answers with these scenario values, by the table:
    the value under each key, a member's `unset` where none is given, NOT_SUPPORTED where a
    needed one is missing."""
    not_supported = f"error {pynvml.NVML_ERROR_NOT_SUPPORTED}"
    keys = call.keys(args)
    calls, strings = values["calls"], values["strings"]
    if call.function == "nvmlDeviceGetGridLicensableFeatures":
        return calls.get(keys[0][1])  # unset: licensing not supported
    if any(key not in calls and key not in strings for key in call.needed_keys(args)):
        return not_supported
    shape = call.answer
    if isinstance(shape, Value):
        return calls.get(keys[0][1], shape.unset)
    if isinstance(shape, Values | Words):
        return [calls[key] for _, key in keys]
    if isinstance(shape, Text):
        return strings[keys[0][1]]
    if isinstance(shape, ReturnCode):
        return "ok" if calls[keys[0][1]] else f"error {getattr(pynvml, shape.error)}"
    assert isinstance(shape, Struct)
    plain_struct: dict[str, Any] = {}
    for member, (_, key) in zip(shape.members, keys, strict=True):
        if member.form is Form.NUMBER:
            plain_struct[member.name] = calls.get(key, member.unset)
            continue
        size = _member_size(call, member.name)
        if member.form is Form.BYTES:
            raw = int(calls.get(key, member.unset or 0)).to_bytes(8, "little")
        elif key not in strings:
            raw = bytes([int(member.unset or 0)]) * size
        elif member.form is Form.HEX:
            raw = bytes.fromhex(strings[key].replace("-", ""))
        else:
            raw = strings[key].encode()
        plain_struct[member.name] = raw[:size].ljust(size, b"\0").hex()
    return plain_struct

"""The built-in node's answers to the call table (`call_table`): one method per entry, made
from the entry alone, in pynvml's shape (an int, a list, a ctypes struct, a str).

A value the entry's demo figure gives None for answers NOT_SUPPORTED; a member it leaves
out holds the member's `unset`. A struct the caller passes (as pynvml's wrapper takes it) is
filled in place.
"""

from __future__ import annotations

import ctypes
import inspect
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

import pynvml

from exporter.devices.nvml_api import NvmlLib
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
from exporter.simulated.node.call_table import CALLS
from exporter.simulated.node.core import Asked, Handle, MigEntry, SimCore, fail


def _struct(pointer: Any) -> Any:
    """Return the struct a `ctypes.byref(...)` (or a pointer, or the struct itself) refers to."""
    if isinstance(pointer, ctypes._Pointer):
        return pointer.contents
    return getattr(pointer, "_obj", pointer)


def _hex_bytes(text: str) -> bytes:
    return bytes.fromhex(text.replace("-", ""))


def _put(struct: Any, member: Member, value: Any) -> None:
    if member.form is Form.NUMBER:
        setattr(struct, member.name, int(value))
        return
    field = getattr(struct, member.name)
    size = ctypes.sizeof(field)
    if member.form is Form.BYTES:
        data = int(value).to_bytes(8, "little").ljust(size, b"\0")[:size]
    elif value is None:  # TEXT or HEX without a value
        data = bytes([int(member.unset or 0)]) * size
    else:
        raw = _hex_bytes(value) if member.form is Form.HEX else str(value).encode()
        data = raw[:size].ljust(size, b"\0")
    ctypes.memmove(ctypes.addressof(field), data, size)


def _fill(struct: Any, answer: Struct, values: Mapping[str, Any]) -> None:
    """Write the members (NOT_SUPPORTED if a needed one has no value)."""
    if any(m.unset is None and values.get(m.name) is None for m in answer.members):
        fail(pynvml.NVML_ERROR_NOT_SUPPORTED)
    if answer.cleared:
        version = getattr(struct, "version", None)
        ctypes.memset(ctypes.addressof(struct), 0, ctypes.sizeof(struct))
        if version is not None:
            struct.version = version
    for member in answer.members:
        value = values.get(member.name)
        if value is None and member.form in (Form.NUMBER, Form.BYTES):
            value = member.unset
        _put(struct, member, value)


def _shaped(call: SimCall, value: Any, args: tuple[Any, ...]) -> Any:
    """Return pynvml's answer from the demo's value."""
    answer = call.answer
    if call.shape is not None:
        return call.shape(value, *args)
    if isinstance(answer, ReturnCode):
        if value is None:
            fail(pynvml.NVML_ERROR_NOT_SUPPORTED)
        if not value:
            fail(getattr(pynvml, answer.error))
        return None
    if isinstance(answer, Struct):
        if value is None:
            fail(pynvml.NVML_ERROR_NOT_SUPPORTED)
        if answer.pynvml_class:
            struct = getattr(pynvml, answer.pynvml_class)()
            _fill(struct, answer, value)
            return struct
        _fill(_struct(args[-1]), answer, value)
        return int(pynvml.NVML_SUCCESS)
    if value is None:
        fail(pynvml.NVML_ERROR_NOT_SUPPORTED)
    if isinstance(answer, Values | Words):
        return [int(v) for v in value]
    if isinstance(answer, Text):
        return str(value)
    assert isinstance(answer, Value)
    return int(value)


def _signature(call: SimCall) -> inspect.Signature:
    """Return the protocol's signature where it declares the call, else pynvml's (its arguments
    without a default), so the method reads as the function it stands in for."""
    declared = getattr(NvmlLib, call.function, None)
    if declared is not None:
        return inspect.signature(declared)
    wrapper = inspect.signature(getattr(pynvml, call.function))
    kind = inspect.Parameter.POSITIONAL_OR_KEYWORD
    return inspect.Signature([inspect.Parameter("self", kind), *(
        p for p in wrapper.parameters.values() if p.default is inspect.Parameter.empty)])


def answering(call: SimCall) -> Callable[..., Any]:
    """Return the method answering `call`, with pynvml's arguments (and the caller's struct last,
    where pynvml's function takes one)."""
    passes_struct = isinstance(call.answer, Struct) and not call.answer.pynvml_class
    system = call.handles is Handles.SYSTEM

    def method(self: SimCore, *given: Any) -> Any:
        handle: Handle = None if system else given[0]
        args = given[0 if system else 1:]
        if passes_struct:
            args, struct = args[:-1], args[-1:]
        else:
            struct = ()
        with self._lock:
            t = self._begin(call.function)
            mig: MigEntry | None = None
            if system:
                gpu, known = self._gpus[0], call.accepts(args)
            elif call.handles is Handles.LINK:
                gpu, known = self._link(handle, t, args[0]), call.accepts(args[1:])
            else:
                device = self._physical(handle, t) if call.handles is Handles.GPU \
                    else self._resolve(handle, t)
                mig = device if isinstance(device, MigEntry) else None
                gpu = device.gpu if isinstance(device, MigEntry) else device
                known = call.accepts(args)
            if not known:
                fail(pynvml.NVML_ERROR_INVALID_ARGUMENT)
            value = call.demo(Asked(gpu, mig, t), *args)
            return _shaped(call, value, (*args, *struct))

    method.__name__ = method.__qualname__ = call.function
    method.__signature__ = _signature(call)  # type: ignore[attr-defined]
    method.__doc__ = f"pynvml's {call.function}, answered from its entry in `call_table`."
    method.answers = call  # type: ignore[attr-defined]
    return method


def add_calls(cls: type[SimCore], calls: Iterable[SimCall]) -> None:
    """Give the class one method per call-table entry, named after the entry's function."""
    for call in calls:
        setattr(cls, call.function, answering(call))


class TableCalls(SimCore):
    """Every entry of `call_table.CALLS`, as a method of the same name (set from the table
    below, so the type checker sees them through `__getattr__`)."""

    if TYPE_CHECKING:
        def __getattr__(self, name: str) -> Any:
            """Let the type checker accept the methods set from the call table."""
            ...


add_calls(TableCalls, CALLS)

"""The test library's entry points for the call table (`exporter/simulated/node/call_table.py`),
generated at build time from the table and nvml.h's own prototypes.

Each entry becomes the C function NVML declares for it: the prologue its handles ask for, a
NULL out-parameter refused, a struct's version checked, an argument NVML does not know
refused, then the values read from the scenario under the entry's keys (`SimCall.keys`)
and written where nvml.h puts them. `generate(calls, header)` returns the source and a
header whose `SIM_TABLE_FUNCTIONS(X)` lists every entry's C symbols (`sim_state.h` adds
them to the exported functions). Entries marked `c_by_hand` have their functions in
`sim_calls.c` and are only listed.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

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

_PROTOTYPE = re.compile(r"nvmlReturn_t\s+DECLDIR\s+(\w+)\s*\(([^;]*?)\)\s*;", re.S)
_PARAM = re.compile(r"(.+?)\s*(\*?)\s*(\w+)")


class GenerateError(RuntimeError):
    """nvml.h does not declare an entry's function as the entry's shape needs."""


@dataclass(frozen=True)
class Param:
    type: str
    name: str
    pointer: bool

    def c(self) -> str:
        return f"{self.type} {'*' if self.pointer else ''}{self.name}"


def prototypes(header: str) -> dict[str, list[Param]]:
    """Every NVML function nvml.h declares, with its parameters."""
    found: dict[str, list[Param]] = {}
    for match in _PROTOTYPE.finditer(header):
        params = []
        for text in (p.strip() for p in " ".join(match.group(2).split()).split(",")):
            if text in ("", "void"):
                continue
            part = _PARAM.fullmatch(text)
            if part is None:
                raise GenerateError(f"nvml.h: cannot read parameter {text!r} of {match.group(1)}")
            params.append(Param(part.group(1), part.group(3), part.group(2) == "*"))
        found[match.group(1)] = params
    return found


class _Function:
    """The C text of one entry point."""

    def __init__(self, call: SimCall, symbol: str, params: list[Param]) -> None:
        self.call, self.symbol = call, symbol
        system = call.handles is Handles.SYSTEM
        self.params = params
        given = params if system else params[1:]
        if not system and (not params or params[0].type != "nvmlDevice_t"):
            raise GenerateError(f"{symbol}: nvml.h's first parameter is not a device")
        self.inputs = [p for p in given if not p.pointer]
        self.outputs = [p for p in given if p.pointer]
        if isinstance(call.answer, Text):
            # (char *text, unsigned int length): the length is no argument of the key
            self.length = self.inputs.pop()
        self.lines: list[str] = []

    def fail(self, condition: str, code: str) -> None:
        self.lines.append(f"        if ({condition}) {{ r = {code}; break; }}")

    def key(self, suffix: str = "", extra: str = "") -> str:
        """A format string and its arguments for the key with this suffix."""
        inputs = ", ".join(f"(long long){p.name}" for p in self.inputs)
        fmt = f'"{self.call.function}({",".join(["%lld"] * len(self.inputs))}){suffix}"'
        return ", ".join(x for x in (fmt, inputs, extra) if x)

    def read(self, target: str, suffix: str, unset: float | None) -> None:
        """A "calls" value into `target`: its `unset` when none is given, or NOT_SUPPORTED."""
        get = f"sim_call_value(g, &{target}, {self.key(suffix)})"
        if unset is None:
            self.lines.append(f"        if ((r = {get}) != NVML_SUCCESS) break;")
        else:
            self.lines.append(f"        if ({get} != NVML_SUCCESS) {target} = {unset!r};")

    def checks(self, version: str) -> None:
        for out in self.outputs:
            self.fail(f"!{out.name}", "NVML_ERROR_INVALID_ARGUMENT")
        if version:
            self.fail(f"{self.outputs[0].name}->version != {version}",
                      "NVML_ERROR_ARGUMENT_VERSION_MISMATCH")
        call = self.call
        for param, domain in zip(self.inputs[1:] if call.handles is Handles.LINK
                                 else self.inputs, call.args, strict=True):
            if isinstance(call.answer, Words) and param is self.inputs[0]:
                self.fail(f"{param.name} == 0", "NVML_ERROR_INVALID_ARGUMENT")
                continue
            known = " || ".join(f"(long long){param.name} == {v}" for v in domain)
            self.fail(f"!({known})", "NVML_ERROR_INVALID_ARGUMENT")

    def body(self) -> None:
        answer = self.call.answer
        out = self.outputs[0].name if self.outputs else ""
        if isinstance(answer, Value):
            self.checks(answer.version)
            self.lines.append("        sim_number v;")
            self.read("v", "", answer.unset)
            target = f"{out}->{answer.member}" if answer.member else f"*{out}"
            self.lines.append(f"        {target} = (__typeof__({target}))v;")
        elif isinstance(answer, Values):
            if len(self.outputs) != answer.count:
                raise GenerateError(f"{self.symbol}: nvml.h has {len(self.outputs)} outputs")
            self.checks("")
            self.lines.append(f"        sim_number v[{answer.count}];")
            for i in range(answer.count):
                self.read(f"v[{i}]", f"[{i}]", None)
            for i, p in enumerate(self.outputs):
                self.lines.append(f"        *{p.name} = (__typeof__(*{p.name}))v[{i}];")
        elif isinstance(answer, Struct):
            self.struct(answer, out)
        elif isinstance(answer, Words):
            self.checks("")
            size = self.inputs[0].name
            self.lines += [f"        for (unsigned i = 0; i < {size}; i++) {{",
                           "            sim_number w;",
                           f"            if ((r = sim_call_value(g, &w, {self.key('[%u]', 'i')}))"
                           " != NVML_SUCCESS) break;",
                           f"            {out}[i] = (__typeof__({out}[i]))w;", "        }"]
        elif isinstance(answer, Text):
            self.checks("")
            self.lines += [f"        const char *text = sim_call_string(g, {self.key()});",
                           "        if (!text) { r = NVML_ERROR_NOT_SUPPORTED; break; }",
                           f"        if (strlen(text) + 1 > {self.length.name}) "
                           "{ r = NVML_ERROR_INSUFFICIENT_SIZE; break; }",
                           f"        memcpy({out}, text, strlen(text) + 1);"]
        else:
            assert isinstance(answer, ReturnCode)
            self.checks("")
            self.lines.append("        sim_number v;")
            self.read("v", "", None)
            self.lines.append(f"        if (!v) r = {answer.error};")

    def struct(self, answer: Struct, out: str) -> None:
        self.checks(answer.version)
        numbers = [m for m in answer.members if m.table == "calls"]
        self.lines.append(f"        sim_number v[{len(numbers)}];")
        for i, member in enumerate(numbers):
            self.read(f"v[{i}]", f".{member.name}", member.unset)
        if answer.cleared and answer.version:
            self.lines += [f"        unsigned version = {out}->version;",
                           f"        memset({out}, 0, sizeof *{out});",
                           f"        {out}->version = version;"]
        elif answer.cleared:
            self.lines.append(f"        memset({out}, 0, sizeof *{out});")
        for member in answer.members:
            field = f"{out}->{member.name}"
            if member.form is Form.NUMBER:
                i = numbers.index(member)
                self.lines.append(f"        {field} = (__typeof__({field}))v[{i}];")
            elif member.form is Form.BYTES:
                i = numbers.index(member)
                self.lines.append(f"        sim_put_number({field}, sizeof {field}, v[{i}]);")
            else:
                text = f"sim_call_string(g, {self.key('.' + member.name)})"
                if member.form is Form.TEXT:
                    self.lines.append(f"        sim_put_text({field}, sizeof {field}, {text}, "
                                      f"{int(member.unset or 0)});")
                else:
                    self.lines.append(f"        sim_put_hex({field}, sizeof {field}, {text});")

    def text(self) -> str:
        call, fn = self.call, f"FN_{self.symbol}"
        if call.handles is Handles.SYSTEM:
            prologue = [f"    nvmlReturn_t r = sim_begin_call({fn});",
                        "    const sim_gpu *g = &g_sim.gpus[0];"]
        else:
            physical = 0 if call.handles is Handles.DEVICE else 1
            prologue = ["    sim_gpu *g;", "    int slot;",
                        f"    nvmlReturn_t r = sim_begin_device({fn}, {self.params[0].name}, "
                        f"{physical}, &g, &slot);"]
        link = []
        if call.handles is Handles.LINK:
            name = self.inputs[0].name
            link = ["        if (!g->nvlink_links || sim_mig_active(g)) "
                    "{ r = NVML_ERROR_NOT_SUPPORTED; break; }",
                    f"        if ({name} >= g->nvlink_links) "
                    "{ r = NVML_ERROR_INVALID_ARGUMENT; break; }"]
        self.body()
        signature = ", ".join(p.c() for p in self.params) or "void"
        return "\n".join([
            f"nvmlReturn_t {self.symbol}({signature}) {{", *prologue, "    do {",
            "        if (r != NVML_SUCCESS) break;", *link, *self.lines, "    } while (0);",
            "    return sim_finish(r);", "}", ""])


_PREAMBLE = """\
/* Generated by tests/nvmlsim/generate.py from exporter/simulated/node/call_table.py and
 * nvml.h at build time; not committed. */
#define _GNU_SOURCE
#include <stdio.h>
#include <string.h>

#include "sim_state.h"
"""


def generate(calls: Iterable[SimCall], header: str) -> tuple[str, str]:
    """(the C source of the table's generated entry points, the X-list header)."""
    declared = prototypes(header)
    calls = list(calls)
    functions = []
    for call in calls:
        if call.c_by_hand:
            continue
        for symbol in call.c_symbols:
            if symbol not in declared:
                raise GenerateError(f"{symbol} (call table entry {call.function}) is not "
                                    "declared in nvml.h")
            functions.append(_Function(call, symbol, declared[symbol]).text())
    symbols = [s for call in calls for s in call.c_symbols]
    if len(set(symbols)) != len(symbols):
        raise GenerateError("an entry point appears twice in the call table")
    listing = "".join(f" \\\n    X({s})" for s in symbols)
    table_h = ("/* Generated by tests/nvmlsim/generate.py: the call table's entry points. */\n"
               f"#define SIM_TABLE_FUNCTIONS(X){listing}\n")
    return _PREAMBLE + "\n" + "\n".join(functions), table_h

"""The parts of one entry of the call table (`call_table`): how a simulated GPU answers one
NVML call from a plain value.

An entry says which handles may ask the call, which arguments it answers for, the shape of
its answer (one number, several, a struct's members, a string, a set of 64-bit words, or a
return code), where a scenario of the test library keeps each value (`SimCall.keys`) and
what the demo's GPU answers (`SimCall.demo`). The built-in node answers every entry through
`api_table`; the test library (tests/nvmlsim) generates its C entry points from the same
entries, so a call is described here once for both.
"""

from __future__ import annotations

import enum
import itertools
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any


class Handles(enum.Enum):
    """What the call is asked on."""

    GPU = "a physical GPU's handle; a MIG device's answers NOT_SUPPORTED"
    DEVICE = "a GPU's or a MIG device's handle"
    LINK = ("a physical GPU's handle and, as the first argument, one of its NVLinks: "
            "NOT_SUPPORTED without NVLink or with MIG on, INVALID_ARGUMENT past the last link")
    SYSTEM = "no handle: the node (the test library reads GPU 0's values)"


class Form(enum.Enum):
    """How a struct member holds its value."""

    NUMBER = "a number"
    BYTES = "a number's bytes in a byte array, least significant first"
    TEXT = "a string's bytes in a byte array, the rest zeros; unset: every byte `unset`"
    HEX = "a string of hex digits (dashes ignored) in a byte array, two digits a byte"


@dataclass(frozen=True, slots=True)
class Member:
    """One member of the struct a call answers with, and its value when none is given."""

    name: str
    unset: float | None = None
    """What the member holds when no value is given (a scenario without its key, a demo
    figure without it); None: the member is needed, and the call answers NOT_SUPPORTED."""
    form: Form = Form.NUMBER

    @property
    def table(self) -> str:
        """Return the scenario table its value lives in: "calls" for numbers, or "strings"."""
        return "strings" if self.form in (Form.TEXT, Form.HEX) else "calls"


@dataclass(frozen=True, slots=True)
class Value:
    """One number. `member`: the struct member the C function answers it in, pynvml
    returning the member itself; `version`: the nvml.h macro that struct's version must
    equal (ARGUMENT_VERSION_MISMATCH otherwise)."""

    unset: float | None = None
    """The answer when no value is given; None: NOT_SUPPORTED."""
    member: str = ""
    version: str = ""


@dataclass(frozen=True, slots=True)
class Values:
    """Several numbers, one per out-parameter; pynvml returns them as a list."""

    count: int


@dataclass(frozen=True, slots=True)
class Struct:
    """A struct's members."""

    members: tuple[Member, ...]
    pynvml_class: str = ""
    """The pynvml class its wrapper returns; "": the caller passes the struct to fill."""
    version: str = ""
    cleared: bool = False
    """Every byte but the version is zeroed before the members are written."""


@dataclass(frozen=True, slots=True)
class Text:
    """A string."""


@dataclass(frozen=True, slots=True)
class Words:
    """A set of 64-bit words (an affinity mask); the first argument is how many."""


@dataclass(frozen=True, slots=True)
class ReturnCode:
    """The answer is the return code: a value of 0 answers `error` (nvml.h's name), any
    other SUCCESS."""

    error: str


Answer = Value | Values | Struct | Text | Words | ReturnCode


@dataclass(frozen=True, slots=True)
class SimCall:
    """One NVML call a simulated GPU answers from plain values."""

    function: str
    """pynvml's name; also the C entry point unless `symbols` says otherwise."""
    answer: Answer
    demo: Callable[..., Any]
    """The demo's figure: `demo(asked, *args)` -> the value (a number, a sequence, a member
    -> value mapping, a string, or True for SUCCESS of a `ReturnCode`); None: NOT_SUPPORTED.
    `asked` is `core.Asked`: the GPU asked (and the MIG device asked through) at a time."""
    args: tuple[tuple[int, ...], ...] = ()
    """The values each argument takes (after the link of a `Handles.LINK` call); another
    value answers INVALID_ARGUMENT, as NVML answers an enum value it does not know, except
    the size of a `Words` set: any positive number (its values are the sizes asked)."""
    handles: Handles = Handles.GPU
    symbols: tuple[str, ...] = ()
    """The C entry points pynvml's function calls, where not `function` itself."""
    c_by_hand: bool = False
    """The test library's entry points for it are written by hand (tests/nvmlsim/sim_calls.c):
    a struct of structs, or one call in two struct versions."""
    shape: Callable[..., Any] | None = None
    """pynvml's answer made from `shape(value, *args)` (value None included), where none of
    the shapes above fits."""

    @property
    def c_symbols(self) -> tuple[str, ...]:
        """Return the C entry points this call goes through in the test library."""
        return self.symbols or (self.function,)

    def accepts(self, args: Sequence[int]) -> bool:
        """Tell whether the arguments (after the link of a LINK call) are ones NVML knows."""
        if len(args) != len(self.args):
            return False
        return all((isinstance(self.answer, Words) and i == 0 and arg > 0) or arg in domain
                   for i, (arg, domain) in enumerate(zip(args, self.args, strict=True)))

    def arguments(self, links: int = 0) -> Iterator[tuple[int, ...]]:
        """Return every argument tuple the entry lists, the links of a GPU with `links` first."""
        domains = ((tuple(range(links)),) if self.handles is Handles.LINK else ()) + self.args
        return itertools.product(*domains)

    def keys(self, args: Sequence[int]) -> tuple[tuple[str, str], ...]:
        """Return the (scenario table, key) of each value the call answers with these arguments: the
        call as pynvml makes it without the handle, then the member or list entry."""
        call = f"{self.function}({','.join(str(a) for a in args)})"
        answer = self.answer
        if isinstance(answer, Values):
            return tuple(("calls", f"{call}[{i}]") for i in range(answer.count))
        if isinstance(answer, Words):
            return tuple(("calls", f"{call}[{i}]") for i in range(args[0]))
        if isinstance(answer, Struct):
            return tuple((m.table, f"{call}.{m.name}") for m in answer.members)
        if isinstance(answer, Text):
            return (("strings", call),)
        return (("calls", call),)

    def needed_keys(self, args: Sequence[int]) -> tuple[str, ...]:
        """Return the keys that must hold a value for the call to answer (the rest have `unset`)."""
        answer = self.answer
        if isinstance(answer, Value) and answer.unset is not None:
            return ()
        if isinstance(answer, Struct):
            call = f"{self.function}({','.join(str(a) for a in args)})"
            return tuple(f"{call}.{m.name}" for m in answer.members if m.unset is None)
        return tuple(key for _, key in self.keys(args))

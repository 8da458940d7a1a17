"""Reading the label names dcgm-exporter's Go sources write, without a Go toolchain.

Scans for the few constructs the label tests need: a string constant, the body of a
function or of an `if`/`case` block (braces counted outside strings and comments), the
`"key"` indices a block assigns into a map, the names a block passes to `builder.add`, a
`[]string{N: "text", ...}` table and a `map[group]map[string]struct{}` literal. Each helper
fails with the construct it could not find, so a reshaped upstream file names what moved.
"""

from __future__ import annotations

import re

_STRING = r'"((?:[^"\\]|\\.)*)"'


class GoShapeError(AssertionError):
    """The Go source no longer has the construct a test reads."""


def _unquote(literal: str) -> str:
    return literal.encode().decode("unicode_escape")


def string_constant(source: str, name: str) -> str:
    """The value of `name = "..."` (in a `const` block or a `const name = ...` line)."""
    match = re.search(rf"\b{re.escape(name)}\s*=\s*{_STRING}", source)
    if match is None:
        raise GoShapeError(f"no string constant {name}")
    return _unquote(match.group(1))


_TOKEN = re.compile(r'"(?:[^"\\\n]|\\.)*"|`[^`]*`|\'(?:[^\'\\]|\\.)+\'|//[^\n]*|/\*.*?\*/|[{}]',
                    re.S)
"""Strings, raw strings, runes and comments (whose braces do not count), and braces."""


def block_after(source: str, opening: str) -> str:
    """The text inside the first `{...}` that starts at or after `opening`."""
    at = source.find(opening)
    if at < 0:
        raise GoShapeError(f"no {opening!r}")
    depth, start = 0, -1
    for token in _TOKEN.finditer(source, at):
        if token.group() == "{":
            if depth == 0:
                start = token.end()
            depth += 1
        elif token.group() == "}":
            depth -= 1
            if depth == 0:
                return source[start:token.start()]
    raise GoShapeError(f"unbalanced braces after {opening!r}")


def function_body(source: str, name: str) -> str:
    """The body of `func name(` or of the method `func (...) name(`."""
    match = re.search(rf"^func (?:\([^)]*\) )?{re.escape(name)}\(", source, re.M)
    if match is None:
        raise GoShapeError(f"no func {name}")
    signature_end = source.index(")", match.end())
    return block_after(source, source[match.start():signature_end])


def map_keys_assigned(block: str, map_name: str) -> list[str]:
    """The literal keys of `map_name["key"] = ...` in `block`, in order."""
    return [_unquote(k) for k in re.findall(rf"\b{re.escape(map_name)}\[{_STRING}\]\s*=", block)]


def builder_adds(block: str) -> list[str]:
    """The literal names of `builder.add("name", ...)` in `block`, in order."""
    return [_unquote(n) for n in re.findall(rf"builder\.add\({_STRING},", block)]


def case_blocks(switch_body: str) -> dict[str, str]:
    """`case dcgm.FE_X:` -> the text up to the next case (or default)."""
    parts = re.split(r"^\s*(?:case (dcgm\.\w+):|default:)", switch_body, flags=re.M)
    return {parts[i]: parts[i + 1] for i in range(1, len(parts) - 1, 2) if parts[i]}


def indexed_string_table(source: str, name: str) -> list[str]:
    """`name = []string{0: "a", 1: "b", ...}` as a list; the indices must run 0, 1, 2, ..."""
    body = block_after(source, f"{name} = []string{{")
    entries = re.findall(rf"^\s*(\d+):\s*{_STRING},", body, re.M)
    if [int(i) for i, _ in entries] != list(range(len(entries))) or not entries:
        raise GoShapeError(f"{name}: indices are not 0, 1, 2, ...")
    return [_unquote(text) for _, text in entries]


def group_name_sets(source: str, name: str) -> dict[str, set[str]]:
    """`name = map[...]map[string]struct{}{ dcgm.FE_X: {"a": {}, ...}, ... }` by group."""
    start = source.find(f"{name} = map[")
    literal = source.find("struct{}{", start)
    if start < 0 or literal < 0:
        raise GoShapeError(f"no map literal {name}")
    # The literal's brace follows the value type's `struct{}`.
    body = block_after(source[literal + len("struct{}"):], "{")
    out: dict[str, set[str]] = {}
    for group, names in re.findall(r"(dcgm\.\w+):\s*\{((?:[^{}]|\{\})*)\}", body):
        out[group] = {_unquote(n) for n in re.findall(rf"{_STRING}:\s*\{{\}}", names)}
    if not out:
        raise GoShapeError(f"{name}: no groups")
    return out

r"""Go's `path.Match` patterns, which dcgm-exporter matches watch groups' field patterns with.

`*` is any run of characters but `/`, `?` one character but `/`, `[...]` a class (`[^...]`
negated; `lo-hi` ranges), `\c` the character c; matching is case-sensitive and covers the
whole name. Python's `fnmatch` differs: it negates with `[!...]` (in Go `!` is a member),
reads a backslash as itself, lets `*` cross `/`, and takes a malformed pattern (`[abc`,
`[]`, `[a-]`, a trailing backslash) literally where Go refuses it; hence this translation.
"""

from __future__ import annotations

import re


class BadPattern(ValueError):
    """A pattern Go's path.Match refuses (path.ErrBadPattern)."""


def compile_go_pattern(pattern: str) -> re.Pattern[str]:
    """Return a regex that fully matches exactly the names `pattern` matches in Go."""
    parts: list[str] = []
    index = 0
    while index < len(pattern):
        char = pattern[index]
        if char == "*":
            parts.append("[^/]*")
        elif char == "?":
            parts.append("[^/]")
        elif char == "[":
            part, index = _char_class(pattern, index + 1)
            parts.append(part)
            continue
        elif char == "\\":
            if index + 1 == len(pattern):
                raise BadPattern("ends in a backslash that escapes nothing")
            index += 1
            parts.append(re.escape(pattern[index]))
        else:
            parts.append(re.escape(char))
        index += 1
    return re.compile("".join(parts), re.DOTALL)


def _char_class(pattern: str, index: int) -> tuple[str, int]:
    """Return the regex for the class whose body starts at `index`, and the index after its
    `]`."""
    negated = pattern.startswith("^", index)
    if negated:
        index += 1
    ranges: list[tuple[str, str]] = []
    count = 0
    while not (pattern.startswith("]", index) and count):
        low, index = _class_char(pattern, index)
        high = low
        if pattern[index] == "-":  # _class_char leaves at least one character
            high, index = _class_char(pattern, index + 1)
        count += 1
        if low <= high:  # Go accepts a reversed range, which matches nothing
            ranges.append((low, high))
    body = "".join(re.escape(low) if low == high else f"{re.escape(low)}-{re.escape(high)}"
                   for low, high in ranges)
    if not body:
        return ("[\\s\\S]" if negated else "(?!)"), index + 1
    return f"[{'^' if negated else ''}{body}]", index + 1


def _class_char(pattern: str, index: int) -> tuple[str, int]:
    """Return one character of a class, its escape removed, and the index after it, read as
    Go's getEsc reads it; BadPattern where Go refuses the class."""
    if index >= len(pattern) or pattern[index] in "-]":
        raise BadPattern("a character class must be closed by ']' and hold characters or "
                         "ranges; '-' and ']' inside it need a backslash")
    if pattern[index] == "\\":
        index += 1
        if index == len(pattern):
            raise BadPattern("ends in a backslash that escapes nothing")
    if index + 1 >= len(pattern):
        raise BadPattern("a character class is not closed by ']'")
    return pattern[index], index + 1

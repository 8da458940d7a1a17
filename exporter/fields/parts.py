"""The text form of a field's source (`FieldSpec.part`), as `dcgm-names.csv` stores it.

    82                                  a field id (`nvmlDeviceGetFieldValues`, scope 0), a GPM id
    138@4294967295+139@4294967295       `FieldRefs`: field ids at scope ids, summed
    138@link                            ... at the link entity's index
    gpm-link:63:213                     `GpmLink`
    nvmlDeviceGetMaxClockInfo(h,1)      `Call`: arguments (`h` the handle, `link` the link)
    nvmlDeviceGetBAR1MemoryInfo(h).bar1Total, nvmlDeviceGetCpuAffinity(h,4)[0]
    .total                              an attribute of a named reader's answer
"""

from __future__ import annotations

import re

from exporter.fields.catalog import HANDLE, LINK, Arg, Call, FieldRefs, GpmLink, NvmlSource

_CALL = re.compile(r"(\w+)\(([^)]*)\)(?:\.(\w+)|\[(\d+)\])?")


def _arg(text: str) -> Arg:
    return text if text in (HANDLE, LINK) else int(text)


def format_part(part: NvmlSource) -> str:
    """Return a field's source in the text form that dcgm-names.csv stores (empty when it has
    none)."""
    if part is None:
        return ""
    if isinstance(part, int):
        return str(part)
    if isinstance(part, str):
        return f".{part}"
    if isinstance(part, FieldRefs):
        return "+".join(f"{f}@{s}" for f, s in part.refs)
    if isinstance(part, GpmLink):
        return f"gpm-link:{part.low}:{part.high}"
    pick = "" if part.pick is None else (
        f".{part.pick}" if isinstance(part.pick, str) else f"[{part.pick}]")
    return f"{part.function}({','.join(map(str, part.args))}){pick}"


def parse_part(text: str) -> NvmlSource:
    """Return the source that `format_part` wrote as this text; raise ValueError for text it
    could not have written."""
    if not text:
        return None
    if text.isdigit():
        return int(text)
    if text.startswith("."):
        return text[1:]
    if text.startswith("gpm-link:"):
        _, low, high = text.split(":")
        return GpmLink(int(low), int(high))
    if "@" in text:
        refs = []
        for ref in text.split("+"):
            field_id, scope = ref.split("@")
            refs.append((int(field_id), _arg(scope)))
        return FieldRefs(tuple(refs))
    match = _CALL.fullmatch(text)
    if match is None:
        raise ValueError(f"not a field source: {text!r}")
    function, args, attribute, index = match.groups()
    pick: str | int | None = attribute if attribute else int(index) if index else None
    return Call(function, tuple(_arg(a) for a in args.split(",") if a), pick)

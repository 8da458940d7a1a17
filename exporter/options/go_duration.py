"""Go's duration syntax (`time.ParseDuration`), which dcgm-exporter's newer flags and its YAML
config file take: `10s`, `1m30s`, `1.5h`, `250ms`, `10m0s`, `-1s`, a bare `0`.

It differs from this exporter's own grammar (`exporter.durations`): units are `ns`, `us`
(`µs`), `ms`, `s`, `m` and `h` only (no days), a sign is allowed, and a bare number other
than 0 is an error ("missing unit"). The result is whole nanoseconds, as Go keeps it, so
that "whole milliseconds" can be checked exactly.
"""

from __future__ import annotations

import re
from fractions import Fraction

NANOSECONDS: dict[str, int] = {"ns": 1, "us": 1_000, "µs": 1_000, "μs": 1_000,
                               "ms": 1_000_000, "s": 1_000_000_000, "m": 60_000_000_000,
                               "h": 3_600_000_000_000}
MAX_NANOSECONDS = 2**63 - 1
"""Go's time.Duration is an int64 of nanoseconds (about 292 years)."""
_PART = re.compile(r"(\d+\.?\d*|\.\d+)([a-zµμ]*)")


def parse_go_duration(text: str) -> int:
    """Return the whole nanoseconds of Go duration text (a fraction of a nanosecond is
    dropped, as Go drops it); ValueError says what is wrong in Go's words."""
    quoted = f'"{text}"'
    rest = text
    sign = 1
    if rest[:1] in "+-" and rest:
        sign = -1 if rest[0] == "-" else 1
        rest = rest[1:]
    if rest == "0":
        return 0
    if not rest:
        raise ValueError(f"invalid duration {quoted}")
    total = Fraction(0)
    while rest:
        match = _PART.match(rest)
        if match is None:
            raise ValueError(f"invalid duration {quoted}")
        number, unit = match.groups()
        if not unit:
            raise ValueError(f"missing unit in duration {quoted}")
        if unit not in NANOSECONDS:
            raise ValueError(f'unknown unit "{unit}" in duration {quoted}')
        total += Fraction(number) * NANOSECONDS[unit]
        rest = rest[match.end():]
    if total > MAX_NANOSECONDS:
        raise ValueError(f"invalid duration {quoted}")
    return sign * int(total)  # Go truncates a fraction of a nanosecond


def go_seconds(text: str) -> float:
    """Return the seconds of Go duration text; ValueError as parse_go_duration raises it."""
    return parse_go_duration(text) / 1e9


def go_text(seconds: float) -> str:
    """Return `seconds` written as Go prints a duration: 600 -> "10m0s", 10 -> "10s",
    0.5 -> "500ms"."""
    ns = round(seconds * 1e9)
    if ns == 0:
        return "0s"
    sign, ns = ("-", -ns) if ns < 0 else ("", ns)
    if ns < 1_000_000_000:
        for unit, size in (("ms", 1_000_000), ("µs", 1_000), ("ns", 1)):
            if ns >= size:
                return f"{sign}{_trimmed(Fraction(ns, size))}{unit}"
    hours, ns = divmod(ns, NANOSECONDS["h"])
    minutes, ns = divmod(ns, NANOSECONDS["m"])
    text = f"{_trimmed(Fraction(ns, NANOSECONDS['s']))}s"
    if hours:
        return f"{sign}{hours}h{minutes}m{text}"
    if minutes:
        return f"{sign}{minutes}m{text}"
    return f"{sign}{text}"


def _trimmed(value: Fraction) -> str:
    whole, fraction = divmod(value, 1)
    if not fraction:
        return str(whole)
    return f"{float(value):.9f}".rstrip("0")

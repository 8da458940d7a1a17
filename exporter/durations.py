"""The one grammar of durations, for every command, flag, variable, file and fault spec.

A duration is one or more `<number><unit>` parts written together, as Prometheus writes them
(`90d`, `1h30m`, `500ms`, `2.5s`), units `ms`, `s`, `m`, `h`, `d`, `w`, `y` (365 days);
blanks around it are ignored. A caller may also take a bare number in a unit of its choosing
(dcgm-exporter's `-c 30000` is milliseconds). What comes out is finite and at most
`MAX_SECONDS`: `inf`, `nan`, exponents and numbers too long to mean anything are refused
with the expected form, never passed on to overflow later.
"""

from __future__ import annotations

import math
import re

UNIT_SECONDS: dict[str, float] = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0,
                                  "d": 86400.0, "w": 7 * 86400.0, "y": 365 * 86400.0}
_NUMBER = r"\d{1,20}(?:\.\d{1,9})?"
"""At most 20 digits before the point and 9 after: enough for any duration one means."""
_PART = re.compile(rf"({_NUMBER})(ms|s|m|h|d|w|y)")
_BARE = re.compile(rf"{_NUMBER}")
MAX_SECONDS = 100 * UNIT_SECONDS["y"]
"""A century: longer than any range a report or a window means."""
DURATION_HINT = "a duration such as 30s, 500ms, 2m, 1h30m or 7d"


def shown(text: str, limit: int = 40) -> str:
    """Return `text` quoted for an error message, cut short: a flag's value can be any length."""
    return repr(text if len(text) <= limit else text[:limit - 3] + "...")


def parse_duration(text: str, bare_unit: str | None = None) -> float:
    """Return the seconds, finite, from 0 to MAX_SECONDS. A number without a unit is in `bare_unit`,
    or an error when `bare_unit` is None. ValueError names the expected form."""
    compact = text.strip()
    if bare_unit is not None and _BARE.fullmatch(compact):
        seconds = float(compact) * UNIT_SECONDS[bare_unit]
    else:
        parts = _PART.findall(compact)
        if not parts or "".join(n + u for n, u in parts) != compact:
            bare = f" (a bare number is in {bare_unit})" if bare_unit else ""
            raise ValueError(f"{shown(text)} is not {DURATION_HINT}{bare}")
        seconds = sum(float(n) * UNIT_SECONDS[u] for n, u in parts)
    if not math.isfinite(seconds) or seconds > MAX_SECONDS:
        raise ValueError(f"{shown(text)} is longer than the longest duration accepted, "
                         f"{MAX_SECONDS / UNIT_SECONDS['y']:.0f} years")
    return seconds

"""Durations as people write them on command lines and in fault specs: 30s, 500ms, 2m, 1h."""

from __future__ import annotations

import math
import re

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*$")
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
DURATION_HINT = "a duration such as 30s, 2m, 500ms or 1h"


def parse_duration(text: str, bare_unit: str | None = None) -> float:
    """Seconds. A number without a unit is in `bare_unit` (dcgm's `-c` is milliseconds), or
    an error when `bare_unit` is None. ValueError names the expected form."""
    match = _DURATION.match(text)
    if match is None or (match.group(2) is None and bare_unit is None):
        raise ValueError(f"{text!r} is not {DURATION_HINT}")
    seconds = float(match.group(1)) * _UNIT_SECONDS[match.group(2) or str(bare_unit)]
    if not math.isfinite(seconds):  # hundreds of digits overflow to infinity
        raise ValueError(f"{text!r} is too long a duration")
    return seconds

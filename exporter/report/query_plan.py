"""What a report covers: its time range cut into windows, and the query calls
that fetch those windows without passing the server's point limit.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from exporter.promql import duration
from exporter.report.connection import ReportError

MAX_POINTS = 11_000
"""Prometheus refuses a range query with more points than this per series."""
MAX_WINDOWS = 100_000
"""Most windows of one kind (chart steps, idle windows) a report cuts its range into: a
year in 10-minute windows is 52,560. Beyond it the report would hold millions of rows."""


@dataclass(frozen=True, slots=True)
class Window:
    """One window of the report's range: when it ends (Unix seconds) and how long it is."""

    end: float
    length_s: float


@dataclass(frozen=True, slots=True)
class Call:
    """One query: an instant query (`first == last`) or a range query over equal windows."""

    first: float
    last: float
    step_s: float

    @property
    def instant(self) -> bool:
        """Return whether the call is an instant query, which it is when it covers a single
        window."""
        return self.first == self.last


def multiple_of(seconds: float, unit: float) -> float:
    """Return `seconds` rounded up to a whole number of `unit`s (at least one)."""
    return max(1, math.ceil(round(seconds / unit, 6))) * unit


def auto_step(range_s: float, unit: float) -> float:
    """Return the chart step used when none is asked for: a day for a range of three days or
    more, an hour for three hours or more, else a thirtieth of the range; rounded up to a whole
    number of `unit`s."""
    if range_s >= 3 * 86400:
        step = 86400.0
    elif range_s >= 3 * 3600:
        step = 3600.0
    else:
        step = range_s / 30
    return multiple_of(step, unit)


def check_window_count(range_s: float, width_s: float, option: str) -> None:
    """Raise ReportError naming `option` when windows of `width_s` cut `range_s` into more than
    MAX_WINDOWS."""
    count = math.ceil(range_s / width_s)
    if count > MAX_WINDOWS:
        raise ReportError(
            f"{option} {duration(width_s)} cuts the {duration(range_s)} range into "
            f"{count:,} windows, more than {MAX_WINDOWS:,}: make {option} longer or the range "
            "shorter")


def windows(start: float, end: float, step_s: float) -> list[Window]:
    """Return the consecutive windows from `start`: whole steps, then what is left (shorter)."""
    out: list[Window] = []
    t = start
    while end - t > 1e-6:
        length = min(step_s, end - t)
        out.append(Window(t + length, length))
        t += length
    return out


def calls(parts: list[Window], max_chunk_s: float) -> list[Call]:
    """Return the range queries over runs of equal windows, each under MAX_POINTS points and
    `max_chunk_s` of time (at least one window)."""
    out: list[Call] = []
    i = 0
    while i < len(parts):
        length = parts[i].length_s
        limit = min(MAX_POINTS, max(1, int(max_chunk_s // length)))
        j = i
        while j + 1 < len(parts) and j + 1 - i < limit and \
                abs(parts[j + 1].length_s - length) < 1e-6:
            j += 1
        out.append(Call(parts[i].end, parts[j].end, length))
        i = j + 1
    return out


def aligned_windows(start: float, end: float, window_s: float) -> list[float]:
    """Return the end times of the windows of `window_s` aligned to multiples of it (from the Unix
    epoch, as subqueries align) that lie wholly inside [start, end]."""
    first = math.ceil(round((start + window_s) / window_s, 6)) * window_s
    last = math.floor(round(end / window_s, 6)) * window_s
    count = round((last - first) / window_s) + 1
    return [first + i * window_s for i in range(max(0, count))]

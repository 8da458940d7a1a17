"""What a report covers: its groups, its time range cut into windows, and the query calls
that fetch those windows without passing the server's point limit.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from exporter.k8s.inference_labels import MODEL, QUEUE, ROLE, Dimension
from exporter.k8s.label_names import series_label_name
from exporter.promql import duration
from exporter.report.connection import ReportError

MAX_POINTS = 11_000
"""Prometheus refuses a range query with more points than this per series."""
MAX_WINDOWS = 100_000
"""Most windows of one kind (chart steps, idle windows) a report cuts its range into: a
year in 10-minute windows is 52,560. Beyond it the report would hold millions of rows."""
LABEL_PREFIX = "label:"
INFERENCE_DIMENSIONS: dict[str, Dimension] = {"role": ROLE, "queue": QUEUE, "served-model": MODEL}
"""`--group-by` names of the inference dimensions (`model` is the GPU model, `modelName`)."""


@dataclass(frozen=True, slots=True)
class Grouping:
    """How rows are grouped: the PromQL labels aggregated by and how they make a name."""

    name: str
    labels: tuple[str, ...]
    """Grouped by in PromQL; the group is the first non-empty, or all joined by `/`."""
    joined: bool = False
    """True: the group's name is every label joined (namespace/pod); False: the first one
    present (Hostname, else hostname, else instance)."""
    accepted: tuple[str, ...] = ()
    """Per label, the regex (matched in full) its value must match to name the group; empty:
    any value. Dynamo's component type names a role only when it says prefill or decode."""

    def key(self, labels: dict[str, str]) -> str:
        values = [labels.get(name, "") for name in self.labels]
        if self.joined:
            return "/".join(values)
        patterns = self.accepted or (".+",) * len(values)
        return next((v for v, p in zip(values, patterns, strict=True)
                     if v and re.fullmatch(p, v)), "")

    @property
    def by(self) -> str:
        return ", ".join(self.labels)


def grouping(name: str) -> Grouping:
    if name == "namespace":
        return Grouping(name, ("namespace",))
    if name == "pod":
        return Grouping(name, ("namespace", "pod"), joined=True)
    if name == "node":
        return Grouping(name, ("Hostname", "hostname", "instance"))
    if name == "model":
        return Grouping(name, ("modelName",))
    if name in INFERENCE_DIMENSIONS:
        # The labels a pod-label preset writes, highest precedence first.
        sources = INFERENCE_DIMENSIONS[name].sources
        return Grouping(name, tuple(s.label for s in sources),
                        accepted=tuple(s.values for s in sources))
    if name.startswith(LABEL_PREFIX):
        key = name[len(LABEL_PREFIX):].strip()
        # `--kubernetes.pod-labels` writes label_<key>; dcgm-exporter's pod labels the key.
        return Grouping(name, (series_label_name(key, "label_"), series_label_name(key)))
    raise ReportError(f"unknown grouping {name!r}")


@dataclass(frozen=True, slots=True)
class Window:
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
        return self.first == self.last


def multiple_of(seconds: float, unit: float) -> float:
    """`seconds` rounded up to a whole number of `unit`s (at least one)."""
    return max(1, math.ceil(round(seconds / unit, 6))) * unit


def auto_step(range_s: float, unit: float) -> float:
    if range_s >= 3 * 86400:
        step = 86400.0
    elif range_s >= 3 * 3600:
        step = 3600.0
    else:
        step = range_s / 30
    return multiple_of(step, unit)


def check_window_count(range_s: float, width_s: float, option: str) -> None:
    """ReportError naming `option` when windows of `width_s` cut `range_s` into more than
    MAX_WINDOWS."""
    count = math.ceil(range_s / width_s)
    if count > MAX_WINDOWS:
        raise ReportError(
            f"{option} {duration(width_s)} cuts the {duration(range_s)} range into "
            f"{count:,} windows, more than {MAX_WINDOWS:,}: make {option} longer or the range "
            "shorter")


def windows(start: float, end: float, step_s: float) -> list[Window]:
    """Consecutive windows from `start`: whole steps, then what is left (shorter)."""
    out: list[Window] = []
    t = start
    while end - t > 1e-6:
        length = min(step_s, end - t)
        out.append(Window(t + length, length))
        t += length
    return out


def calls(parts: list[Window], max_chunk_s: float) -> list[Call]:
    """Range queries over runs of equal windows, each under MAX_POINTS points and
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
    """End times of the windows of `window_s` aligned to multiples of it (from the Unix
    epoch, as subqueries align) that lie wholly inside [start, end]."""
    first = math.ceil(round((start + window_s) / window_s, 6)) * window_s
    last = math.floor(round(end / window_s, 6)) * window_s
    count = round((last - first) / window_s) + 1
    return [first + i * window_s for i in range(max(0, count))]

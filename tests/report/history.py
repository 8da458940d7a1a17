"""Synthetic history for a real Prometheus or VictoriaMetrics: the series the exporter would
have written for a fleet over days or weeks, and the series its usage recording rules would
have recorded, as OpenMetrics text that `promtool tsdb create-blocks-from openmetrics` turns
into storage blocks, or as the JSON lines VictoriaMetrics imports (`/api/v1/import`).

Each GPU is whole (no MIG) and held by one pod after another; utilisation and power are
constant per tenancy, so the expected figures follow from the tenancies alone. An energy
counter may be reset at a chosen sample (a driver reload), right after it was scraped.

Backfilled series carry no staleness markers: start the Prometheus reading them with
`--query.lookback-delta` near the sample interval, or a series that ended would still be
seen for the default five minutes.
"""

from __future__ import annotations

import json
import math
import random
import subprocess
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from exporter.promql.figures import (
    ACTIVE,
    ACTIVITY_MAX,
    ALLOCATED,
    ENERGY,
    FB_MIB_HOURS,
    FB_PEAK,
    HELD_HOURS,
    IDLE,
    Figure,
)
from exporter.promql.rules import (
    GROUP_BY,
    GROUP_LAG_WINDOWS,
    GROUP_MARKER,
    IDLE_MARKER,
    RULE_MARKER,
)
from tests.support.requirements import require_tool

MODEL = "NVIDIA H100 80GB HBM3"
IDLE_POWER_W = 70.0
LOAD_POWER_W = 630.0
IDLE_BELOW = 0.05
Labels = tuple[tuple[str, str], ...]


def host_label(node: str) -> str:
    """The node's host label: 4.8.2's `Hostname` on odd-numbered nodes (`node-0001`, and
    `node-b`), `hostname` (4.8.3 and later, this exporter's default) on the others, so a
    history of more than one node is a fleet of both."""
    return "Hostname" if node[-1] in "13579b" else "hostname"


@dataclass(frozen=True, slots=True)
class Gpu:
    node: str
    index: int

    @property
    def uuid(self) -> str:
        return f"GPU-{abs(hash((self.node, self.index))) % 10**12:012d}-synthetic"

    def labels(self) -> Labels:
        return (("gpu", str(self.index)), ("UUID", self.uuid),
                ("device", f"nvidia{self.index}"), ("modelName", MODEL),
                (host_label(self.node), self.node))


@dataclass(frozen=True, slots=True)
class Tenancy:
    gpu: Gpu
    namespace: str
    pod: str
    start: float
    end: float
    utilisation: float
    """0-1, constant while held."""

    @property
    def power_w(self) -> float:
        return IDLE_POWER_W + (LOAD_POWER_W - IDLE_POWER_W) * self.utilisation

    @property
    def framebuffer_mib(self) -> float:
        return 40000.0 * self.utilisation + 1000


@dataclass(frozen=True, slots=True)
class History:
    start: float
    end: float
    interval_s: float
    gpus: tuple[Gpu, ...]
    tenancies: tuple[Tenancy, ...]
    resets: frozenset[tuple[str, float]] = frozenset()
    """(GPU UUID, sample time) after whose scrape the GPU's energy counter restarts at 0."""
    profiling: bool = False
    """Also `DCGM_FI_PROF_GR_ENGINE_ACTIVE`, as Hopper GPUs serve it."""

    def times(self) -> list[float]:
        count = math.floor(round((self.end - self.start) / self.interval_s, 6)) + 1
        return [self.start + i * self.interval_s for i in range(count)]


@dataclass(frozen=True, slots=True)
class Series:
    name: str
    labels: Labels
    times: list[float]
    values: list[float]


def fleet(nodes: int, gpus_per_node: int, start: float, end: float, interval_s: float,
          mean_tenancy_s: float, namespaces: int, seed: int = 0, profiling: bool = False
          ) -> History:
    """GPUs held by one pod after another, each for an exponential time, with gaps."""
    rng = random.Random(seed)
    gpus = tuple(Gpu(f"node-{n:04d}", i) for n in range(nodes) for i in range(gpus_per_node))
    tenancies = []
    for gpu in gpus:
        t = start + rng.uniform(0, mean_tenancy_s / 4)
        number = 0
        while t < end:
            length = max(interval_s * 4, rng.expovariate(1 / mean_tenancy_s))
            namespace = f"team-{rng.randrange(namespaces):03d}"
            tenancies.append(Tenancy(gpu, namespace, f"job-{gpu.node}-{gpu.index}-{number}",
                                     t, min(end, t + length), rng.choice((0.0, 0.3, 0.6, 0.9))))
            number += 1
            t += length + rng.expovariate(4 / mean_tenancy_s)
    return History(start, end, interval_s, gpus, tuple(tenancies), profiling=profiling)


def _holders(history: History, times: list[float]) -> dict[str, list[Tenancy | None]]:
    """Per GPU, its holder at each sample time (one walk over its tenancies)."""
    by_gpu: dict[str, list[Tenancy]] = {g.uuid: [] for g in history.gpus}
    for tenancy in history.tenancies:
        by_gpu[tenancy.gpu.uuid].append(tenancy)
    out: dict[str, list[Tenancy | None]] = {}
    for uuid, tenancies in by_gpu.items():
        tenancies.sort(key=lambda x: x.start)
        holders: list[Tenancy | None] = []
        i = 0
        for t in times:
            while i < len(tenancies) and tenancies[i].end <= t:
                i += 1
            holders.append(tenancies[i] if i < len(tenancies) and tenancies[i].start <= t
                           else None)
        out[uuid] = holders
    return out


def _segments(gpu: Gpu, times: list[float], holders: list[Tenancy | None],
              name: str, values: list[float]) -> Iterator[Series]:
    """The GPU's samples cut where the holder changes: one series per holder (its labels)."""
    start = 0
    for i in range(1, len(times) + 1):
        if i == len(times) or holders[i] is not holders[start]:
            holder = holders[start]
            pod = () if holder is None else (("namespace", holder.namespace),
                                             ("pod", holder.pod), ("container", "main"))
            yield Series(name, gpu.labels() + pod, times[start:i], values[start:i])
            start = i


FRAMEBUFFER = "DCGM_FI_DEV_FB_USED"
UTILISATION = "DCGM_FI_DEV_GPU_UTIL"
GR_ENGINE = "DCGM_FI_PROF_GR_ENGINE_ACTIVE"
ENERGY_COUNTER = "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"
GAUGES: dict[str, Callable[[Tenancy | None], float]] = {
    FRAMEBUFFER: lambda h: h.framebuffer_mib if h else 0.0,
    UTILISATION: lambda h: float(round(100 * h.utilisation)) if h else 0.0,
    GR_ENGINE: lambda h: h.utilisation if h else 0.0,
}


def families(history: History) -> tuple[str, ...]:
    """The exporter's metric families in the history, in the order they are written."""
    return (FRAMEBUFFER, UTILISATION, *((GR_ENGINE,) if history.profiling else ()),
            ENERGY_COUNTER)


def raw_series(history: History, only: str | None = None) -> Iterator[Series]:
    """The exporter's series, family by family (`only`: that family's)."""
    times = history.times()
    holders = _holders(history, times)
    for name in families(history):
        if only is not None and name != only:
            continue
        for gpu in history.gpus:
            held = holders[gpu.uuid]
            if name != ENERGY_COUNTER:
                values = [GAUGES[name](h) for h in held]
            else:
                values, counter = [], 1e9  # the counter has run since the driver loaded
                for t, h in zip(times, held, strict=True):
                    values.append(counter)
                    if (gpu.uuid, t) in history.resets:
                        counter = 0.0
                    counter += (h.power_w if h else IDLE_POWER_W) * history.interval_s * 1000
            yield from _segments(gpu, times, held, name, values)


def _window_ends(history: History, window_s: float) -> list[float]:
    first = math.ceil((history.start + window_s) / window_s) * window_s
    return [t for t in (first + i * window_s for i in range(
        max(0, math.floor((history.end - first) / window_s) + 1))) if t <= history.end]


POD_FIGURES: dict[Figure, Callable[[Tenancy, float], float]] = {
    ALLOCATED: lambda _t, h: h,
    ACTIVE: lambda t, h: h * t.utilisation,
    ACTIVITY_MAX: lambda t, _h: t.utilisation,
    ENERGY: lambda t, h: h * t.power_w / 1000,
    FB_MIB_HOURS: lambda t, h: h * t.framebuffer_mib,
    HELD_HOURS: lambda _t, h: h,
    FB_PEAK: lambda t, _h: t.framebuffer_mib,
}


def rule_series(history: History, window_s: float = 3600.0,
                groupings: tuple[str, ...] = ("namespace",)) -> Iterator[Series]:
    """What the usage recording rules would have recorded (`exporter.promql.rules`): each
    pod's figures per window, computed from its tenancy (held the whole time it is
    scheduled); then, one window later, idle GPU-hours per pod and every figure per group
    of `groupings` (here: namespace). Family by family."""
    ends = _window_ends(history, window_s)
    lag = GROUP_LAG_WINDOWS * window_s
    source = "profiling" if history.profiling else "utilisation"
    held: list[tuple[Tenancy, list[tuple[float, float]]]] = []
    for tenancy in history.tenancies:
        hours = []
        k = max(0, math.ceil((tenancy.start - ends[0]) / window_s)) if ends else 0
        while k < len(ends) and ends[k] - window_s < tenancy.end:
            overlap = min(ends[k], tenancy.end) - max(ends[k] - window_s, tenancy.start)
            if overlap > 0:
                hours.append((ends[k], overlap / 3600))
            k += 1
        held.append((tenancy, hours))

    def pod_labels(t: Tenancy, figure: Figure) -> Labels:
        extra = (("activity_source", source),) if figure is ACTIVE else ()
        return (("namespace", t.namespace), ("pod", t.pod), ("modelName", MODEL),
                (host_label(t.gpu.node), t.gpu.node), *extra)

    yield Series(RULE_MARKER, (), ends, [window_s] * len(ends))
    for figure, value in POD_FIGURES.items():
        for tenancy, hours in held:
            if hours:
                yield Series(figure.rule, pod_labels(tenancy, figure), [e for e, _ in hours],
                             [value(tenancy, h) for _, h in hours])
    idle = [(t, hours) for t, hours in held if t.utilisation < IDLE_BELOW and hours]
    for tenancy, hours in idle:
        yield Series(IDLE.rule, pod_labels(tenancy, IDLE), [e + lag for e, _ in hours],
                     [h for _, h in hours])
    yield Series(IDLE_MARKER, (), [e + lag for e in ends], [IDLE_BELOW] * len(ends))
    for grouping in groupings:
        if grouping != "namespace":
            raise ValueError(f"this history records the namespace grouping only, not {grouping}")
        yield from _namespace_rules(held, ends, window_s, lag, source)


def _namespace_rules(held: list[tuple[Tenancy, list[tuple[float, float]]]], ends: list[float],
                     window_s: float, lag: float, source: str) -> Iterator[Series]:
    tag = (GROUP_BY, "namespace")
    yield Series(GROUP_MARKER, (tag,), [e + lag for e in ends], [window_s] * len(ends))
    figures: dict[Figure, Callable[[Tenancy, float], float]] = {
        **{f: POD_FIGURES[f] for f in (ALLOCATED, ACTIVE, ENERGY, FB_MIB_HOURS, HELD_HOURS,
                                       FB_PEAK)},
        IDLE: lambda t, h: h if t.utilisation < IDLE_BELOW else 0.0}
    for figure, value in figures.items():
        totals: dict[str, dict[float, float]] = defaultdict(dict)
        for tenancy, hours in held:
            per_end = totals[tenancy.namespace]
            for end, h in hours:
                v = value(tenancy, h)
                if figure is IDLE and v == 0:
                    continue
                old = per_end.get(end)
                per_end[end] = v if old is None else (max(old, v) if figure is FB_PEAK
                                                      else old + v)
        for namespace, per_end in sorted(totals.items()):
            extra = ((("modelName", MODEL),) if figure is ALLOCATED else
                     (("activity_source", source),) if figure is ACTIVE else ())
            points = sorted(per_end.items())
            yield Series(figure.group_rule, (tag, ("namespace", namespace), *extra),
                         [e + lag for e, _ in points], [v for _, v in points])


def write_openmetrics(series: Iterable[Series], out: TextIO) -> int:
    """`series` (family by family) as OpenMetrics text, without the `# EOF`; returns the
    number of samples."""
    samples, family = 0, None
    for s in series:
        if s.name != family:
            family = s.name
            kind = "unknown" if s.name == "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION" else "gauge"
            out.write(f"# TYPE {s.name} {kind}\n")
        labels = ",".join(f'{k}="{v}"' for k, v in s.labels)
        head = f"{s.name}{{{labels}}} " if labels else f"{s.name} "
        out.writelines(f"{head}{v!r} {t:.3f}\n" for t, v in zip(s.times, s.values, strict=True))
        samples += len(s.times)
    return samples


def write_vm_json(series: Iterable[Series], out: TextIO) -> int:
    """`series` as VictoriaMetrics' JSON import lines; returns the number of samples."""
    samples = 0
    for s in series:
        out.write(json.dumps({"metric": {"__name__": s.name, **dict(s.labels)},
                              "values": s.values,
                              "timestamps": [round(t * 1000) for t in s.times]}))
        out.write("\n")
        samples += len(s.times)
    return samples


def write_history(history: History, out: TextIO, with_rules: bool = False) -> int:
    """The history (and with `with_rules` its rules' series) as OpenMetrics, with `# EOF`."""
    samples = write_openmetrics(raw_series(history), out)
    if with_rules:
        samples += write_openmetrics(rule_series(history), out)
    out.write("# EOF\n")
    return samples


def backfill_file(source: Path, tsdb: Path, span_h: int) -> None:
    """Storage blocks under `tsdb` from an OpenMetrics file, one block per `span_h` hours."""
    promtool = require_tool("promtool", "prometheus")
    result = subprocess.run([promtool, "tsdb", "create-blocks-from", "openmetrics",
                             f"--max-block-duration={span_h}h", str(source), str(tsdb)],
                            capture_output=True, text=True, timeout=3600)
    if result.returncode != 0:
        raise AssertionError(f"promtool backfill failed:\n{result.stdout}{result.stderr}")


def backfill(history: History, folder: Path, with_rules: bool = False) -> Path:
    """Storage blocks holding `history` (and with `with_rules` its recording rules' series),
    under `folder/tsdb`."""
    folder.mkdir(parents=True, exist_ok=True)
    source = folder / "history.om"
    with source.open("w") as out:
        write_history(history, out, with_rules)
    tsdb = folder / "tsdb"
    # One pass over the file per block: the default 2 h blocks would mean a pass per 2 h of
    # history, so blocks may span the whole history (Prometheus compacts them anyway).
    backfill_file(source, tsdb, max(2, int((history.end - history.start) // 3600) + 1))
    source.unlink()
    return tsdb


def expected_hours(history: History, start: float, end: float) -> dict[str, float]:
    """Allocated GPU-hours per namespace between `start` and `end`."""
    totals: dict[str, float] = {}
    for t in history.tenancies:
        held = max(0.0, min(end, t.end) - max(start, t.start))
        totals[t.namespace] = totals.get(t.namespace, 0.0) + held / 3600
    return {ns: h for ns, h in totals.items() if h > 0}

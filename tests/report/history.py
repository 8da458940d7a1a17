"""Synthetic history for a real Prometheus: the series the exporter would have written for a
fleet over days or weeks, as OpenMetrics text that `promtool tsdb create-blocks-from
openmetrics` turns into storage blocks.

Each GPU is whole (no MIG) and held by one pod after another; utilisation and power are
constant per tenancy, so the expected figures follow from the tenancies alone. An energy
counter may be reset at a chosen sample (a driver reload), right after it was scraped.

Backfilled series carry no staleness markers: start the Prometheus reading them with
`--query.lookback-delta` near the sample interval, or a series that ended would still be
seen for the default five minutes.
"""

from __future__ import annotations

import random
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from tests.support.requirements import require_tool

MODEL = "NVIDIA H100 80GB HBM3"
IDLE_POWER_W = 70.0
LOAD_POWER_W = 630.0


@dataclass(frozen=True, slots=True)
class Gpu:
    node: str
    index: int

    @property
    def uuid(self) -> str:
        return f"GPU-{abs(hash((self.node, self.index))) % 10**12:012d}-synthetic"

    def labels(self) -> str:
        return (f'gpu="{self.index}",UUID="{self.uuid}",device="nvidia{self.index}",'
                f'modelName="{MODEL}",Hostname="{self.node}"')


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


@dataclass(frozen=True, slots=True)
class History:
    start: float
    end: float
    interval_s: float
    gpus: tuple[Gpu, ...]
    tenancies: tuple[Tenancy, ...]
    resets: frozenset[tuple[str, float]] = frozenset()
    """(GPU UUID, sample time) after whose scrape the GPU's energy counter restarts at 0."""

    def times(self) -> Iterator[float]:
        t = self.start
        while t <= self.end:
            yield t
            t += self.interval_s


def fleet(nodes: int, gpus_per_node: int, start: float, end: float, interval_s: float,
          mean_tenancy_s: float, namespaces: int, seed: int = 0) -> History:
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
    return History(start, end, interval_s, gpus, tuple(tenancies))


def _holder(gpu: Gpu, t: float, index: dict[str, list[Tenancy]]) -> Tenancy | None:
    for tenancy in index[gpu.uuid]:
        if tenancy.start <= t < tenancy.end:
            return tenancy
    return None


def write_openmetrics(history: History, out: TextIO, with_rules: bool = False) -> int:
    """The history as OpenMetrics text; returns the number of samples. `with_rules`: also
    the usage recording rules' series, as a ruler would have recorded them."""
    index: dict[str, list[Tenancy]] = {g.uuid: [] for g in history.gpus}
    for tenancy in history.tenancies:
        index[tenancy.gpu.uuid].append(tenancy)
    samples = 0
    families = (("DCGM_FI_DEV_FB_USED", "gauge"), ("DCGM_FI_DEV_GPU_UTIL", "gauge"),
                ("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "unknown"))
    for name, kind in families:
        out.write(f"# TYPE {name} {kind}\n")
        for gpu in history.gpus:
            energy_mj = 1e9  # the counter has run since the driver loaded
            lines: dict[str, list[str]] = {}
            for t in history.times():
                holder = _holder(gpu, t, index)
                pod = (f',namespace="{holder.namespace}",pod="{holder.pod}",container="main"'
                       if holder else "")
                if name == "DCGM_FI_DEV_FB_USED":
                    value = 40000.0 * holder.utilisation + 1000 if holder else 0.0
                elif name == "DCGM_FI_DEV_GPU_UTIL":
                    value = round(100 * holder.utilisation) if holder else 0.0
                else:
                    value = energy_mj
                    power = holder.power_w if holder else IDLE_POWER_W
                    energy_mj = (0.0 if (gpu.uuid, t) in history.resets else energy_mj) + \
                        power * history.interval_s * 1000
                lines.setdefault(pod, []).append(
                    f"{name}{{{gpu.labels()}{pod}}} {value:.0f} {t:.3f}\n")
            for series in lines.values():
                out.writelines(series)
                samples += len(series)
    if with_rules:
        samples += _write_rule_series(history, out)
    out.write("# EOF\n")
    return samples


def _write_rule_series(history: History, out: TextIO, window_s: float = 3600.0) -> int:
    """What the usage recording rules would have recorded: each pod's figures per hour,
    computed from its tenancy (held the whole time it is scheduled)."""
    ends = [t for t in history.times() if t % window_s == 0 and t - window_s >= history.start]
    figures: dict[str, Callable[[Tenancy, float], float]] = {
        "pod:gpu_usage_allocated_gpu_hours:window": lambda _t, h: h,
        "pod:gpu_usage_active_gpu_hours:window": lambda t, h: h * t.utilisation,
        "pod:gpu_usage_activity:max_window": lambda t, _h: t.utilisation,
        "pod:gpu_usage_energy_kwh:window": lambda t, h: h * t.power_w / 1000,
        "pod:gpu_usage_framebuffer_mib_hours:window":
            lambda t, h: h * (40000.0 * t.utilisation + 1000),
        "pod:gpu_usage_held_hours:window": lambda _t, h: h,
        "pod:gpu_usage_framebuffer_mib:max_window":
            lambda t, _h: 40000.0 * t.utilisation + 1000,
    }
    samples = 0
    for name, value in figures.items():
        out.write(f"# TYPE {name} gauge\n")
        for tenancy in history.tenancies:
            extra = ',activity_source="utilisation"' if "active_gpu" in name else ""
            labels = (f'namespace="{tenancy.namespace}",pod="{tenancy.pod}",'
                      f'modelName="{MODEL}",Hostname="{tenancy.gpu.node}"{extra}')
            for end in ends:
                held_h = max(0.0, min(end, tenancy.end) - max(end - window_s,
                                                               tenancy.start)) / 3600
                if held_h > 0:
                    out.write(f"{name}{{{labels}}} {value(tenancy, held_h)!r} {end:.3f}\n")
                    samples += 1
    out.write("# TYPE gpu_usage:rules_window_seconds gauge\n")
    out.writelines(f"gpu_usage:rules_window_seconds {window_s:g} {end:.3f}\n"
                   for end in ends)
    return samples + len(ends)


def backfill(history: History, folder: Path, with_rules: bool = False) -> Path:
    """Storage blocks holding `history` (and with `with_rules` its recording rules' series),
    under `folder/tsdb`."""
    promtool = require_tool("promtool", "prometheus")
    folder.mkdir(parents=True, exist_ok=True)
    source = folder / "history.om"
    with source.open("w") as out:
        write_openmetrics(history, out, with_rules)
    tsdb = folder / "tsdb"
    # One pass over the file per block: the default 2 h blocks would mean a pass per 2 h of
    # history, so blocks may span the whole history (Prometheus compacts them anyway).
    span_h = max(2, int((history.end - history.start) // 3600) + 1)
    result = subprocess.run([promtool, "tsdb", "create-blocks-from", "openmetrics",
                             f"--max-block-duration={span_h}h", str(source), str(tsdb)],
                            capture_output=True, text=True, timeout=900)
    if result.returncode != 0:
        raise AssertionError(f"promtool backfill failed:\n{result.stdout}{result.stderr}")
    source.unlink()
    return tsdb


def expected_hours(history: History, start: float, end: float) -> dict[str, float]:
    """Allocated GPU-hours per namespace between `start` and `end`."""
    totals: dict[str, float] = {}
    for t in history.tenancies:
        held = max(0.0, min(end, t.end) - max(start, t.start))
        totals[t.namespace] = totals.get(t.namespace, 0.0) + held / 3600
    return {ns: h for ns, h in totals.items() if h > 0}

"""Cardinality and storage cost: series per GPU, per MIG instance and per NVLink GPU with each
collectors file, what dcgm-exporter serves for the same files, bytes per sample in
Prometheus's TSDB for a day of one simulated node, and what a 10,000-GPU fleet costs.

Usage: .venv/bin/python benchmarks/bench_cardinality.py [--interval 15s] [--profile h200-mig]
Needs Debian's `prometheus` (promtool). Prints tables; nothing is asserted.

Series are counted on real `/metrics` bodies: the exporter process on the simulated nodes
(`h100-8`: whole H100 SXM GPUs with NVLink; `l4-1`: a PCIe L4; `h200-mig`: two GPUs in MIG
mode, six whole), once with each collectors file, after the profiling fields' second poll.

dcgm-exporter's figures for the same files are derived, not run (it needs DCGM and real
GPUs): with its default `--devices f` it watches a GPU whose MIG mode is on through its GPU
instances only (internal/pkg/devicemonitoring, `monitorAllGPUInstances`), and DCGM answers
a GPU-level field asked of a GPU instance with the GPU's value (issue #317 shows
`DCGM_FI_DEV_MEMORY_TEMP` once per `GPU_I_ID`, #50 the clocks identical on every instance).
So each GPU instance carries the GPU-level series of its GPU plus its own, and the GPU none;
a GPU without MIG carries what ours does (the same NVML values, minus our own
`gpu_exporter_*` series). dcgm-exporter serves no per-node series of its own.

The day of storage: the simulated node polled every `--interval` for 24 simulated hours
(the simulator and the backend on a stepped clock: the values move as they would over a
day), each poll's exposition as one scrape, written as OpenMetrics and backfilled with
`promtool tsdb create-blocks-from openmetrics`, once as one 24 h block (what compaction
leaves) and once as 2 h blocks (what Prometheus cuts before compacting).
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from array import array
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_serve import free_port, wait_for  # noqa: E402

from exporter.durations import parse_duration  # noqa: E402
from exporter.fields.csv import default_collectors_path, load_collectors  # noqa: E402

DCGM_CSVS = ROOT / "exporter" / "fields" / "dcgm-exporter"
UPSTREAM_CSVS = ROOT / "tests" / "fixtures" / "dcgm-exporter"
"""dcgm-exporter's own files, byte for byte: the copies we ship must enable the same fields."""
CSVS = {
    "ours (default)": default_collectors_path(),
    "dcgm-exporter default-counters.csv": DCGM_CSVS / "default-counters.csv",
    "dcgm-exporter dcp-metrics-included.csv": DCGM_CSVS / "dcp-metrics-included.csv",
}
FLEET_GPUS = 10_000
GPUS_PER_NODE = 8
MIG_INSTANCES_PER_GPU = 7
"""The fleet's MIG case: every GPU cut into seven 1g instances (the most instances a GPU
takes)."""
DAY_S = 86_400


# -- counting series on real bodies ----------------------------------------------------------

@dataclass
class Census:
    """One body's series, by what they belong to."""

    per_gpu: Counter[str] = field(default_factory=Counter)
    """gpu index -> series of the GPU itself (no GPU_I_ID), ours and DCGM's."""
    nvlink_per_gpu: Counter[str] = field(default_factory=Counter)
    """Series of NVLink fields (what a GPU without NVLink does not have)."""
    per_instance: Counter[tuple[str, str]] = field(default_factory=Counter)
    """(gpu, GPU_I_ID) -> series of the GPU instance."""
    dcgm_families: dict[tuple[str, str | None], Counter[str]] = field(default_factory=dict)
    """(gpu, GPU_I_ID or None) -> DCGM family -> series."""
    per_node: int = 0

    def dcgm_series(self, gpu: str, instance: str | None = None) -> int:
        return sum(self.dcgm_families.get((gpu, instance), Counter()).values())


def census(body: str) -> Census:
    counted = Census()
    for family in text_string_to_metric_families(body):
        for sample in family.samples:
            gpu = sample.labels.get("gpu")
            instance = sample.labels.get("GPU_I_ID")
            if gpu is None:
                counted.per_node += 1
                continue
            if instance is not None:
                counted.per_instance[gpu, instance] += 1
            else:
                counted.per_gpu[gpu] += 1
            if sample.name.startswith("DCGM_"):
                counted.dcgm_families.setdefault((gpu, instance), Counter())[sample.name] += 1
                if "NVLINK" in sample.name and instance is None:
                    counted.nvlink_per_gpu[gpu] += 1
    return counted


def dcgm_instance_series(counted: Census, gpu: str, instance: str) -> int:
    """Return what dcgm-exporter serves for a GPU instance: its own DCGM series and its GPU's, a
    field on both (the XID code) once."""
    own = counted.dcgm_families.get((gpu, instance), Counter())
    parent = counted.dcgm_families.get((gpu, None), Counter())
    return sum(max(own[name], parent[name]) for name in own.keys() | parent.keys())


def scrape_settled(profile: str, csv: Path) -> str:
    """Return the body of the exporter serving `profile` with `csv`, once its series stop
    changing."""
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "exporter", "serve", "--backend", "sim", "--sim.profile",
         profile, "-c", "300ms", "-f", str(csv), "-a", f"127.0.0.1:{port}",
         "--log-level", "error"], cwd=ROOT)
    try:
        url = f"http://127.0.0.1:{port}/metrics"
        wait_for(f"http://127.0.0.1:{port}/ready")
        last = ""
        for _ in range(50):
            with urllib.request.urlopen(url) as response:
                body: str = response.read().decode()
            if last and body.count("\n") == last.count("\n"):
                return body
            last = body
            time.sleep(0.5)
        raise SystemExit(f"{profile} with {csv.name}: the body kept changing")
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(10)


@dataclass(frozen=True)
class Row:
    csv: str
    whole_gpu: float
    nvlink: float
    pcie_gpu: float
    mig_parent: float
    mig_instance: float
    per_node: int
    dcgm_whole_gpu: float
    dcgm_pcie_gpu: float
    dcgm_mig_instance: float


def _mean(values: Iterable[int]) -> float:
    listed = list(values)
    return sum(listed) / len(listed) if listed else 0.0


def measure_series(csv_name: str, csv: Path) -> Row:
    h100 = census(scrape_settled("h100-8", csv))
    l4 = census(scrape_settled("l4-1", csv))
    mig = census(scrape_settled("h200-mig", csv))
    parents = sorted({gpu for gpu, _ in mig.per_instance})
    # dcgm-exporter: each GPU instance also carries its GPU's DCGM series; the GPU none.
    dcgm_instance = _mean([dcgm_instance_series(mig, gpu, instance)
                           for gpu, instance in mig.per_instance])
    return Row(
        csv=csv_name,
        whole_gpu=_mean(h100.per_gpu.values()),
        nvlink=_mean(h100.nvlink_per_gpu.values()),
        pcie_gpu=_mean(l4.per_gpu.values()),
        mig_parent=_mean([mig.per_gpu[g] for g in parents]),
        mig_instance=_mean(mig.per_instance.values()),
        per_node=h100.per_node,
        dcgm_whole_gpu=_mean([h100.dcgm_series(g) for g in h100.per_gpu]),
        dcgm_pcie_gpu=_mean([l4.dcgm_series(g) for g in l4.per_gpu]),
        dcgm_mig_instance=dcgm_instance,
    )


def merged(rows: list[Row]) -> list[Row]:
    """Return the files that give the same figures in one row (both of dcgm-exporter's enable the
    same fields today)."""
    out: list[Row] = []
    for row in rows:
        same = next((i for i, r in enumerate(out)
                     if dataclasses.replace(r, csv="") == dataclasses.replace(row, csv="")),
                    None)
        if same is None:
            out.append(row)
        else:
            out[same] = dataclasses.replace(out[same], csv=f"{out[same].csv} = {row.csv}")
    return out


def check_copies() -> None:
    """Check that the shipped dcgm-exporter files enable what upstream's do, in the same types."""
    for name in ("default-counters.csv", "dcp-metrics-included.csv"):
        ours = load_collectors(DCGM_CSVS / name)
        theirs = load_collectors(UPSTREAM_CSVS / name)
        pairs = [(f.spec.name, f.type) for f in ours.fields]
        if pairs != [(f.spec.name, f.type) for f in theirs.fields]:
            raise SystemExit(f"{DCGM_CSVS / name} no longer enables what upstream's does")


# -- a day in the TSDB -----------------------------------------------------------------------

@dataclass
class Day:
    series: dict[str, array[float]]
    times: array[float]

    @property
    def samples(self) -> int:
        return sum(len(v) for v in self.series.values())


def simulate_day(profile: str, interval_s: float, start: float) -> Day:
    """Return every poll of one simulated day, as the sampler renders it (device families, the
    exporter's own, the endpoint's), keyed by series."""
    from exporter.devices.nvml import NvmlBackend
    from exporter.exposition.config import ExpositionSettings
    from exporter.exposition.publisher import Publisher
    from exporter.sampling.snapshot import HostLabel, Snapshot
    from exporter.sampling.stats import PollStats
    from exporter.simulated.node import SimNvml
    from exporter.web.server import WebServer

    now = [0.0]

    def clock() -> float:
        return now[0]

    def wall() -> float:
        return start + now[0]

    collectors = load_collectors(default_collectors_path())
    backend = NvmlBackend(SimNvml(profile, clock=clock), collectors.specs, clock=clock,
                          wall_clock=wall)
    backend.start()
    publish = WebServer().publishing(Publisher("sim", ExpositionSettings(openmetrics=False)))
    stats = PollStats(collect_interval_s=interval_s)
    day = Day({}, array("d"))
    steps = int(DAY_S // interval_s)
    for step in range(steps):
        now[0] = step * interval_s
        started = time.monotonic()
        readings = backend.poll()
        snapshot = Snapshot(backend.inventory, readings, collectors,
                            HostLabel("hostname", "node-0"), taken_at=wall())
        stats.last_success = snapshot.taken_at
        stats.last_duration_s = time.monotonic() - started
        stats.scrapes += 1
        body = publish(snapshot, stats, backend.families()).text.decode()
        day.times.append(wall())
        for line in body.splitlines():
            if not line or line.startswith("#"):
                continue
            key, _, value = line.rpartition(" ")
            day.series.setdefault(key, array("d", [math.nan] * step)).append(float(value))
        for values in day.series.values():  # a series that left: a gap, not a value
            if len(values) < step + 1:
                values.append(math.nan)
    backend.close()
    return day


def write_openmetrics(day: Day, path: Path) -> None:
    """Write one family per series name (typed unknown: the TSDB stores samples alike), each
    series' samples in time order, as promtool's backfill reads them."""
    by_name: dict[str, list[str]] = {}
    for key in day.series:
        by_name.setdefault(key.split("{", 1)[0], []).append(key)
    with path.open("w") as out:
        for name, keys in by_name.items():
            out.write(f"# TYPE {name} unknown\n")
            for key in keys:
                out.writelines(f"{key} {value!r} {at:.3f}\n"
                               for value, at in zip(day.series[key], day.times, strict=True)
                               if not math.isnan(value))
        out.write("# EOF\n")


@dataclass(frozen=True)
class Blocks:
    blocks: int
    chunks_bytes: int
    index_bytes: int
    total_bytes: int


def backfill(source: Path, folder: Path, block_hours: int) -> Blocks:
    promtool = shutil.which("promtool")
    if promtool is None:
        raise SystemExit("the storage figures need promtool: apt-get install prometheus")
    tsdb = folder / f"tsdb-{block_hours}h"
    subprocess.run([promtool, "tsdb", "create-blocks-from", "openmetrics",
                    f"--max-block-duration={block_hours}h", str(source), str(tsdb)],
                   check=True, capture_output=True, text=True)
    blocks = [d for d in tsdb.iterdir() if (d / "meta.json").exists()]
    chunks = sum(f.stat().st_size for b in blocks for f in (b / "chunks").iterdir())
    index = sum((b / "index").stat().st_size for b in blocks)
    total = sum(f.stat().st_size for b in blocks for f in b.rglob("*") if f.is_file())
    return Blocks(len(blocks), chunks, index, total)


# -- the report ------------------------------------------------------------------------------

def _n(value: float) -> str:
    return f"{value:,.0f}" if value >= 100 else f"{value:g}"


def _size(n_bytes: float) -> str:
    for unit, scale in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n_bytes >= scale:
            return f"{n_bytes / scale:,.1f} {unit}"
    return f"{n_bytes:.0f} B"


def report_series(rows: list[Row]) -> None:
    print("| collectors file | whole GPU (H100 SXM) | of which NVLink | PCIe GPU (L4) "
          "| MIG-enabled GPU itself | per MIG GPU instance | per node "
          "| dcgm-exporter: whole GPU | dcgm-exporter: PCIe GPU "
          "| dcgm-exporter: MIG-enabled GPU itself | dcgm-exporter: per MIG GPU instance |")
    print("|---" * 11 + "|")
    for r in rows:
        print(f"| {r.csv} | {_n(r.whole_gpu)} | {_n(r.nvlink)} | {_n(r.pcie_gpu)} "
              f"| {_n(r.mig_parent)} | {_n(r.mig_instance)} | {r.per_node} "
              f"| {_n(r.dcgm_whole_gpu)} | {_n(r.dcgm_pcie_gpu)} | 0 "
              f"| {_n(r.dcgm_mig_instance)} |")


def fleet(row: Row, dcgm: bool, mig: bool) -> float:
    """Return the active series of FLEET_GPUS H100/H200-class GPUs on 8-GPU nodes."""
    if dcgm:
        per_gpu = row.dcgm_mig_instance * MIG_INSTANCES_PER_GPU if mig else row.dcgm_whole_gpu
        return per_gpu * FLEET_GPUS
    per_gpu = (row.mig_parent + row.mig_instance * MIG_INSTANCES_PER_GPU if mig
               else row.whole_gpu)
    return per_gpu * FLEET_GPUS + row.per_node * FLEET_GPUS / GPUS_PER_NODE


def report_fleet(rows: list[Row], interval_s: float, bytes_per_sample: float,
                 index_per_series_day: float) -> None:
    print(f"| {FLEET_GPUS:,} GPUs ({FLEET_GPUS // GPUS_PER_NODE:,} nodes), scraped every "
          f"{interval_s:g} s | active series | samples/s | TSDB per day |")
    print("|---|---|---|---|")
    per_day = DAY_S / interval_s
    for row in rows:
        for dcgm in (False, True):
            for mig in (False, True):
                if dcgm and row.csv.startswith("ours"):
                    continue
                series = fleet(row, dcgm, mig)
                store = series * (per_day * bytes_per_sample + index_per_series_day)
                who = ("dcgm-exporter" if dcgm else "gpu-exporter") + f", {row.csv}"
                shape = f"every GPU as {MIG_INSTANCES_PER_GPU} MIG instances" if mig \
                    else "whole GPUs"
                print(f"| {who}, {shape} | {_n(series)} | {_n(series / interval_s)} "
                      f"| {_size(store)} |")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--interval", default="15s",
                        help="scrape interval of the day and of the fleet figures "
                             "(the GPU Operator's ServiceMonitor default: 15s)")
    parser.add_argument("--profile", default="h200-mig", help="the node of the stored day")
    parser.add_argument("--skip-day", action="store_true", help="series counts only")
    args = parser.parse_args()
    interval_s = parse_duration(args.interval)
    check_copies()
    rows = merged([measure_series(name, path) for name, path in CSVS.items()])
    print("Series per entity (counted on /metrics bodies of the simulated nodes; "
          "dcgm-exporter's derived as the module docstring says):\n")
    report_series(rows)
    if args.skip_day:
        return 0
    folder = Path(tempfile.mkdtemp(prefix="bench-cardinality-"))
    try:
        # A day aligned on UTC midnights, so the 24 h backfill is one block; 3 days back,
        # well inside any retention a later look at it would use.
        start = (time.time() // DAY_S - 3) * DAY_S
        began = time.monotonic()
        day = simulate_day(args.profile, interval_s, start)
        simulated_s = time.monotonic() - began
        source = folder / "day.om"
        write_openmetrics(day, source)
        compacted = backfill(source, folder, 24)
        two_hour = backfill(source, folder, 2)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    samples = day.samples
    print(f"\nA day of {args.profile} ({len(day.series)} series, one poll every "
          f"{args.interval}, {len(day.times)} polls, {samples:,} samples; simulated in "
          f"{simulated_s:.0f} s):\n")
    print("| blocks | chunks | index | total on disk | bytes per sample (chunks) "
          "| bytes per sample (all) |")
    print("|---|---|---|---|---|---|")
    for label, b in (("one 24 h block (compacted)", compacted),
                     (f"{two_hour.blocks} x 2 h blocks (before compaction)", two_hour)):
        print(f"| {label} | {_size(b.chunks_bytes)} | {_size(b.index_bytes)} "
              f"| {_size(b.total_bytes)} | {b.chunks_bytes / samples:.2f} "
              f"| {b.total_bytes / samples:.2f} |")
    bytes_per_sample = compacted.chunks_bytes / samples
    index_per_series_day = compacted.index_bytes / len(day.series)
    print(f"\nFleet (bytes per sample {bytes_per_sample:.2f} from the compacted day, plus "
          f"{index_per_series_day:.0f} B of index per series and day):\n")
    report_fleet(rows, interval_s, bytes_per_sample, index_per_series_day)
    return 0


if __name__ == "__main__":
    sys.exit(main())

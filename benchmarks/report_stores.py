"""The stores `bench_report.py` measures: a synthetic fleet's history loaded into a real
Prometheus (blocks backfilled with `promtool tsdb create-blocks-from openmetrics`) and into a
real VictoriaMetrics (`/api/v1/import`), the same samples in both; and the timing of the
report and of the rules' expressions against them.

What is stored: the usage rules' series over the whole range (per pod and hour, then per
namespace and idle time one hour later: `tests/report/history.py`, computed from the
tenancies as the rules compute them), and the exporter's own series (framebuffer,
utilisation, graphics-engine activity, energy) at the scrape interval over the last part of
the range, which the ruler reads; optionally the exporter's series over the whole range at a
coarser interval too.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.report.history import (  # noqa: E402
    History,
    Series,
    backfill_file,
    families,
    raw_series,
    rule_series,
    write_openmetrics,
    write_vm_json,
)
from tests.support.prometheus import PrometheusProcess, QueryApi  # noqa: E402
from tests.support.victoriametrics import VictoriaMetricsProcess  # noqa: E402
from tests.support.wait import wait_until  # noqa: E402

BLOCK_H = 240
"""Backfilled blocks of 10 days: promtool reads the file once per block, and holds one
block's series in memory."""


@dataclass(frozen=True, slots=True)
class Layout:
    """What a store holds of a fleet's history."""

    history: History
    """The whole range; its interval is the exporter's scrape interval."""
    raw_from: float
    """The exporter's series are stored at the scrape interval from here on."""
    coarse_interval_s: float | None = None
    """If set: the exporter's series before `raw_from` too, at this interval."""

    def series(self) -> Iterator[Series]:
        """Yield the series family by family: a family's coarse series, then its series at the
        scrape interval (a series' samples in time order), then the rules' series."""
        recent = replace(self.history, start=self.raw_from)
        if self.coarse_interval_s is None:
            yield from raw_series(recent)
        else:
            early = replace(self.history, end=self.raw_from - self.coarse_interval_s,
                            interval_s=self.coarse_interval_s)
            for name in families(recent):
                yield from raw_series(early, only=name)
                yield from raw_series(recent, only=name)
        yield from rule_series(self.history)


def load_prometheus(layout: Layout, folder: Path, lookback_s: float) -> PrometheusProcess:
    """Return a Prometheus on blocks holding `layout`. It never compacts them (blocks larger than
    its largest range are left alone), so no compaction runs while it is measured."""
    folder.mkdir(parents=True, exist_ok=True)
    source = folder / "history.om"
    with source.open("w") as out:
        samples = write_openmetrics(layout.series(), out)
        out.write("# EOF\n")
    backfill_file(source, folder / "tsdb", BLOCK_H)
    source.unlink()
    prometheus = PrometheusProcess(
        folder / "prometheus", {"global": {}}, tsdb=folder / "tsdb",
        args=(f"--query.lookback-delta={int(lookback_s)}s", "--query.timeout=10m",
              "--query.max-samples=500000000", "--storage.tsdb.retention.time=10y",
              "--storage.tsdb.min-block-duration=2h", "--storage.tsdb.max-block-duration=2h"),
    ).wait_ready(timeout=600.0)
    wait_until(lambda: prometheus.query("count(gpu_usage:rules_window_seconds)",
                                        layout.history.end), 600.0, 1.0, what="blocks loaded")
    print(f"  Prometheus: {samples / 1e6:.1f} M samples backfilled", file=sys.stderr)
    return prometheus


def load_victoria(layout: Layout, folder: Path) -> VictoriaMetricsProcess:
    """Return a VictoriaMetrics holding `layout`, imported as JSON lines."""
    victoria = VictoriaMetricsProcess(folder / "victoria-metrics").wait_ready()
    folder.mkdir(parents=True, exist_ok=True)
    source = folder / "history.jsonl"
    with source.open("w") as out:
        samples = write_vm_json(layout.series(), out)
    with source.open("rb") as body:
        request = urllib.request.Request(
            f"{victoria.url}/api/v1/import", data=body, method="POST",
            headers={"Content-Length": str(source.stat().st_size)})
        with urllib.request.urlopen(request, timeout=3600) as answer:
            answer.read()
    source.unlink()
    with urllib.request.urlopen(f"{victoria.url}/internal/force_flush", timeout=600) as answer:
        answer.read()
    wait_until(lambda: victoria.query("count(gpu_usage:rules_window_seconds)",
                                      layout.history.end), 600.0, 1.0, what="samples imported")
    print(f"  VictoriaMetrics: {samples / 1e6:.1f} M samples imported", file=sys.stderr)
    return victoria


@dataclass
class Run:
    wall_s: float
    rss_mib: float
    document: dict[str, Any]
    load: float
    """The machine's 1-minute load average when it ended."""


# The report's own peak. wait4's ru_maxrss would not do: Linux carries the parent's
# high-water mark across fork and exec into the child's, and this process holds the whole
# synthetic history. VmHWM belongs to the address space exec made, the report's alone.
_MEASURED_REPORT = """
import atexit, os, runpy, sys
def _peak():
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            os.write(int(os.environ["BENCH_PEAK_FD"]), line.split()[1].encode())
atexit.register(_peak)
sys.argv[0] = "gpu-exporter"
runpy.run_module("exporter", run_name="__main__", alter_sys=True)
"""


def report(url: str, start: float, end: float, *args: str) -> Run:
    """Run `gpu-exporter report` as a user runs it; return its JSON, wall time and peak RSS
    (VmHWM)."""
    begin = time.monotonic()
    read_fd, write_fd = os.pipe()
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(
            [sys.executable, "-c", _MEASURED_REPORT, "report", "--prometheus", url,
             "--start", f"{start}", "--end", f"{end}", "--timeout", "10m", "--format", "json",
             "--progress", "off", *args], cwd=ROOT, stdout=out, stderr=err, text=True,
            pass_fds=(write_fd,), env={**os.environ, "BENCH_PEAK_FD": str(write_fd)})
        os.close(write_fd)
        code = proc.wait()
        wall = time.monotonic() - begin
        with os.fdopen(read_fd, "rb") as peak:
            peak_kib = peak.read()
        out.seek(0)
        err.seek(0)
        if code != 0 or not peak_kib:
            raise SystemExit(f"report failed ({url} {' '.join(args)}):\n{err.read()}")
        document: dict[str, Any] = json.load(out)
    return Run(wall, int(peak_kib) / 1024, document, os.getloadavg()[0])


def best(runs: list[Run]) -> Run:
    """Return the quickest of repeated runs: what the work costs, less other jobs' interference."""
    return min(runs, key=lambda r: r.wall_s)


def evaluation_s(server: QueryApi, exprs: Iterable[str], at: float, repeat: int = 2) -> float:
    """Return the seconds the server takes to evaluate every expression once at `at` (for each, the
    best of `repeat` passes), each wrapped in `count()` so the answer is one number: what a ruler
    spends on them, without encoding thousands of series as JSON. The passes go over the whole list
    in turn, so that a pause of the machine's lands on one pass of several expressions, not on every
    pass of one."""
    exprs = list(exprs)
    best = [float("inf")] * len(exprs)
    for _ in range(repeat):
        for i, expr in enumerate(exprs):
            begin = time.monotonic()
            server.query(f"count(\n{expr}\n)", at)
            best[i] = min(best[i], time.monotonic() - begin)
    return sum(best)

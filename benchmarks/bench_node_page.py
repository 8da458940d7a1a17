"""Node page benchmark: what `/` costs on the simulated 8-GPU MIG node, and what serving it
does to scrapes.

Usage: .venv/bin/python benchmarks/bench_node_page.py [--duration 10] [--rounds 3]
Needs Debian's `wrk`. Prints two tables; nothing is asserted.

1. In-process, over the real backend on the simulated `h200-mig` node with the simulated
   kubelet's allocations attributed (8 GPUs, 11 MIG instances, every holder): the page's
   size, and the time of each step next to the exposition render of the same poll (the
   reference): recording a poll (what every poll now pays), the first request after a poll
   (the view and the HTML, or the JSON, built once), and every later request of that poll.
2. Against the exporter process (`--sim.kubelet`, `-c 1s`): 32-client scrape throughput on
   `/metrics` (wrk, one thread), alone and while a page client loads `/` as a browser does
   (every second, and a heavier 10 per second), in alternating rounds so that the spread
   between the rounds without the page is the noise to read the others against.
"""

from __future__ import annotations

import argparse
import gzip
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_serve import ROOT, free_port, run_wrk, wait_for


def _median_s(action: object, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        action()  # type: ignore[operator]
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def in_process(repeat: int) -> dict[str, float]:
    """Return the sizes (bytes) and median seconds of each step, on one real poll."""
    from exporter.devices.nvml import NvmlBackend
    from exporter.exposition.publisher import Publisher
    from exporter.fields.csv import default_collectors_path, load_collectors
    from exporter.k8s.attribution import DeviceResolver, attribute
    from exporter.k8s.kubelet_client import allocations_of
    from exporter.nodepage.page import NodePage
    from exporter.sampling.snapshot import HostLabel, Snapshot
    from exporter.sampling.stats import PollStats
    from exporter.selfmetrics import KUBELET_UP, POD_GPU_ALLOCATION
    from exporter.series import Sample
    from exporter.simulated.kubelet import plan_allocations
    from exporter.simulated.node import SimNvml

    collectors = load_collectors(default_collectors_path())
    backend = NvmlBackend(SimNvml("h200-mig"), collectors.specs)
    backend.start()
    backend.poll()
    time.sleep(0.11)  # GPM answers from the second poll on
    readings = backend.poll()
    inventory = backend.inventory
    result = attribute(allocations_of(plan_allocations(inventory)), inventory,
                       DeviceResolver())
    snapshot = Snapshot(inventory, readings, collectors, HostLabel("hostname", "bench"),
                        result.attribution, time.time())
    families = [*backend.families(), KUBELET_UP.single(1.0), POD_GPU_ALLOCATION.family(
        Sample(labels, 1.0) for labels in result.allocation_rows)]
    stats = PollStats(collect_interval_s=15.0)
    publish = Publisher("sim")
    backend.close()

    page = NodePage()
    page.backend = "sim"
    ready = (True, "ok")
    exposition = _median_s(lambda: publish(snapshot, stats, families), repeat)
    record = _median_s(lambda: page.record(snapshot, stats, families), repeat)

    def first_request() -> None:
        page.record(snapshot, stats, families)
        page.html(ready)

    def first_json_request() -> None:
        page.record(snapshot, stats, families)
        page.json(ready)
    first = _median_s(first_request, repeat) - record
    first_json = _median_s(first_json_request, repeat) - record
    later = _median_s(lambda: page.html(ready), repeat * 10)
    json_later = _median_s(lambda: page.json(ready), repeat * 10)
    html = (page.html(ready).text or "").encode()
    body = page.json(ready).text or ""
    return {"exposition": exposition, "record": record, "first": first,
            "first_json": first_json, "later": later,
            "json_later": json_later, "html_bytes": len(html),
            "html_gzip_bytes": len(gzip.compress(html, 6)), "json_bytes": len(body.encode()),
            "gpus": len(inventory.gpus), "instances": len(inventory.instances)}


class PageClient:
    """Loads `/` every `period_s` in a thread, as a browser tab reloading does."""

    def __init__(self, url: str, period_s: float) -> None:
        self.url, self.period_s = url, period_s
        self.loads = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            started = time.monotonic()
            with urllib.request.urlopen(self.url, timeout=10) as answer:
                answer.read()
            self.loads += 1
            self._stop.wait(max(0.0, self.period_s - (time.monotonic() - started)))

    def __enter__(self) -> PageClient:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._thread.join(15)


def under_load(duration: int, rounds: int) -> dict[str, list[float]]:
    port = free_port()
    folder = Path(tempfile.mkdtemp(prefix="bench-node-page-"))
    exporter = subprocess.Popen(
        [sys.executable, "-m", "exporter", "serve", "--backend", "sim", "--sim.profile",
         "h200-mig", "--sim.kubelet", "-c", "1s", "--log-level", "warning",
         "-a", f"127.0.0.1:{port}"], cwd=ROOT)
    base = f"http://127.0.0.1:{port}"
    results: dict[str, list[float]] = {"no page": [], "page every 1 s": [],
                                       "page 10 per s": []}
    try:
        wait_for(base + "/ready")
        run_wrk(base + "/metrics", 4, 2)  # warm-up
        for _ in range(rounds):
            for name, period in (("no page", None), ("page every 1 s", 1.0),
                                 ("page 10 per s", 0.1)):
                if period is None:
                    results[name].append(run_wrk(base + "/metrics", 32, duration)[2])
                    continue
                with PageClient(base + "/", period):
                    results[name].append(run_wrk(base + "/metrics", 32, duration)[2])
    finally:
        exporter.send_signal(signal.SIGTERM)
        exporter.wait(10)
        shutil.rmtree(folder, ignore_errors=True)
    return results


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--duration", type=int, default=10, help="seconds per wrk run")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--repeat", type=int, default=200, help="in-process repetitions")
    args = parser.parse_args()
    if shutil.which("wrk") is None:
        raise SystemExit("benchmarks need wrk: apt-get install wrk")

    cost = in_process(args.repeat)
    ref = cost["exposition"]
    print(f"simulated h200-mig: {cost['gpus']:.0f} GPUs, {cost['instances']:.0f} MIG "
          f"instances, every holder attributed; {os.cpu_count()} CPUs")
    print(f"page {cost['html_bytes'] / 1024:.1f} KiB ({cost['html_gzip_bytes'] / 1024:.1f} "
          f"KiB gzipped), /api/node {cost['json_bytes'] / 1024:.1f} KiB")
    print()
    print("| step | median | x exposition render of the same poll |")
    print("|---|---|---|")
    for label, key in (("exposition render (reference)", "exposition"),
                       ("record a poll (every poll)", "record"),
                       ("first page request after a poll: view + HTML", "first"),
                       ("first /api/node request after a poll: view + JSON", "first_json"),
                       ("later page request, same poll", "later"),
                       ("later /api/node request, same poll", "json_later")):
        print(f"| {label} | {cost[key] * 1e3:.3f} ms | {cost[key] / ref:.3f} |")

    loads = under_load(args.duration, args.rounds)
    quiet = loads["no page"]
    spread = (max(quiet) - min(quiet)) / statistics.median(quiet)
    print()
    print(f"32-client scrapes/s on /metrics, {args.rounds} alternating rounds of "
          f"{args.duration}s (wrk, one thread; exporter -c 1s, --sim.kubelet)")
    print()
    print("| page load | scrapes/s per round | median | x no page |")
    print("|---|---|---|---|")
    for name, runs in loads.items():
        median = statistics.median(runs)
        print(f"| {name} | {', '.join(f'{r:.0f}' for r in runs)} | {median:.0f} | "
              f"{median / statistics.median(quiet):.3f} |")
    print(f"\nspread of the rounds without the page (noise): {spread * 100:.1f} %")
    return 0


if __name__ == "__main__":
    sys.exit(main())

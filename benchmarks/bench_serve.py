"""Serve-path benchmark: the exporter on the simulated h200-mig node vs a bare aiohttp handler.

Usage: .venv/bin/python benchmarks/bench_serve.py [--duration 5] [--profile h200-mig]
Needs Debian's `wrk` (apt-get install wrk). Prints one table; nothing is asserted.

Measured, in one run:
- poll time per cycle: the real backend + exposition over the simulated node, in-process;
- scrape latency p50/p99 and scrapes/s with 1 and 32 concurrent connections (wrk, one
  thread), against the exporter process and against a bare aiohttp app serving the same
  bytes from memory with the same settings — the ceiling of this stack on this machine;
- resident memory of the exporter process after the load.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

BARE_APP = """
import sys
from aiohttp import web
body = open(sys.argv[1], "rb").read()
async def metrics(_request):
    return web.Response(body=body, headers={"Content-Type": "text/plain; version=0.0.4"})
app = web.Application()
app.router.add_get("/metrics", metrics)
web.run_app(app, host="127.0.0.1", port=int(sys.argv[2]), access_log=None, print=None)
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for(url: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=1) as response:
                if response.status == 200:
                    return
        except OSError:
            time.sleep(0.1)
    raise SystemExit(f"{url} did not answer within {timeout}s")


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


_UNIT = {"us": 1e-3, "ms": 1.0, "s": 1e3}


def _ms(text: str) -> float:
    match = re.match(r"([\d.]+)(us|ms|s)", text)
    assert match, text
    return float(match.group(1)) * _UNIT[match.group(2)]


def run_wrk(url: str, connections: int, duration: int) -> tuple[float, float, float]:
    """(p50 ms, p99 ms, requests/s) from wrk --latency with one thread."""
    out = subprocess.run(
        ["wrk", "-t1", f"-c{connections}", f"-d{duration}s", "--latency", url],
        check=True, capture_output=True, text=True).stdout
    p50 = _ms(re.search(r"^\s+50%\s+(\S+)", out, re.M).group(1))  # type: ignore[union-attr]
    p99 = _ms(re.search(r"^\s+99%\s+(\S+)", out, re.M).group(1))  # type: ignore[union-attr]
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))  # type: ignore[union-attr]
    return p50, p99, rps


def poll_cost(profile: str, cycles: int) -> tuple[float, float]:
    """Median and p99 seconds of one poll + render over the simulated node."""
    from exporter.devices.nvml import NvmlBackend
    from exporter.devices.sim import SimNvml
    from exporter.exposition.selfmetrics import Publisher
    from exporter.fields.csv import default_collectors_path, load_collectors
    from exporter.sampling.snapshot import HostLabel, Snapshot
    from exporter.sampling.stats import PollStats

    collectors = load_collectors(default_collectors_path())
    backend = NvmlBackend(SimNvml(profile), collectors.specs)
    backend.start()
    publish = Publisher("sim")
    stats = PollStats(collect_interval_s=1.0)
    times = []
    for _ in range(cycles + 2):
        time.sleep(0.11)  # GPM needs samples at least 100 ms apart
        t0 = time.perf_counter()
        readings = backend.poll()
        snap = Snapshot(backend.inventory, readings, collectors, HostLabel("Hostname", "bench"))
        publish(snap, stats, backend.families())
        times.append(time.perf_counter() - t0)
    backend.close()
    times = sorted(times[2:])
    return statistics.median(times), times[int(len(times) * 0.99) - 1]


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--duration", type=int, default=5, help="seconds per wrk run")
    parser.add_argument("--profile", default="h200-mig")
    parser.add_argument("--cycles", type=int, default=50)
    args = parser.parse_args()
    if shutil.which("wrk") is None:
        raise SystemExit("benchmarks need wrk: apt-get install wrk")

    poll_p50, poll_p99 = poll_cost(args.profile, args.cycles)

    port, bare_port = free_port(), free_port()
    exporter = subprocess.Popen(
        [sys.executable, "-m", "exporter", "serve", "--backend", "sim", "--sim.profile",
         args.profile, "-a", f"127.0.0.1:{port}", "-c", "15s", "--log-level", "warning"],
        cwd=ROOT)
    bare = None
    try:
        wait_for(f"http://127.0.0.1:{port}/ready")
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics") as response:
            body = response.read()
        with tempfile.NamedTemporaryFile(suffix=".prom", delete=False) as f:
            f.write(body)
        bare = subprocess.Popen([sys.executable, "-c", BARE_APP, f.name, str(bare_port)])
        wait_for(f"http://127.0.0.1:{bare_port}/metrics")
        rows = []
        for name, url in (("gpu-exporter", f"http://127.0.0.1:{port}/metrics"),
                          ("bare aiohttp", f"http://127.0.0.1:{bare_port}/metrics")):
            run_wrk(url, 4, 2)  # warm-up: first-request paths, allocator, caches
            one = run_wrk(url, 1, args.duration)
            many = run_wrk(url, 32, args.duration)
            rows.append((name, one, many))
        rss = rss_mib(exporter.pid)
        os.unlink(f.name)
    finally:
        for proc in (exporter, bare):
            if proc is not None:
                proc.send_signal(signal.SIGTERM)
                proc.wait(10)

    lines = body.count(b"\n")
    print(f"profile {args.profile}, body {len(body)} bytes, {lines} lines, "
          f"wrk 1 thread, {args.duration}s per run, {os.cpu_count()} CPUs")
    print(f"poll + render per cycle: median {poll_p50 * 1e3:.2f} ms, "
          f"p99 {poll_p99 * 1e3:.2f} ms ({args.cycles} cycles)")
    print(f"exporter RSS after load: {rss:.1f} MiB")
    print()
    print("| server | 1 client p50 | 1 client p99 | 1 client scrapes/s "
          "| 32 clients p50 | 32 clients p99 | 32 clients scrapes/s |")
    print("|---|---|---|---|---|---|---|")
    for name, (p50, p99, rps), (p50m, p99m, rpsm) in rows:
        print(f"| {name} | {p50:.3f} ms | {p99:.3f} ms | {rps:.0f} | {p50m:.3f} ms | "
              f"{p99m:.3f} ms | {rpsm:.0f} |")
    ratio = rows[0][2][2] / rows[1][2][2]
    print(f"\n32-client throughput vs bare aiohttp: {ratio * 100:.0f} %")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Side by side: gpu-exporter and nvitop-exporter over the same simulated 8-GPU libnvidia-ml.

Usage: .venv/bin/python benchmarks/bench_peers.py [--idle 60] [--duration 10]
Needs Debian's `wrk`, a C compiler (the simulated library is built from tests/nvmlsim) and
PyPI access the first time (nvitop-exporter goes into its own virtual environment under
.cache/bench-peers/). Prints one table; nothing is asserted.

Both exporters run at once, each through the real pynvml over the same simulated
`libnvidia-ml.so.1` (8 H200s), both polling every second:
- CPU while idle-polling: nanoseconds on CPU over `--idle` seconds with no scrapes, summed
  over every thread's /proc/<pid>/task/<tid>/schedstat (not clock ticks), as % of one core;
- scrape latency p50/p99 with one client, and scrapes/s with 32 (wrk, one thread each);
- resident memory after that load; series served (sample lines in one body).
A bare aiohttp app serving gpu-exporter's bytes from memory is the ceiling of its stack here.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_serve import BARE_APP, ROOT, free_port, rss_mib, run_wrk, wait_for

PEER = "nvitop-exporter"
PEER_VERSION = "1.7.2"
VENV = ROOT / ".cache" / "bench-peers" / "nvitop"
SCENARIO = {"device_count": 8}


def peer_venv(version: str) -> Path:
    """Return the executable of nvitop-exporter, installed in a virtual environment of its own (its
    pins stay out of ours)."""
    exe = VENV / "bin" / PEER
    installed = VENV / "installed-version"
    if not exe.exists() or not installed.exists() or installed.read_text() != version:
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(VENV)], check=True)
        subprocess.run([str(VENV / "bin" / "pip"), "install", "-q", f"{PEER}=={version}"],
                       check=True)
        installed.write_text(version)
    return exe


def cpu_ns(pid: int) -> int:
    """Return the nanoseconds every thread of `pid` has spent on a CPU (schedstat's first field)."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError, IndexError, ValueError):  # a thread that ended
            total += int((task / "schedstat").read_text().split()[0])
    return total


def series(url: str) -> tuple[int, bytes]:
    with urllib.request.urlopen(url) as response:
        body = response.read()
    count = sum(1 for line in body.splitlines() if line and not line.startswith(b"#"))
    return count, body


def measure(pids: dict[str, int], urls: dict[str, str], args: argparse.Namespace
            ) -> dict[str, dict[str, float]]:
    figures: dict[str, dict[str, float]] = {name: {} for name in urls}
    start = {name: cpu_ns(pid) for name, pid in pids.items()}
    t0 = time.monotonic()
    time.sleep(args.idle)  # the measurement window: nobody scrapes
    elapsed = time.monotonic() - t0
    for name, pid in pids.items():
        figures[name]["idle_cpu_pct"] = (cpu_ns(pid) - start[name]) / 1e9 / elapsed * 100
    for name, url in urls.items():
        figures[name]["series"], _ = series(url)
        run_wrk(url, 4, 2)  # warm-up
        p50, p99, _ = run_wrk(url, 1, args.duration)
        _, _, rps = run_wrk(url, 32, args.duration)
        figures[name].update(p50_ms=p50, p99_ms=p99, rps32=rps)
        if name in pids:
            figures[name]["rss_mib"] = rss_mib(pids[name])
    return figures


def stop(procs: list[subprocess.Popen[bytes]]) -> None:
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--idle", type=float, default=60.0, help="seconds of idle polling")
    parser.add_argument("--settle", type=float, default=5.0)
    parser.add_argument("--duration", type=int, default=10, help="seconds per wrk run")
    parser.add_argument("--peer-version", default=PEER_VERSION)
    args = parser.parse_args()
    if shutil.which("wrk") is None:
        raise SystemExit("benchmarks need wrk: apt-get install wrk")
    from tests.nvmlsim.build import build_library

    lib = build_library()
    peer_exe = peer_venv(args.peer_version)
    tmp = Path(tempfile.mkdtemp(prefix="bench-peers-"))
    (tmp / "scenario.json").write_text(json.dumps(SCENARIO))
    env = {**os.environ, "LD_LIBRARY_PATH": str(lib),
           "NVMLSIM_SCENARIO": str(tmp / "scenario.json")}
    ours_port, peer_port, bare_port = free_port(), free_port(), free_port()
    procs: list[subprocess.Popen[bytes]] = []
    try:
        ours = subprocess.Popen(
            [sys.executable, "-m", "exporter", "serve", "--backend", "nvml", "-c", "1s",
             "-a", f"127.0.0.1:{ours_port}", "--log-level", "warning"],
            cwd=ROOT, env=env, stderr=subprocess.DEVNULL)
        procs.append(ours)
        peer = subprocess.Popen(
            [str(peer_exe), "--bind-address", "127.0.0.1", "--port", str(peer_port),
             "--interval", "1"], cwd=tmp, env=env, stderr=subprocess.DEVNULL)
        procs.append(peer)
        urls = {"gpu-exporter": f"http://127.0.0.1:{ours_port}/metrics",
                PEER: f"http://127.0.0.1:{peer_port}/metrics"}
        for url in urls.values():
            wait_for(url)
        time.sleep(args.settle)  # both past start-up (profiling rates need two polls)
        _, body = series(urls["gpu-exporter"])
        (tmp / "body.prom").write_bytes(body)
        bare = subprocess.Popen([sys.executable, "-c", BARE_APP, str(tmp / "body.prom"),
                                 str(bare_port)])
        procs.append(bare)
        urls["bare aiohttp, same bytes"] = f"http://127.0.0.1:{bare_port}/metrics"
        wait_for(urls["bare aiohttp, same bytes"])
        figures = measure({"gpu-exporter": ours.pid, PEER: peer.pid}, urls, args)
    finally:
        stop(procs)
        shutil.rmtree(tmp, ignore_errors=True)
    print_table(figures, args)
    return 0


def _ratio(ours: float, peer: float) -> str:
    return f"{ours / peer:.2f}x" if peer else "n/a"


def print_table(figures: dict[str, dict[str, float]], args: argparse.Namespace) -> None:
    print(f"8 simulated H200s through the real pynvml, both polling every 1 s; "
          f"{PEER} {args.peer_version}; idle window {args.idle:g} s; wrk 1 thread, "
          f"{args.duration} s per run; {os.cpu_count()} CPUs")
    print()
    print("| server | RSS after load | CPU idle-polling | 1 client p50 | 1 client p99 | "
          "32 clients scrapes/s | series served |")
    print("|---|---|---|---|---|---|---|")
    for name, f in figures.items():
        rss = f"{f['rss_mib']:.1f} MiB" if "rss_mib" in f else "—"
        cpu = f"{f['idle_cpu_pct']:.2f} %" if "idle_cpu_pct" in f else "—"
        print(f"| {name} | {rss} | {cpu} | {f['p50_ms']:.3f} ms | {f['p99_ms']:.3f} ms | "
              f"{f['rps32']:.0f} | {f['series']:.0f} |")
    ours, peer = figures["gpu-exporter"], figures[PEER]
    print(f"| gpu-exporter ÷ {PEER} | {_ratio(ours['rss_mib'], peer['rss_mib'])} | "
          f"{_ratio(ours['idle_cpu_pct'], peer['idle_cpu_pct'])} | "
          f"{_ratio(ours['p50_ms'], peer['p50_ms'])} | {_ratio(ours['p99_ms'], peer['p99_ms'])} "
          f"| {_ratio(ours['rps32'], peer['rps32'])} | "
          f"{_ratio(ours['series'], peer['series'])} |")


if __name__ == "__main__":
    sys.exit(main())

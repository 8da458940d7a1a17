"""Serve-path benchmark: the exporter on the simulated h200-mig node vs a bare aiohttp handler.

Usage: .venv/bin/python benchmarks/bench_serve.py [--duration 5] [--profile h200-mig]
Needs Debian's `wrk` (apt-get install wrk) and `openssl`. Prints one table; nothing is
asserted.

Measured, in one run:
- poll time per cycle: the real backend + exposition over the simulated node, in-process;
- scrape latency p50/p99 and scrapes/s with 1 and 32 concurrent connections (wrk, one
  thread, kept-alive connections as Prometheus keeps them), against the exporter process
  over plain HTTP, over TLS (a `--web.config.file` with a certificate), over TLS with basic
  auth (the same plus one bcrypt user; wrk sends the right password, so after the first
  request each check is a cache hit), and against a bare aiohttp app serving the same bytes
  from memory with the same settings — the ceiling of this stack on this machine;
- resident memory of the exporter process after the load.
"""

from __future__ import annotations

import argparse
import base64
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


def web_configs(folder: Path) -> tuple[Path, Path, str]:
    """(TLS only, TLS + basic auth, the Authorization header) with a fresh self-signed
    certificate; the password's bcrypt hash has cost 10, as `htpasswd -nBC 10` makes."""
    import bcrypt

    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                    "ec_paramgen_curve:prime256v1", "-nodes", "-days", "1", "-subj",
                    "/CN=localhost", "-keyout", str(folder / "key.pem"),
                    "-out", str(folder / "cert.pem")], check=True, capture_output=True)
    tls = "tls_server_config:\n  cert_file: cert.pem\n  key_file: key.pem\n"
    tls_only, with_auth = folder / "tls.yml", folder / "tls-auth.yml"
    tls_only.write_text(tls)
    hashed = bcrypt.hashpw(b"bench-password", bcrypt.gensalt(10)).decode()
    with_auth.write_text(tls + f"basic_auth_users:\n  prometheus: {hashed}\n")
    header = "Basic " + base64.b64encode(b"prometheus:bench-password").decode()
    return tls_only, with_auth, header


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


def run_wrk(url: str, connections: int, duration: int,
            headers: tuple[str, ...] = ()) -> tuple[float, float, float]:
    """(p50 ms, p99 ms, requests/s) from wrk --latency with one thread."""
    out = subprocess.run(
        ["wrk", "-t1", f"-c{connections}", f"-d{duration}s", "--latency",
         *(a for h in headers for a in ("-H", h)), url],
        check=True, capture_output=True, text=True).stdout
    if "Non-2xx" in out:
        raise SystemExit(f"{url}: some answers were not 200:\n{out}")
    p50 = _ms(re.search(r"^\s+50%\s+(\S+)", out, re.M).group(1))  # type: ignore[union-attr]
    p99 = _ms(re.search(r"^\s+99%\s+(\S+)", out, re.M).group(1))  # type: ignore[union-attr]
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))  # type: ignore[union-attr]
    return p50, p99, rps


def poll_cost(profile: str, cycles: int) -> tuple[float, float]:
    """Median and p99 seconds of one poll + render over the simulated node."""
    from exporter.devices.nvml import NvmlBackend
    from exporter.exposition.publisher import Publisher
    from exporter.fields.csv import default_collectors_path, load_collectors
    from exporter.sampling.snapshot import HostLabel, Snapshot
    from exporter.sampling.stats import PollStats
    from exporter.simulated.node import SimNvml

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

    folder = Path(tempfile.mkdtemp(prefix="bench-serve-"))
    tls_only, with_auth, authorization = web_configs(folder)
    port, tls_port, auth_port, bare_port = free_port(), free_port(), free_port(), free_port()
    common = [sys.executable, "-m", "exporter", "serve", "--backend", "sim", "--sim.profile",
              args.profile, "-c", "15s", "--log-level", "warning"]
    exporter = subprocess.Popen([*common, "-a", f"127.0.0.1:{port}"], cwd=ROOT)
    servers = [exporter]
    for extra_port, config in ((tls_port, tls_only), (auth_port, with_auth)):
        servers.append(subprocess.Popen([*common, "-a", f"127.0.0.1:{extra_port}",
                                         "--web.config.file", str(config)], cwd=ROOT))
    try:
        for p in (port, tls_port, auth_port):
            wait_for(f"http://127.0.0.1:{p}/ready")  # the probes' plain-HTTP path
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics") as response:
            body = response.read()
        (folder / "body.prom").write_bytes(body)
        servers.append(subprocess.Popen([sys.executable, "-c", BARE_APP,
                                         str(folder / "body.prom"), str(bare_port)]))
        wait_for(f"http://127.0.0.1:{bare_port}/metrics")
        rows = []
        targets: list[tuple[str, str, tuple[str, ...]]] = [
            ("gpu-exporter, HTTP", f"http://127.0.0.1:{port}/metrics", ()),
            ("gpu-exporter, TLS", f"https://127.0.0.1:{tls_port}/metrics", ()),
            ("gpu-exporter, TLS + basic auth", f"https://127.0.0.1:{auth_port}/metrics",
             (f"Authorization: {authorization}",)),
            ("bare aiohttp, same bytes", f"http://127.0.0.1:{bare_port}/metrics", ()),
        ]
        for name, url, headers in targets:
            run_wrk(url, 4, 2, headers)  # warm-up: first-request paths, caches, bcrypt
            one = run_wrk(url, 1, args.duration, headers)
            many = run_wrk(url, 32, args.duration, headers)
            rows.append((name, one, many))
        rss = rss_mib(exporter.pid)
    finally:
        for proc in servers:
            proc.send_signal(signal.SIGTERM)
            proc.wait(10)
        shutil.rmtree(folder, ignore_errors=True)

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
    ratio = rows[0][2][2] / rows[3][2][2]
    print(f"\n32-client throughput vs bare aiohttp: {ratio * 100:.0f} %")
    for label, column in (("1 client", 1), ("32 clients", 2)):
        tls_rps, auth_rps = rows[1][column][2], rows[2][column][2]
        print(f"basic auth over TLS, {label}: {(tls_rps / auth_rps - 1) * 100:+.1f} % time "
              f"per scrape ({auth_rps:.0f} vs {tls_rps:.0f} scrapes/s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

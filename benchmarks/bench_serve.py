"""Serve-path benchmark: the exporter polling every second on the simulated node, against a
bare aiohttp app serving the same bytes, measured in the same run and printed as ratios.

Usage: .venv/bin/python benchmarks/bench_serve.py [--rounds 15] [--duration 2]
       [--profile h200-mig] [--interval 1s] [--tls] [--sim-kubelet] [--callback-cpu]
       [--switch-interval S] [--exporter-metrics]
Needs Debian's `wrk` (apt-get install wrk), and `openssl` for --tls. Prints one table;
nothing is asserted.

Each round runs wrk (one thread, kept-alive connections as Prometheus keeps them) against
each server in turn, the exporter first, then the bare app: 1 client, then 32. Rounds
alternate so that a change in the machine's load falls on both; the table gives the median
of the rounds for each figure and the median of the per-round ratios. With --tls the round
adds the exporter over TLS, over TLS with one bcrypt basic-auth user (wrk sends the right
password, so after the first request each check is a cache hit) and the bare app over TLS.
With --exporter-metrics the round adds the exporter with `--enable-exporter-metrics`,
compared with the exporter without it (what rendering promhttp's families per scrape, and
finishing the gzip member with them, costs).

Both servers run through this file (`--inside`), which adds one thing to each: a probe on the
serving event loop that sleeps 5 ms at a time and records how late it wakes, i.e. how long
the loop was held by something else (a poll, a render, a scrape, or the machine's other
work). Both carry it, so it costs both the same. The longest stall while wrk ran is reported
per server, beside the bare app's; the exporter's also for the wakes a poll overlapped.
`--callback-cpu` also times every loop callback in both (thread CPU time: what the loop
itself did at once, without lock waits or preemption), at some cost to both's throughput.
Server CPU per scrape is the process's user and system time over a run, per scrape.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import math
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

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
"""The reference: what this stack serves when a handler only hands out bytes (also used by
bench_peers.py)."""

SWITCH_INTERVAL_ENV = "BENCH_SERVE_SWITCH_INTERVAL"
CALLBACK_CPU_ENV = "BENCH_SERVE_CALLBACK_CPU"
PROBE_PERIOD_S = 0.005
REPORT_EVERY_S = 0.25


# -- inside a server process ---------------------------------------------------------------

class _Polls:
    """Whether the exporter's sampler is inside a poll (device read, attribution, render)."""

    active = 0
    started = 0


def _start_probe(report_fd: int) -> None:
    """Start a probe on the running loop: wake every PROBE_PERIOD_S and note how late each wake
    came; every REPORT_EVERY_S write one line to `report_fd`: when (CLOCK_MONOTONIC, the same clock
    in every process), and each wake's lateness in ms, split by whether a poll ran meanwhile."""
    loop = asyncio.get_running_loop()
    out = os.fdopen(report_fd, "w", buffering=1)

    async def probe() -> None:
        late: dict[str, list[float]] = {"outside": [], "poll": []}
        reported = time.monotonic()
        while True:
            asked, polls = loop.time(), _Polls.started
            polling = _Polls.active > 0
            await asyncio.sleep(PROBE_PERIOD_S)
            lateness = (loop.time() - asked - PROBE_PERIOD_S) * 1e3
            during = polling or _Polls.active > 0 or _Polls.started != polls
            late["poll" if during else "outside"].append(round(lateness, 3))
            now = time.monotonic()
            if now - reported >= REPORT_EVERY_S:
                busiest = _Callbacks.longest * 1e3
                out.write(json.dumps({"at": now, "callback": busiest, **late}) + "\n")
                late = {"outside": [], "poll": []}
                reported, _Callbacks.longest = now, 0.0

    _KEEP.append(loop.create_task(probe()))


_KEEP: list[Any] = []


class _Callbacks:
    """With CALLBACK_CPU_ENV set: the most CPU time (this thread's, so neither waits for the
    interpreter lock nor the machine's other work count) one event-loop callback took."""

    longest = 0.0


def _time_callbacks() -> None:
    run = asyncio.events.Handle._run

    def timed(handle: asyncio.events.Handle) -> None:
        began = time.thread_time()
        run(handle)
        _Callbacks.longest = max(_Callbacks.longest, time.thread_time() - began)

    asyncio.events.Handle._run = timed  # type: ignore[method-assign,assignment]


def _count_polls() -> None:
    from exporter.sampling.sampler import Sampler

    poll_once = Sampler.poll_once

    async def counted(self: Any) -> None:
        _Polls.active += 1
        _Polls.started += 1
        try:
            await poll_once(self)
        finally:
            _Polls.active -= 1

    Sampler.poll_once = counted  # type: ignore[method-assign]


def inside(kind: str, report_fd: int, argv: list[str]) -> int:
    """Run a server with the loop probe: `exporter` runs the exporter's own `main` with
    `argv`; `bare` runs BARE_APP (argv: body file, port)."""
    if os.environ.get(CALLBACK_CPU_ENV):
        _time_callbacks()
    if kind == "bare":
        from aiohttp import web

        body = Path(argv[0]).read_bytes()

        async def metrics(_request: web.Request) -> web.Response:
            return web.Response(body=body,
                                headers={"Content-Type": "text/plain; version=0.0.4"})

        async def on_startup(_app: web.Application) -> None:
            _start_probe(report_fd)

        app = web.Application()
        app.router.add_get("/metrics", metrics)
        app.on_startup.append(on_startup)
        ssl_context = None
        if len(argv) > 2:  # cert, key
            import ssl

            ssl_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            ssl_context.load_cert_chain(argv[2], argv[3])
        web.run_app(app, host="127.0.0.1", port=int(argv[1]), access_log=None, print=None,
                    ssl_context=ssl_context)
        return 0
    from exporter import serve
    from exporter.cli import main as exporter_main
    from exporter.web.server import WebServer

    start = WebServer.start

    async def start_with_probe(self: WebServer, *args: Any, **kwargs: Any) -> None:
        await start(self, *args, **kwargs)
        _start_probe(report_fd)

    WebServer.start = start_with_probe  # type: ignore[method-assign]
    _count_polls()
    if SWITCH_INTERVAL_ENV in os.environ:  # --switch-interval: the exporter's, replaced
        serve.LOOP_SWITCH_INTERVAL_S = float(os.environ[SWITCH_INTERVAL_ENV])  # type: ignore[attr-defined]
    return exporter_main(argv)


# -- the driver --------------------------------------------------------------------------------

def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for(url: str, timeout: float = 30.0) -> None:
    import ssl

    unverified = ssl.create_default_context()
    unverified.check_hostname, unverified.verify_mode = False, ssl.CERT_NONE
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=1, context=unverified) as response:
                if response.status == 200:
                    return
        except OSError:
            time.sleep(0.1)
    raise SystemExit(f"{url} did not answer within {timeout}s")


def settled_body(url: str, interval_s: float, timeout: float = 60.0) -> bytes:
    """Return the body once its series stop changing in number: the profiling fields appear from
    the second poll on (a GPM rate needs two samples)."""
    deadline = time.monotonic() + timeout
    last = b""
    while time.monotonic() < deadline:
        with urllib.request.urlopen(url) as response:
            body: bytes = response.read()
        if last and body.count(b"\n") == last.count(b"\n"):
            return body
        last = body
        time.sleep(1.5 * interval_s)
    raise SystemExit(f"{url}: the body kept changing for {timeout}s")


def web_configs(folder: Path) -> tuple[Path, Path, str]:
    """Return the web config for TLS only, the one for TLS + basic auth, and the Authorization
    header, with a fresh self-signed certificate; the password's bcrypt hash has cost 10, as
    `htpasswd -nBC 10` makes."""
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


def cpu_s(pid: int) -> float:
    """Return the seconds every thread of `pid` has spent on a CPU, user and system
    (/proc/<pid>/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run_wrk(url: str, connections: int, duration: int,
            headers: tuple[str, ...] = ()) -> tuple[float, float, float]:
    """Return (p50 ms, p99 ms, requests/s) from wrk --latency with one thread."""
    out = subprocess.run(
        ["wrk", "-t1", f"-c{connections}", f"-d{duration}s", "--latency",
         *(a for h in headers for a in ("-H", h)), url],
        check=True, capture_output=True, text=True).stdout
    if "Non-2xx" in out or "Socket errors" in out:
        raise SystemExit(f"{url}: some answers were not 200:\n{out}")
    p50 = _ms(re.search(r"^\s+50%\s+(\S+)", out, re.M).group(1))  # type: ignore[union-attr]
    p99 = _ms(re.search(r"^\s+99%\s+(\S+)", out, re.M).group(1))  # type: ignore[union-attr]
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))  # type: ignore[union-attr]
    return p50, p99, rps


class Probe(threading.Thread):
    """Reads one server's probe lines as they come."""

    def __init__(self, fd: int) -> None:
        super().__init__(daemon=True)
        self._file = os.fdopen(fd)
        self.lines: list[dict[str, Any]] = []

    def run(self) -> None:
        for line in self._file:
            self.lines.append(json.loads(line))

    def longest_callback(self, start: float, end: float) -> float:
        return max((line["callback"] for line in self.lines
                    if start < line["at"] < end + REPORT_EVERY_S), default=float("nan"))

    def lateness(self, start: float, end: float, which: tuple[str, ...] = ("outside", "poll")
                 ) -> list[float]:
        """Return every wake's lateness (ms) in the lines that cover part of [start, end] (a line
        covers the REPORT_EVERY_S before it), sorted."""
        return sorted(late for line in self.lines
                      if start < line["at"] < end + REPORT_EVERY_S
                      for kind in which for late in line[kind])


@dataclass
class Server:
    name: str
    url: str
    process: subprocess.Popen[bytes]
    probe: Probe
    reference: str
    """The name of the server this one is compared with."""
    headers: tuple[str, ...] = ()
    runs: dict[str, list[float]] = field(default_factory=dict)

    def add(self, figure: str, value: float) -> None:
        self.runs.setdefault(figure, []).append(value)


def spawn(kind: str, argv: Sequence[str]) -> tuple[subprocess.Popen[bytes], Probe]:
    read_fd, write_fd = os.pipe()
    process = subprocess.Popen(
        [sys.executable, __file__, "--inside", kind, str(write_fd), "--", *argv],
        cwd=ROOT, pass_fds=(write_fd,))
    os.close(write_fd)
    probe = Probe(read_fd)
    probe.start()
    return process, probe


def _percentile(ordered: list[float], q: float) -> float:
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))] if ordered else float("nan")


def measure_round(servers: list[Server], duration: int) -> None:
    """Run each load against every server in turn, so neighbouring runs compare."""
    for clients, tag in ((1, "1"), (32, "32")):
        for server in servers:
            start, cpu = time.monotonic(), cpu_s(server.process.pid)
            p50, p99, rps = run_wrk(server.url, clients, duration, server.headers)
            elapsed, cpu = time.monotonic() - start, cpu_s(server.process.pid) - cpu
            server.add(f"cpu_{tag}", cpu / (rps * elapsed) * 1e6)
            server.add(f"p50_{tag}", p50)
            server.add(f"p99_{tag}", p99)
            server.add(f"rps_{tag}", rps)
            end = time.monotonic()
            everything = server.probe.lateness(start, end)
            server.add(f"stall_{tag}", everything[-1] if everything else float("nan"))
            server.add(f"late99_{tag}", _percentile(everything, 0.99))
            polls = server.probe.lateness(start, end, ("poll",))
            if server.name.startswith("gpu-exporter"):  # a run may see no poll: nan
                server.add(f"pollstall_{tag}", polls[-1] if polls else math.nan)
            if os.environ.get(CALLBACK_CPU_ENV):
                server.add(f"callback_{tag}", server.probe.longest_callback(start, end))


FIGURES: tuple[tuple[str, str, str, str], ...] = (
    # (key, label, unit, the reference's key the ratio divides by)
    ("p50_1", "1 client p50", "ms", "p50_1"),
    ("p99_1", "1 client p99", "ms", "p99_1"),
    ("rps_1", "1 client scrapes/s", "", "rps_1"),
    ("cpu_1", "server CPU per scrape, 1 client", "µs", "cpu_1"),
    ("stall_1", "longest loop stall, 1 client", "ms", "stall_1"),
    ("pollstall_1", "longest loop stall during a poll, 1 client", "ms", "stall_1"),
    ("late99_1", "loop wake-up lateness p99, 1 client", "ms", "late99_1"),
    ("callback_1", "longest loop callback (CPU), 1 client", "ms", "callback_1"),
    ("p50_32", "32 clients p50", "ms", "p50_32"),
    ("p99_32", "32 clients p99", "ms", "p99_32"),
    ("rps_32", "32 clients scrapes/s", "", "rps_32"),
    ("cpu_32", "server CPU per scrape, 32 clients", "µs", "cpu_32"),
    ("stall_32", "longest loop stall, 32 clients", "ms", "stall_32"),
    ("pollstall_32", "longest loop stall during a poll, 32 clients", "ms", "stall_32"),
    ("late99_32", "loop wake-up lateness p99, 32 clients", "ms", "late99_32"),
    ("callback_32", "longest loop callback (CPU), 32 clients", "ms", "callback_32"),
)


def _median(values: list[float]) -> float:
    known = [v for v in values if not math.isnan(v)]
    return statistics.median(known) if known else math.nan


def _ratio(runs: list[float], reference: list[float]) -> str:
    """Return the median of the per-round ratios (runs of one round are neighbours in time)."""
    pairs = [a / b for a, b in zip(runs, reference, strict=False)
             if b > 0 and not math.isnan(a) and not math.isnan(b)]
    if not pairs or len(runs) != len(reference):
        return "n/a"
    return f"{statistics.median(pairs):.2f}x"


def _figure(value: float, unit: str) -> str:
    if unit == "ms":
        return f"{value:.3f} ms"
    return f"{value:.0f} {unit}".rstrip()


def report(servers: list[Server], args: argparse.Namespace, body: bytes,
           rss: dict[str, float]) -> None:
    by_name = {s.name: s for s in servers}
    lines = body.count(b"\n")
    print(f"profile {args.profile}, polling every {args.interval}, body {len(body)} bytes, "
          f"{lines} lines; wrk 1 thread, {args.duration}s per run, "
          f"{args.rounds} rounds alternated; {os.cpu_count()} CPUs, load average "
          f"{args.load_before} before, {os.getloadavg()[0]:.2f} after")
    print()
    compared = [s for s in servers if s.reference != s.name]
    header = "| figure | " + " | ".join(s.name for s in servers) + " | " + " | ".join(
        f"{s.name} ÷ {s.reference}" for s in compared) + " |"
    print(header)
    print("|---" * (1 + len(servers) + len(compared)) + "|")
    for key, label, unit, ref_key in FIGURES:
        if not any(key in s.runs for s in servers):
            continue
        cells = [_figure(_median(s.runs[key]), unit) if key in s.runs else "—"
                 for s in servers]
        ratios = [_ratio(s.runs.get(key, []), by_name[s.reference].runs.get(ref_key, []))
                  for s in compared]
        print(f"| {label} (median of {args.rounds}) | " + " | ".join(cells) + " | "
              + " | ".join(ratios) + " |")
    cells = [f"{rss[s.name]:.1f} MiB" for s in servers]
    ratios = [f"{rss[s.name] / rss[s.reference]:.2f}x" for s in compared]
    print("| resident memory after the load | " + " | ".join(cells) + " | "
          + " | ".join(ratios) + " |")
    print()
    for s in compared:
        ref = by_name[s.reference]
        per_round = [a / b for a, b in zip(s.runs["rps_32"], ref.runs["rps_32"], strict=True)]
        p99s = [a / b for a, b in zip(s.runs["p99_1"], ref.runs["p99_1"], strict=True)]
        print(f"{s.name} ÷ {s.reference}, per round: 32-client throughput "
              + ", ".join(f"{r:.2f}x" for r in per_round) + "; 1-client p99 "
              + ", ".join(f"{r:.2f}x" for r in p99s))


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--duration", type=int, default=2, help="seconds per wrk run")
    parser.add_argument("--profile", default="h200-mig")
    parser.add_argument("--interval", default="1s", help="the exporter's -c")
    parser.add_argument("--switch-interval", type=float,
                        help="run the exporter with this interpreter switch interval (s) "
                             "instead of its own, to measure what it changes")
    parser.add_argument("--sim-kubelet", action="store_true",
                        help="the exporter attributes devices to pods (--sim.kubelet)")
    parser.add_argument("--callback-cpu", action="store_true",
                        help="time every event-loop callback in both servers (costs both "
                             "some throughput): the longest one's CPU time")
    parser.add_argument("--tls", action="store_true",
                        help="also over TLS, and TLS with basic auth")
    parser.add_argument("--exporter-metrics", action="store_true",
                        help="also the exporter with --enable-exporter-metrics")
    args = parser.parse_args()
    from exporter.durations import parse_duration

    if shutil.which("wrk") is None:
        raise SystemExit("benchmarks need wrk: apt-get install wrk")
    args.load_before = f"{os.getloadavg()[0]:.2f}"
    if args.switch_interval is not None:
        os.environ[SWITCH_INTERVAL_ENV] = str(args.switch_interval)
    if args.callback_cpu:
        os.environ[CALLBACK_CPU_ENV] = "1"

    folder = Path(tempfile.mkdtemp(prefix="bench-serve-"))
    processes: list[subprocess.Popen[bytes]] = []
    common = ["serve", "--backend", "sim", "--sim.profile", args.profile, "-c", args.interval,
              "--log-level", "warning", *(["--sim.kubelet"] if args.sim_kubelet else [])]

    def start(kind: str, argv: Sequence[str]) -> tuple[subprocess.Popen[bytes], Probe]:
        process, probe = spawn(kind, argv)
        processes.append(process)
        return process, probe

    try:
        servers: list[Server] = []
        port = free_port()
        process, probe = start("exporter", [*common, "-a", f"127.0.0.1:{port}"])
        exporter_url = f"http://127.0.0.1:{port}/metrics"
        wait_for(f"http://127.0.0.1:{port}/ready")
        body = settled_body(exporter_url, parse_duration(args.interval))
        (folder / "body.prom").write_bytes(body)
        bare_port = free_port()
        bare, bare_probe = start("bare", [str(folder / "body.prom"), str(bare_port)])
        bare_url = f"http://127.0.0.1:{bare_port}/metrics"
        wait_for(bare_url)
        servers += [Server("gpu-exporter", exporter_url, process, probe, "bare aiohttp"),
                    Server("bare aiohttp", bare_url, bare, bare_probe, "bare aiohttp")]
        if args.tls:
            servers += tls_servers(folder, common, start)
        if args.exporter_metrics:
            port = free_port()
            process, probe = start("exporter", [*common, "-a", f"127.0.0.1:{port}",
                                                "--enable-exporter-metrics"])
            wait_for(f"http://127.0.0.1:{port}/ready")
            servers.append(Server("gpu-exporter + exporter metrics",
                                  f"http://127.0.0.1:{port}/metrics", process, probe,
                                  "gpu-exporter"))
        for s in servers:
            run_wrk(s.url, 4, 2, s.headers)  # warm-up: first-request paths, caches, bcrypt
        for _ in range(args.rounds):
            measure_round(servers, args.duration)
        rss = {s.name: rss_mib(s.process.pid) for s in servers}
    finally:
        for proc in processes:
            proc.send_signal(signal.SIGTERM)
            proc.wait(10)
        shutil.rmtree(folder, ignore_errors=True)
    report(servers, args, body, rss)
    return 0


def tls_servers(folder: Path, common: list[str],
                start: Callable[[str, Sequence[str]], tuple[subprocess.Popen[bytes], Probe]]
                ) -> list[Server]:
    tls_only, with_auth, authorization = web_configs(folder)
    servers = []
    for name, config, headers in (
            ("gpu-exporter TLS", tls_only, ()),
            ("gpu-exporter TLS + basic auth", with_auth,
             (f"Authorization: {authorization}",))):
        port = free_port()
        process, probe = start("exporter", [*common, "-a", f"127.0.0.1:{port}",
                                            "--web.config.file", str(config)])
        wait_for(f"http://127.0.0.1:{port}/ready")  # the probes' plain-HTTP path
        servers.append(Server(name, f"https://127.0.0.1:{port}/metrics", process, probe,
                              "bare aiohttp TLS", headers))
    port = free_port()
    process, probe = start("bare", [str(folder / "body.prom"), str(port),
                                    str(folder / "cert.pem"), str(folder / "key.pem")])
    url = f"https://127.0.0.1:{port}/metrics"
    wait_for(url)
    servers.append(Server("bare aiohttp TLS", url, process, probe, "bare aiohttp TLS"))
    return servers


if __name__ == "__main__":
    if len(sys.argv) > 4 and sys.argv[1] == "--inside":
        sys.exit(inside(sys.argv[2], int(sys.argv[3]), sys.argv[5:]))
    sys.exit(main())

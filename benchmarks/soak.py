"""Soak: the exporter polling as fast as the simulated node allows, for 100,000 polls or more,
while a simulated kubelet churns pods and a client scrapes continuously.

Usage: .venv/bin/python benchmarks/soak.py [--polls 100000] [--profile h200-mig]
Prints a table of samples and exits 1 when a bound is crossed (2 when the run itself failed):
after warm-up, resident memory grows by less than --rss-bound-mib (1 MiB), and open file
descriptors, threads and asyncio tasks stay flat.

The exporter runs in its own process, started through this file (`--inside`): that adds a
counter of completed polls and a count of the event loop's tasks (taken every 200 polls),
reported through a pipe once a second by one extra thread; nothing else is changed. Memory,
descriptors and threads are read from /proc/<pid> outside it.
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

REPORT_EVERY_S = 1.0
TASKS_EVERY_POLLS = 200


# -- inside the exporter process ----------------------------------------------------------------

def inside(report_fd: int, argv: list[str]) -> int:
    """Run the exporter's own `main`, counting polls and event-loop tasks on the side."""
    from exporter.cli import main as exporter_main
    from exporter.sampling.sampler import Sampler

    counts = {"polls": 0, "attempts": 0, "tasks": 0}
    poll_once = Sampler.poll_once

    async def counted(self: Any) -> None:
        before = self.stats.last_success
        await poll_once(self)
        counts["attempts"] += 1
        if self.stats.last_success != before:  # devices read and published, not a retry
            counts["polls"] += 1
            if counts["polls"] % TASKS_EVERY_POLLS == 1:
                counts["tasks"] = len(asyncio.all_tasks())

    Sampler.poll_once = counted  # type: ignore[method-assign]

    def report() -> None:
        with os.fdopen(report_fd, "w", buffering=1) as out:
            while True:
                out.write(json.dumps(counts) + "\n")
                time.sleep(REPORT_EVERY_S)

    threading.Thread(target=report, name="soak-report", daemon=True).start()
    return exporter_main(argv)


# -- the driver -----------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Sample:
    elapsed_s: float
    polls: int
    rss_kib: int
    fds: int
    threads: int
    tasks: int
    scrapes: int
    attempts: int


def proc_status(pid: int) -> tuple[int, int, int]:
    """Return (VmRSS KiB, open descriptors, threads) of a process."""
    fields = dict(line.split(":", 1) for line in
                  Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line)
    fds = len(os.listdir(f"/proc/{pid}/fd"))
    return int(fields["VmRSS"].split()[0]), fds, int(fields["Threads"])


def churn_plans(profile: str) -> Any:
    """Return the pod allocations for generation n: every device to a pod named after n, and every
    other generation only half of them, so label sets come and go."""
    from exporter.simulated.kubelet import pod_resources
    from exporter.simulated.node import SimNvml

    layout = SimNvml(profile).layout
    grants = []
    for gpu in layout:
        if gpu.mig_devices:
            grants += [(f"nvidia.com/mig-{m.profile}", m.uuid) for m in gpu.mig_devices]
        else:
            grants.append(("nvidia.com/gpu", gpu.uuid))

    def plan(n: int) -> list[Any]:
        held = grants if n % 2 == 0 else grants[::2]
        return [pod_resources("soak", f"job-{n}-{i}", {"main": [(resource, [uuid])]})
                for i, (resource, uuid) in enumerate(held)]

    return plan


class Scraper(threading.Thread):
    """Scrapes /metrics at `hz` over one keep-alive connection, gzip every other time."""

    def __init__(self, port: int, hz: float) -> None:
        super().__init__(name="scraper", daemon=True)
        self._port, self._period = port, 1.0 / hz
        self.done = threading.Event()
        self.scrapes = 0
        self.failures: list[str] = []

    def run(self) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", self._port, timeout=10)
        next_at = time.monotonic()
        while not self.done.is_set():
            headers = {"Accept-Encoding": "gzip"} if self.scrapes % 2 else {}
            try:
                conn.request("GET", "/metrics", headers=headers)
                response = conn.getresponse()
                body = response.read()
                if response.status != 200 or not body:
                    self.failures.append(f"HTTP {response.status}, {len(body)} bytes")
            except (OSError, http.client.HTTPException) as exc:
                self.failures.append(repr(exc))
                conn.close()
                conn = http.client.HTTPConnection("127.0.0.1", self._port, timeout=10)
            self.scrapes += 1
            next_at += self._period
            self.done.wait(max(0.0, next_at - time.monotonic()))
        conn.close()


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run_soak(args: argparse.Namespace) -> list[Sample]:
    from exporter.simulated.kubelet import serve_pod_resources

    plan = churn_plans(args.profile)
    tmp = Path(tempfile.mkdtemp(prefix="soak-", dir="/tmp"))
    kubelet = serve_pod_resources(str(tmp / "kubelet.sock"))
    kubelet.servicer.set_pods(plan(0))
    stop_churn = threading.Event()

    def churn() -> None:
        n = 0
        while not stop_churn.wait(args.churn_s):
            n += 1
            kubelet.servicer.set_pods(plan(n))

    read_end, write_end = os.pipe()
    port = free_port()
    exporter = subprocess.Popen(
        [sys.executable, __file__, "--inside", str(write_end), "--", "serve",
         "--backend", "sim", "--sim.profile", args.profile, "-c", args.interval,
         "-a", f"127.0.0.1:{port}", "-k", "--kubernetes.pod-resources-socket",
         str(tmp / "kubelet.sock"), "--log-level", "warning"],
        cwd=ROOT, pass_fds=(write_end,))
    os.close(write_end)
    latest = {"polls": 0, "attempts": 0, "tasks": 0}

    def read_reports() -> None:
        with os.fdopen(read_end) as reports:
            for line in reports:
                latest.update(json.loads(line))

    threading.Thread(target=read_reports, daemon=True).start()
    threading.Thread(target=churn, daemon=True).start()
    scraper = Scraper(port, args.scrape_hz)
    samples: list[Sample] = []
    started = time.monotonic()
    try:
        while latest["polls"] == 0:
            if exporter.poll() is not None or time.monotonic() - started > 60:
                raise SystemExit("the exporter did not start polling")
            time.sleep(0.2)
        scraper.start()
        while latest["polls"] < args.polls:
            time.sleep(args.sample_s)
            if exporter.poll() is not None:
                raise SystemExit(f"the exporter exited {exporter.returncode}")
            rss, fds, threads = proc_status(exporter.pid)
            sample = Sample(time.monotonic() - started, latest["polls"], rss, fds, threads,
                            latest["tasks"], scraper.scrapes, latest["attempts"])
            samples.append(sample)
            print(f"{sample.elapsed_s:7.0f}s polls {sample.polls:7d} rss {rss / 1024:6.1f} MiB "
                  f"fds {fds} threads {threads} tasks {sample.tasks} scrapes {sample.scrapes}",
                  file=sys.stderr, flush=True)
    finally:
        scraper.done.set()
        stop_churn.set()
        exporter.send_signal(signal.SIGTERM)
        exporter.wait(10)
        kubelet.stop()
        tmp.rmdir()
    if scraper.failures:
        raise SystemExit(f"{len(scraper.failures)} failed scrapes, e.g. {scraper.failures[:3]}")
    return samples


def verdict(samples: list[Sample], args: argparse.Namespace) -> tuple[list[str], list[str]]:
    """Return the lines describing each bound, and the bounds crossed."""
    after = [s for s in samples if s.polls >= args.warmup_polls]
    if len(after) < 6:
        return [], ["too few samples after warm-up; run longer"]
    # Medians of three samples at each end, so one sample's allocator noise is not growth.
    base = statistics.median(s.rss_kib for s in after[:3])
    end = statistics.median(s.rss_kib for s in after[-3:])
    growth_mib = (end - base) / 1024
    lines, crossed = [], []
    lines.append(f"RSS after warm-up: {base / 1024:.1f} -> {end / 1024:.1f} MiB, growth "
                 f"{growth_mib:+.2f} MiB (bound < {args.rss_bound_mib} MiB)")
    if growth_mib >= args.rss_bound_mib:
        crossed.append("RSS")
    for name in ("fds", "threads"):
        values = [getattr(s, name) for s in after]
        lines.append(f"{name} after warm-up: min {min(values)}, max {max(values)} (bound: flat)")
        if max(values) != min(values):
            crossed.append(name)
    # Tasks come and go with each scrape and refresh: bounded means the second half of the
    # run never holds more at once than the first half did.
    half = len(after) // 2
    first, last = max(s.tasks for s in after[:half]), max(s.tasks for s in after[half:])
    lines.append(f"asyncio tasks after warm-up: at most {first} in the first half, {last} in "
                 f"the second (bound: no more in the second)")
    if last > first:
        crossed.append("tasks")
    failed = 1 - after[-1].polls / max(1, after[-1].attempts)
    lines.append(f"poll cycles that did not read devices (deadline/busy): {failed:.1%}")
    return lines, crossed


def print_table(samples: list[Sample], args: argparse.Namespace) -> None:
    rows = 10
    picked = [samples[min(len(samples) - 1, round(i * (len(samples) - 1) / rows))]
              for i in range(rows + 1)]
    print(f"profile {args.profile}, -c {args.interval}, kubelet churn every {args.churn_s}s, "
          f"scraping at {args.scrape_hz:g} Hz, warm-up {args.warmup_polls} polls")
    print()
    print("| elapsed | polls | polls/s | RSS | open fds | threads | asyncio tasks | scrapes |")
    print("|---|---|---|---|---|---|---|---|")
    for s in dict.fromkeys(picked):
        rate = s.polls / s.elapsed_s if s.elapsed_s else 0.0
        print(f"| {s.elapsed_s / 60:.1f} min | {s.polls} | {rate:.0f} | {s.rss_kib / 1024:.1f} MiB "
              f"| {s.fds} | {s.threads} | {s.tasks} | {s.scrapes} |")


def main() -> int:
    if len(sys.argv) > 2 and sys.argv[1] == "--inside":
        return inside(int(sys.argv[2]), sys.argv[4:])
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--polls", type=int, default=100_000)
    parser.add_argument("--warmup-polls", type=int, default=10_000)
    parser.add_argument("--profile", default="h200-mig")
    parser.add_argument("--interval", default="10ms",
                        help="-c of the exporter: just above one poll + render of h200-mig "
                             "(~7 ms), so polls run back to back and few miss their deadline")
    parser.add_argument("--churn-s", type=float, default=0.5, help="seconds between pod sets")
    parser.add_argument("--scrape-hz", type=float, default=20.0)
    parser.add_argument("--sample-s", type=float, default=5.0)
    parser.add_argument("--rss-bound-mib", type=float, default=1.0)
    args = parser.parse_args()
    try:
        samples = run_soak(args)
    except SystemExit as exc:
        print(f"soak failed: {exc}", file=sys.stderr)
        return 2
    print_table(samples, args)
    lines, crossed = verdict(samples, args)
    print()
    for line in lines:
        print(f"- {line}")
    print(f"\n{'FAIL: ' + ', '.join(crossed) if crossed else 'PASS'}")
    return 1 if crossed else 0


if __name__ == "__main__":
    sys.exit(main())

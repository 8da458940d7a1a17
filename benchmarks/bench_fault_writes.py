"""How soon a GPU fault reaches the Kubernetes node: seconds from a simulated XID to the
exporter's `/metrics` and to its first writes to the API server.

Usage: PYTHONPATH=$PWD .venv/bin/python benchmarks/bench_fault_writes.py [--rounds 5]
       [--interval 500ms | --intervals 500ms,2s] [--at 3s]

Each round is a fresh exporter process (`serve --backend sim -c <interval>`, the node
condition, Events and taint writers on) against the fake API server of the tests
(tests/support/apiserver.py) holding this node and three other GPU nodes, so the taint
breaker lets the taint on. Two cases:

- XID 95 (RESET_GPU) on GPU 2 of `h100-8`: the seconds from the fault to (a) the first
  `/metrics` body with its `gpu_exporter_gpu_fault` series, the reference, (b) the first
  node-status PATCH whose GPUHardwareReady condition is False and names it, (c) the first
  write that puts the taint on, (d) the first Event naming it;
- XID 31 (RESTART_APP) on GPU 0 of `a100-timesliced` with `--sim.kubelet`: (a) and the first
  Event naming it.

A fault's time is the simulated node's start, which the exporter logs to the millisecond
("--sim.fault times count from Unix time ..."), plus its `at`. Each round moves `at` by a
further share of the interval (round i of n: `--at` + (i + 0.5) / n intervals), so the
faults fall at phases spread evenly over the poll. A write's time is its arrival at the
fake API server. The appearance on `/metrics` is the time the first scrape that shows it
was answered; the scrapes run back to back on one kept-alive connection from shortly before
the fault, and the window between the start of the last scrape without it and the answer of
the first with it (the scraping resolution) is a row of the table.

Prints the 1-minute load average before and after (the machine may be shared) and one
table: per measure the median and max seconds over the rounds, the median in
polls (seconds / interval), as a ratio to the median of (a), and the median per round of the
measure minus (a) (what the write adds to the poll that showed the fault; the writer is
handed the same snapshot as `/metrics`, so a write can arrive a few milliseconds before the
scrape that shows it is answered, within the scraping resolution). Nothing is
asserted; exits 1 with one line when a round cannot be measured.
"""

from __future__ import annotations

import argparse
import http.client
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from exporter.durations import parse_duration  # noqa: E402
from tests.support.apiserver import FakeApiServer  # noqa: E402
from tests.support.apiserver_nodes import node  # noqa: E402
from tests.support.exporter_process import ExporterProcess  # noqa: E402

NODE = "gpu-node-1"
OTHER_NODES = ("gpu-node-2", "gpu-node-3", "gpu-node-4")
GPU_NODE = {"nvidia.com/gpu.present": "true"}
TAINT_KEY = "gpu-exporter/gpu-fault"
CONDITION = "GPUHardwareReady"
WRITERS = ("--faults.node-condition", "--faults.events", "--faults.taint")
SCRAPE_LEAD_S = 0.2
"""How long before the fault the back-to-back scraping begins."""
WAIT_POLLS, WAIT_S = 20, 20.0
"""How long a round waits for each figure after the fault: this many polls plus seconds."""


class RoundFailed(Exception):
    """A round that could not be measured; the message says why, in one line."""


@dataclass(frozen=True)
class Case:
    """One fault, where it happens and which of its writes are timed."""

    name: str
    profile: str
    code: int
    gpu: int
    writes: tuple[str, ...]
    extra: tuple[str, ...] = ()


XID95 = Case("XID 95 (RESET_GPU), h100-8", "h100-8", 95, 2,
             ("condition False", "taint", "Event"))
XID31 = Case("XID 31 (RESTART_APP), a100-timesliced", "a100-timesliced", 31, 0,
             ("Event",), ("--sim.kubelet",))


# -- the API server's side -----------------------------------------------------------------

History = list[tuple[float, str, str, Any]]


def _first_condition_false(history: History, part: str) -> float | None:
    """Return the arrival time of the first status PATCH whose condition is False and whose
    message holds `part`, or None."""
    for at, method, path, body in history:
        if method == "PATCH" and path == f"/api/v1/nodes/{NODE}/status":
            for c in body["status"]["conditions"]:
                if c["type"] == CONDITION and c["status"] == "False" and part in c["message"]:
                    return at
    return None


def _first_taint(history: History, part: str) -> float | None:
    """Return the arrival time of the first write of the node that puts the exporter's
    taint on, or None (`part` is unused: the taint does not name the fault)."""
    del part
    for at, method, path, body in history:
        if method in ("PATCH", "PUT") and path == f"/api/v1/nodes/{NODE}":
            taints = body.get("spec", {}).get("taints") or []
            if any(t["key"] == TAINT_KEY and t["effect"] == "NoSchedule" for t in taints):
                return at
    return None


def _first_event(history: History, part: str) -> float | None:
    """Return the arrival time of the first Event written whose message holds `part`."""
    for at, method, path, body in history:
        if method == "POST" and path.endswith("/events") and part in body.get("message", ""):
            return at
    return None


FINDERS: dict[str, Callable[[History, str], float | None]] = {
    "condition False": _first_condition_false, "taint": _first_taint, "Event": _first_event}


def _api() -> FakeApiServer:
    """Return a started fake API server holding this node and three untainted GPU nodes."""
    api = FakeApiServer().start()
    for name in (NODE, *OTHER_NODES):
        api.state.store.add(node(name, GPU_NODE))
    return api


# -- the exporter's side -------------------------------------------------------------------


def _sim_zero(proc: ExporterProcess) -> float:
    """Return the Unix time the simulated node's `--sim.fault` times count from."""
    started_at = proc.sim_started_at()
    if started_at is None:
        raise RoundFailed("the exporter did not log its simulated node's start time")
    return started_at


def _shows(body: str, case: Case) -> bool:
    """Return whether a `/metrics` body holds the case's `gpu_exporter_gpu_fault` series."""
    for line in body.splitlines():
        if line.startswith("gpu_exporter_gpu_fault{") and f'code="{case.code}"' in line \
                and f'gpu="{case.gpu}"' in line and 'source="xid"' in line:
            return True
    return False


def _first_scrape_showing(proc: ExporterProcess, case: Case, fault_at: float,
                          deadline: float) -> tuple[float, float]:
    """Scrape back to back from shortly before `fault_at`; return the time the first scrape
    showing the fault was answered and the window it was seen in (from the start of the
    scrape before it)."""
    time.sleep(max(0.0, fault_at - SCRAPE_LEAD_S - time.time()))
    connection = http.client.HTTPConnection("127.0.0.1", proc.port, timeout=10)
    try:
        previous_start: float | None = None
        while time.time() < deadline:
            started = time.time()
            connection.request("GET", "/metrics")
            response = connection.getresponse()
            body = response.read().decode()
            answered = time.time()
            if response.status != 200:
                raise RoundFailed(f"/metrics answered {response.status}")
            if _shows(body, case):
                if previous_start is None:
                    raise RoundFailed(f"XID {case.code} was served before the scraping began "
                                      "(a slow start?); raise --at")
                return answered, answered - previous_start
            previous_start = started
    finally:
        connection.close()
    raise RoundFailed(f"XID {case.code} never appeared on /metrics")


def run_round(case: Case, interval: str, at_s: float, workdir: Path) -> dict[str, float]:
    """Run one exporter with the case's fault at `at_s` and return the seconds from the
    fault to each measure, and the scraping resolution."""
    interval_s = parse_duration(interval)
    at_ms = round(at_s * 1000)  # the fault's time as the exporter is given it
    at_s = at_ms / 1000
    api = _api()
    proc: ExporterProcess | None = None
    try:
        kubeconfig = api.write_kubeconfig(workdir / "kubeconfig")
        env = {"KUBECONFIG": kubeconfig, "NODE_NAME": NODE, "KUBERNETES_SERVICE_HOST": ""}
        fault = f"xid,code={case.code},gpu={case.gpu},at={at_ms}ms"
        proc = ExporterProcess(["--backend", "sim", "-c", interval, "--sim.profile",
                                case.profile, *case.extra, *WRITERS, "--sim.fault", fault],
                               env=env)
        try:
            proc.wait_ready(60.0)
        except AssertionError as exc:
            raise RoundFailed(str(exc).splitlines()[0]) from None
        fault_at = _sim_zero(proc) + at_s
        if time.time() > fault_at - SCRAPE_LEAD_S:
            raise RoundFailed(f"the exporter was ready {time.time() - fault_at + at_s:.1f}s "
                              f"after its simulated node's start, too late for --at; raise it")
        deadline = fault_at + WAIT_POLLS * interval_s + WAIT_S
        seen, window = _first_scrape_showing(proc, case, fault_at, deadline)
        figures = {"on /metrics": seen - fault_at, "resolution": window}
        part = f"[XID {case.code}] GPU {case.gpu} "
        for write in case.writes:
            while (at := FINDERS[write](list(api.state.history), part)) is None:
                if time.time() > deadline:
                    raise RoundFailed(f"no {write} write for XID {case.code} within "
                                      f"{deadline - fault_at:.0f}s")
                time.sleep(0.05)
            figures[write] = at - fault_at
        return figures
    finally:
        if proc is not None:
            proc.close()
        api.stop()


# -- the table -----------------------------------------------------------------------------


def _signed(seconds: float) -> str:
    """Return seconds with their sign to the millisecond, a rounded zero as +0.000."""
    text = f"{seconds:+.3f}"
    return "+0.000" if text == "-0.000" else text


def rows(case: Case, interval: str, runs: list[dict[str, float]]) -> list[list[str]]:
    """Return the table's rows of one case at one interval."""
    interval_s = parse_duration(interval)
    reference = statistics.median(r["on /metrics"] for r in runs)
    out = []
    for measure in ("on /metrics", *case.writes):
        values = [r[measure] for r in runs]
        median = statistics.median(values)
        after = statistics.median(r[measure] - r["on /metrics"] for r in runs)
        label = f"(a) {measure} (reference)" if measure == "on /metrics" else f"{measure} written"
        out.append([case.name, interval, label, f"{median:.3f}", f"{max(values):.3f}",
                    f"{median / interval_s:.2f}", f"{median / reference:.2f}",
                    "—" if measure == "on /metrics" else _signed(after)])
    resolution = [r["resolution"] for r in runs]
    out.append([case.name, interval, "scraping resolution (window of the first showing)",
                f"{statistics.median(resolution):.3f}", f"{max(resolution):.3f}",
                f"{statistics.median(resolution) / interval_s:.2f}", "—", "—"])
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5, help="exporter processes per case")
    parser.add_argument("--interval", default="500ms", help="the exporters' -c (default 500ms)")
    parser.add_argument("--intervals", help="several -c values, comma-separated (500ms,2s)")
    parser.add_argument("--at", default="3s",
                        help="the earliest fault time after the simulated node's start; "
                             "it must leave the exporter time to be ready (default 3s)")
    args = parser.parse_args()
    intervals = args.intervals.split(",") if args.intervals else [args.interval]
    try:
        for interval in intervals:
            parse_duration(interval)
        at_s = parse_duration(args.at)
    except ValueError as exc:
        print(f"bench_fault_writes: {exc}", file=sys.stderr)
        return 2

    load_before = os.getloadavg()[0]
    table: list[list[str]] = []
    with tempfile.TemporaryDirectory() as tmp:
        for interval in intervals:
            for case in (XID95, XID31):
                runs = []
                for i in range(args.rounds):
                    phase = (i + 0.5) / args.rounds * parse_duration(interval)
                    try:
                        runs.append(run_round(case, interval, at_s + phase, Path(tmp)))
                    except RoundFailed as exc:
                        print(f"bench_fault_writes: {case.name}, -c {interval}, round {i + 1}: "
                              f"{exc}", file=sys.stderr)
                        return 1
                table += rows(case, interval, runs)

    header = ["case", "-c", "measure", "median s", "max s", "median polls", "x (a)",
              "median after (a) s"]
    print(f"{args.rounds} rounds per case, seconds from the fault; 1-minute load average "
          f"{load_before:.2f} before, {os.getloadavg()[0]:.2f} after")
    print("| " + " | ".join(header) + " |")
    print("|" + "|".join("---" if i < 3 else "---:" for i in range(len(header))) + "|")
    for row in table:
        print("| " + " | ".join(row) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

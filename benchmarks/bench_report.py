"""`gpu-exporter report` over a fleet's backfilled history: raw series, then recording rules.

A synthetic history (tests/report/history.py: whole GPUs, pods coming and going) is written
as OpenMetrics and backfilled with `promtool tsdb create-blocks-from openmetrics` into a real
Prometheus, with the series the usage recording rules would have recorded hour by hour
(computed from the same tenancies). The report runs over the whole range from the raw
series, then from the rules. Prints wall time, the report process's peak RSS, queries sent
and points pulled, and what one hourly evaluation of the rules costs the server.

    .venv/bin/python benchmarks/bench_report.py --nodes 16 --days 14
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from exporter.artifacts.usage_rules import RESOLUTION_S, WINDOW_S  # noqa: E402
from exporter.promql import recording_rules  # noqa: E402
from tests.report.history import backfill, fleet  # noqa: E402
from tests.support.prometheus import PrometheusProcess  # noqa: E402
from tests.support.wait import wait_until  # noqa: E402

DAY = 86400.0


def _peak_rss_report(url: str, start: float, end: float, resolution_s: float, source: str
                     ) -> dict[str, Any]:
    """Run the report as a user does: its JSON, wall time and peak RSS (MiB, from wait4)."""
    begin = time.monotonic()
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "exporter", "report", "--prometheus", url, "--start",
             f"{start}", "--end", f"{end}", "--resolution", f"{int(resolution_s)}s",
             "--timeout", "10m", "--format", "json", "--source", source,
             "--progress", "off"], cwd=ROOT, stdout=out, stderr=err, text=True)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.monotonic() - begin
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        if proc.returncode != 0:
            raise SystemExit(f"report failed ({source}):\n{err.read()}")
        document: dict[str, Any] = json.load(out)
    document["wall_s"] = wall
    document["rss_mib"] = usage.ru_maxrss / 1024
    return document


def _rule_evaluation_s(prometheus: PrometheusProcess, at: float, resolution_s: float
                       ) -> float:
    """Seconds the server takes for one evaluation of the usage rules (one hour of the
    fleet), as a ruler runs them every hour."""
    begin = time.monotonic()
    for group in recording_rules(WINDOW_S, resolution_s):
        for rule in group["rules"]:
            prometheus.query(rule["expr"], at)
    return time.monotonic() - begin


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=16)
    parser.add_argument("--gpus-per-node", type=int, default=8)
    parser.add_argument("--days", type=float, default=14.0)
    parser.add_argument("--interval", type=float, default=300.0,
                        help="seconds between samples (the scrape interval)")
    parser.add_argument("--mean-tenancy-h", type=float, default=8.0)
    parser.add_argument("--namespaces", type=int, default=20)
    args = parser.parse_args()

    end = (time.time() // DAY - 2) * DAY  # whole days, well inside the retention
    start = end - args.days * DAY
    history = fleet(args.nodes, args.gpus_per_node, start - DAY / 4, end + DAY / 4,
                    args.interval, args.mean_tenancy_h * 3600, args.namespaces)
    gpus = args.nodes * args.gpus_per_node
    with tempfile.TemporaryDirectory(prefix="bench-report-") as folder:
        tmp = Path(folder)
        begin = time.monotonic()
        tsdb = backfill(history, tmp, with_rules=True)
        backfill_s = time.monotonic() - begin
        lookback = f"--query.lookback-delta={int(args.interval * 1.5)}s"
        limits = ("--query.timeout=10m", "--query.max-samples=200000000")
        prometheus = PrometheusProcess(tmp / "prometheus", {"global": {}}, tsdb=tsdb,
                                       args=(lookback, *limits)).wait_ready()
        try:
            wait_until(lambda: prometheus.query("count(DCGM_FI_DEV_FB_USED)", end), 120.0,
                       0.5, what="blocks loaded")
            raw = _peak_rss_report(prometheus.url, start, end, args.interval, "raw")
            ruled = _peak_rss_report(prometheus.url, start, end, args.interval, "rules")
            hourly_s = _rule_evaluation_s(prometheus, end, max(RESOLUTION_S, args.interval))
        finally:
            prometheus.stop()

    samples = gpus * 3 * args.days * DAY / args.interval
    print(f"{gpus} GPUs, {args.days:g} days, a sample every {args.interval:g} s, "
          f"{len(history.tenancies)} pods in {args.namespaces} namespaces; "
          f"{samples / 1e6:.2f} M raw samples; backfill {backfill_s:.0f} s; one hourly "
          f"evaluation of the usage rules {hourly_s:.2f} s")
    print("| source | wall | report peak RSS | queries | points pulled | GPU-hours |")
    print("|---|---|---|---|---|---|")
    for name, doc in (("raw series", raw), ("recording rules", ruled)):
        print(f"| {name} | {doc['wall_s']:.1f} s | {doc['rss_mib']:.0f} MiB | "
              f"{doc['queries']} | {doc['points']} | "
              f"{doc['total']['allocated_gpu_hours']:.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())

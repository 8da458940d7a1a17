"""`gpu-exporter report` and the usage rules' ruler over a fleet's backfilled history, at
several fleet sizes, in Prometheus and VictoriaMetrics.

For each size a synthetic fleet (tests/report/history.py: whole GPUs, pods coming and going)
is stored in a real Prometheus and a real VictoriaMetrics, the same samples in both
(`report_stores.py`): the rules' series over the whole range, and the exporter's series at
the scrape interval over its last day. Then, each time beside a reference measured in the
same run:

- the report over the whole range per namespace (the namespace rules), beside the same
  report read from the per-pod rules (`--group-by node`, which has no rules of its own), and
  the same report from VictoriaMetrics;
- the report over the last day from the exporter's series (`--source raw`) beside the rules';
- the ruler's work for one hour: every rule's expression evaluated once at the end of the
  range (per-pod rules, then per-group and idle rules), beside the rules the release before
  this one recorded (`reference/usage-rules-per-step.yml`), and in VictoriaMetrics;
- each size beside the one before; and from the sizes, least squares, the 10,000-GPU figures.

    .venv/bin/python benchmarks/bench_report.py --sizes 128,256,512,1024 --days 90
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.report_stores import (  # noqa: E402
    Layout,
    Run,
    best,
    evaluation_s,
    load_prometheus,
    load_victoria,
    report,
)
from exporter.artifacts.usage_rules import RESOLUTION_S, WINDOW_S, group_rules  # noqa: E402
from exporter.promql import RULES, pod_figure, recording_rules  # noqa: E402
from tests.report.history import expected_hours, fleet  # noqa: E402
from tests.support.prometheus import QueryApi  # noqa: E402

DAY = 86400.0
REFERENCE_RULES = Path(__file__).parent / "reference" / "usage-rules-per-step.yml"
TARGET_GPUS = 10_000
RULER_REPEAT = 5
"""Evaluations of each rule; the quickest is kept (a busy machine only ever adds time)."""


@dataclass
class Size:
    gpus: int
    pods: int = 0
    samples: dict[str, float] = field(default_factory=dict)
    reports: dict[str, Run] = field(default_factory=dict)
    ruler_s: dict[str, float] = field(default_factory=dict)


def _rule_exprs() -> tuple[list[str], list[str]]:
    """Return the expressions of the per-pod rules, and of the per-group and idle rules, of the
    committed layout, markers left out."""
    pod = {f.rule for f in RULES}
    rules = recording_rules(WINDOW_S, RESOLUTION_S, group_rules(["namespace"]))[0]["rules"]
    exprs = [r for r in rules if not r["expr"].startswith("vector(")
             and "label_replace(\nvector(" not in r["expr"]]
    return ([r["expr"] for r in exprs if r["record"] in pod],
            [r["expr"] for r in exprs if r["record"] not in pod])


def _reference_exprs() -> list[str]:
    groups = yaml.safe_load(REFERENCE_RULES.read_text())["groups"]
    return [r["expr"] for g in groups for r in g["rules"] if not r["expr"].startswith("vector(")]


def _ruler(server: QueryApi, at: float, name: str, size: Size, reference: bool) -> None:
    tier1, tier2 = _rule_exprs()
    # One pass untimed first: a ruler evaluates the same rules every hour on a server whose
    # index and chunks they read are already mapped in; the first query after loading a
    # store pays for faulting them in, once.
    evaluation_s(server, tier1 + tier2, at, 1)
    size.ruler_s[f"{name} per pod"] = evaluation_s(server, tier1, at, RULER_REPEAT)
    size.ruler_s[f"{name} per group"] = evaluation_s(server, tier2, at, RULER_REPEAT)
    if reference:
        size.ruler_s[f"{name} per step"] = evaluation_s(server, _reference_exprs(), at, 1)
        # The same per-pod figures recorded every minute over that minute, 60 an hour: what
        # a per-minute rule summed hourly would cost the ruler.
        minutely = [pod_figure(f, RESOLUTION_S, RESOLUTION_S) for f in RULES]
        size.ruler_s[f"{name} per minute"] = 60 * evaluation_s(server, minutely, at)


def measure(gpus: int, args: argparse.Namespace, folder: Path) -> Size:
    end = (time.time() // DAY - 2) * DAY  # whole days, well inside the retention
    start = end - args.days * DAY
    history = fleet(gpus // 8, 8, start - DAY / 4, end, args.interval, args.mean_tenancy_h * 3600,
                    args.namespaces, profiling=True)
    layout = Layout(history, end - DAY, args.coarse_interval)
    size = Size(gpus, len(history.tenancies))
    reference = gpus <= args.reference_max_gpus
    print(f"{gpus} GPUs: {size.pods} pods", file=sys.stderr)
    day = (end - DAY, end)

    prometheus = load_prometheus(layout, folder / "p", args.interval * 1.5)
    try:
        runs = [report(prometheus.url, start, end) for _ in range(args.repeat)]
        size.reports["prometheus"] = best(runs)
        if reference:
            size.reports["per-pod rules"] = report(prometheus.url, start, end,
                                                   "--group-by", "node")
        size.reports["raw day"] = report(prometheus.url, *day, "--source", "raw",
                                         "--resolution", "1m")
        size.reports["rules day"] = report(prometheus.url, *day)
        _ruler(prometheus, end, "prometheus", size, reference)
    finally:
        prometheus.stop()
    if "victoria-metrics" in args.engines:
        victoria = load_victoria(layout, folder / "v")
        try:
            runs = [report(victoria.url, start, end) for _ in range(args.repeat)]
            size.reports["victoria-metrics"] = best(runs)
            _ruler(victoria, end, "victoria-metrics", size, False)
        finally:
            victoria.stop()
    want = sum(expected_hours(history, start, end).values())
    got = size.reports["prometheus"].document["total"]["allocated_gpu_hours"]
    if abs(got - want) > 0.01 * want:
        raise SystemExit(f"{gpus} GPUs: the rules report {got:.0f} GPU-hours, the fleet held "
                         f"{want:.0f}")
    return size


def fit(xs: list[float], ys: list[float]) -> tuple[float, float, float]:
    """Fit y = a + b x by least squares; return (a, b, the value at TARGET_GPUS)."""
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum(
        (x - mx) ** 2 for x in xs)
    a = my - b * mx
    return a, b, a + b * TARGET_GPUS


def _cell(run: Run | None) -> str:
    return "-" if run is None else f"{run.wall_s:.1f} s"


def print_tables(sizes: list[Size], args: argparse.Namespace) -> None:
    print(f"\n{args.days:g} days, a sample every {args.interval:g} s over the last day, "
          f"mean tenancy {args.mean_tenancy_h:g} h, {args.namespaces} namespaces")
    print("\n| GPUs | pods | report per namespace | x previous size | per-pod rules | "
          "VictoriaMetrics | VM / Prometheus | peak RSS | queries | points | load |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    previous: Run | None = None
    for s in sizes:
        p, v = s.reports["prometheus"], s.reports.get("victoria-metrics")
        growth = f"{p.wall_s / previous.wall_s:.2f}x" if previous else "-"
        ratio = f"{v.wall_s / p.wall_s:.2f}x" if v else "-"
        print(f"| {s.gpus:,} | {s.pods:,} | {p.wall_s:.1f} s | {growth} | "
              f"{_cell(s.reports.get('per-pod rules'))} | {_cell(v)} | {ratio} | "
              f"{p.rss_mib:.0f} MiB | {p.document['queries']} | {p.document['points']:,} | "
              f"{p.load:.1f} |")
        previous = p
    print("\n| GPUs | last day, raw series | last day, rules | raw / rules | GPU-hours raw | "
          "GPU-hours rules |")
    print("|---|---|---|---|---|---|")
    for s in sizes:
        raw, rules = s.reports["raw day"], s.reports["rules day"]
        print(f"| {s.gpus:,} | {raw.wall_s:.1f} s | {rules.wall_s:.1f} s | "
              f"{raw.wall_s / rules.wall_s:.1f}x | "
              f"{raw.document['total']['allocated_gpu_hours']:,.0f} | "
              f"{rules.document['total']['allocated_gpu_hours']:,.0f} |")
    print("\n| GPUs | ruler, per pod | per group and idle | one hour in all | x previous size "
          "| rules before (per step) | per-pod rules every minute | VictoriaMetrics, one hour |")
    print("|---|---|---|---|---|---|---|---|")
    last = None
    for s in sizes:
        r = s.ruler_s
        total = r["prometheus per pod"] + r["prometheus per group"]
        vm = (r.get("victoria-metrics per pod", 0) + r.get("victoria-metrics per group", 0))
        growth = f"{total / last:.2f}x" if last else "-"
        before, minutely = r.get("prometheus per step"), r.get("prometheus per minute")
        print(f"| {s.gpus:,} | {r['prometheus per pod']:.2f} s | "
              f"{r['prometheus per group']:.2f} s | {total:.2f} s | {growth} | "
              f"{f'{before:.1f} s ({before / total:.0f}x)' if before else '-'} | "
              f"{f'{minutely:.1f} s ({minutely / total:.0f}x)' if minutely else '-'} | "
              f"{f'{vm:.2f} s' if vm else '-'} |")
        last = total
    if len(sizes) >= 3:
        xs = [float(s.gpus) for s in sizes]
        for name, ys in (
                ("report per namespace", [s.reports["prometheus"].wall_s for s in sizes]),
                ("ruler, one hour", [s.ruler_s["prometheus per pod"]
                                     + s.ruler_s["prometheus per group"] for s in sizes])):
            a, b, at = fit(xs, ys)
            print(f"\n{name}: least squares {a:.2f} s + {b * 1000:.3f} s per 1,000 GPUs "
                  f"-> {at:.1f} s at {TARGET_GPUS:,} GPUs")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="128,256,512,1024",
                        help="fleet sizes in GPUs (8 per node), comma separated")
    parser.add_argument("--days", type=float, default=90.0)
    parser.add_argument("--interval", type=float, default=30.0,
                        help="seconds between the exporter's samples (the scrape interval)")
    parser.add_argument("--coarse-interval", type=float, default=None,
                        help="also store the exporter's series before the last day, at this "
                             "interval (seconds)")
    parser.add_argument("--mean-tenancy-h", type=float, default=8.0)
    parser.add_argument("--namespaces", type=int, default=20)
    parser.add_argument("--engines", default="prometheus,victoria-metrics")
    parser.add_argument("--repeat", type=int, default=2,
                        help="runs of each report (the quickest is kept)")
    parser.add_argument("--reference-max-gpus", type=int, default=512,
                        help="largest size at which the per-pod and per-step references run")
    parser.add_argument("--json", type=Path, help="also write every figure here")
    parser.add_argument("--tmp", type=Path, default=None, help="where the stores are written")
    args = parser.parse_args()
    sizes: list[Size] = []
    for gpus in (int(n) for n in args.sizes.split(",")):
        with tempfile.TemporaryDirectory(prefix="bench-report-", dir=args.tmp) as folder:
            sizes.append(measure(gpus, args, Path(folder)))
        if args.json is not None:  # each size kept as it is measured: a long run can stop
            args.json.write_text(json.dumps([_as_json(s) for s in sizes], indent=2))
    print_tables(sizes, args)
    if args.json is not None:
        args.json.write_text(json.dumps([_as_json(s) for s in sizes], indent=2))
    return 0


def _as_json(size: Size) -> dict[str, Any]:
    return {"gpus": size.gpus, "pods": size.pods, "ruler_s": size.ruler_s,
            "reports": {k: {"wall_s": r.wall_s, "rss_mib": r.rss_mib, "load": r.load,
                            "queries": r.document["queries"], "points": r.document["points"]}
                        for k, r in size.reports.items()},
            "cpus": os.cpu_count()}


if __name__ == "__main__":
    sys.exit(main())

"""Advisor benchmark: the packing's GPUs against the known optimum, its time and its memory,
on generated fleets of H100 holders.

Usage: .venv/bin/python benchmarks/bench_advise.py [--sizes 100,1000,10000] [--seed 1]
       [--time-limit 10]
Prints one table; nothing is asserted.

Each fleet is made from GPUs cut into random valid layouts that use all 7 compute slices
(the last GPU may hold fewer), and one holder per instance whose measured use fits exactly
that instance's profile. Compute alone then needs as many GPUs as were cut, and they
suffice: that count is the optimum. Every holder sits on a whole GPU today.

Per size, in a fresh process each (so peak RSS is that size's): the whole advice
(`exporter.advise.plan.advise`: fitting, packing, laying onto nodes) and, as the reference
measured alongside, first-fit decreasing alone on the same instances; the GPUs each gives
beside the optimum, the time of the advice as a ratio to the reference, and the peak RSS
beside a bare interpreter that imported the same modules (and scipy).
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from exporter.advise.demand import Holder  # noqa: E402
from exporter.partitions.mig_profiles import MODELS, placeable_layouts  # noqa: E402

MODEL = "NVIDIA H100 80GB HBM3"
GPUS_PER_NODE = 8


MIXES = ("random", "3g-2g")
"""`random`: any full layout; `3g-2g`: only [3g, 2g, 1g, 1g] and [3g, 2g, 2g], where
first-fit pairs the 3g instances (filling a GPU's memory with 6 compute slices)."""


def fleet(holders: int, seed: int, mix: str = "random") -> tuple[list[Holder], int]:
    """Holders whose fits fill GPUs cut into full layouts, and the number of GPUs cut."""
    model = MODELS[MODEL]
    full = [names for names in placeable_layouts(model)
            if not any("+me" in n for n in names)
            and sum(model.profile(n).compute_slices for n in names) == model.compute_slices]
    if mix == "3g-2g":
        full = [names for names in full if sorted(names) in (
            ["1g.10gb", "1g.10gb", "2g.20gb", "3g.40gb"], ["2g.20gb", "2g.20gb", "3g.40gb"])]
    rng = random.Random(seed)
    shares = sorted({p.compute_slices for p in model.profiles})
    out: list[Holder] = []
    gpus = 0
    while len(out) < holders:
        layout = rng.choice(full)
        gpus += 1
        for name in layout:
            if len(out) == holders:
                break
            profile = model.profile(name)
            share = profile.compute_slices / model.compute_slices
            below = max((s for s in shares if s < profile.compute_slices), default=0)
            low = below / model.compute_slices
            compute = low + (share - low) * rng.uniform(0.1, 0.95)
            i = len(out)
            out.append(Holder(f"ns-{i % 40}", f"pod-{i:05d}", f"node-{i // GPUS_PER_NODE:04d}",
                              MODEL, f"GPU-{i:05d}", "", "whole", 2016, 168.0,
                              profile.memory_mib / 1.1 * 0.9, compute, "profiling"))
    return out, gpus


def measure(holders: int, seed: int, time_limit_s: float, mix: str) -> dict[str, object]:
    """Run in a child: one size, and its peak RSS."""
    from collections import Counter

    import scipy.optimize  # noqa: F401  (the bare figure below has it loaded too)

    from exporter.advise.fitting import FitSettings, fit
    from exporter.advise.packing import first_fit
    from exporter.advise.plan import advise

    settings = FitSettings()
    rows, optimum = fleet(holders, seed, mix)
    baseline_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    started = time.perf_counter()
    advice = advise(rows, settings, 0.0, 7 * 86400.0, time_limit_s=time_limit_s)
    advise_s = time.perf_counter() - started
    demand = Counter(str(f.advice) for f in (fit(h, settings) for h in rows))
    whole = demand.pop("whole", 0)  # the 7g layouts: a whole GPU each, either way
    started = time.perf_counter()
    heuristic = first_fit(MODELS[MODEL], dict(demand))
    first_fit_s = time.perf_counter() - started
    pool = advice.pools[0]
    assert pool.packing is not None
    return {"mix": mix, "holders": holders, "optimum": optimum, "advised": pool.gpus_needed,
            "optimal": float(pool.packing.optimal), "first_fit": heuristic.gpus + whole,
            "advise_s": advise_s, "first_fit_s": first_fit_s,
            "rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "bare_mib": baseline_kib / 1024}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="100,1000,10000")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--time-limit", type=float, default=10.0)
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--mix", choices=MIXES, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        print(json.dumps(measure(args.child, args.seed, args.time_limit, args.mix)))
        return 0
    print("| fleet | holders | optimum GPUs | advised GPUs | off optimum | first-fit GPUs (off) "
          "| advice s | first-fit s (reference) | ratio | peak RSS MiB (bare) |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for mix, size in ((m, int(s)) for m in MIXES for s in args.sizes.split(",")):
        child = subprocess.run([sys.executable, __file__, "--child", str(size), "--seed",
                                str(args.seed), "--time-limit", str(args.time_limit),
                                "--mix", mix],
                               capture_output=True, text=True, check=True, cwd=ROOT)
        r = json.loads(child.stdout.strip().splitlines()[-1])
        off = r["advised"] / r["optimum"] - 1
        ff_off = r["first_fit"] / r["optimum"] - 1
        print(f"| {r['mix']} | {r['holders']:,} | {r['optimum']:,} | {r['advised']:,} | {off:.1%} "
              f"| {r['first_fit']:,} ({ff_off:+.1%}) | {r['advise_s']:.3f} "
              f"| {r['first_fit_s']:.3f} | {r['advise_s'] / max(r['first_fit_s'], 1e-9):.1f} "
              f"| {r['rss_mib']:.0f} ({r['bare_mib']:.0f}) |")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""MIG instances packed into as few GPUs as can be found, in placement-valid layouts.

The exact method is a configuration (pattern) integer program: one integer variable per
maximal valid layout of the model over the profiles asked for (a few dozen: the layouts are
enumerated by `exporter.partitions.mig_profiles`), counting GPUs cut that way; each profile's
instances must cover its demand; the objective is the number of GPUs. Its size depends on the
model, not on the fleet, so HiGHS (`scipy.optimize.milp`) proves the optimum for any pool in
well under a second. Under a time limit it may stop first: then the better of its incumbent
and first-fit decreasing is kept, and the gap to the best lower bound is reported.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache

from exporter.partitions.mig_profiles import GpuModel, place, placeable_layouts

Layout = tuple[str, ...]
"""One GPU's instances: profile names, largest first."""


@dataclass(frozen=True, slots=True)
class Packing:
    """The GPUs one pool's MIG instances are packed into, one layout per GPU, with the lower
    bound on the GPUs needed and whether the count is proven optimal."""

    layouts: tuple[Layout, ...]
    """One entry per GPU."""
    bound: int
    """No packing needs fewer GPUs."""
    optimal: bool
    method: str
    """`ilp` or `first-fit`."""

    @property
    def gpus(self) -> int:
        """Return the number of GPUs the packing uses."""
        return len(self.layouts)

    @property
    def gap(self) -> float:
        """Return the GPUs used beyond the lower bound as a fraction of the bound (0 when the
        packing is proven optimal)."""
        return 0.0 if self.optimal or not self.bound else (self.gpus - self.bound) / self.bound


def _ordered(model: GpuModel, names: Sequence[str]) -> Layout:
    """Return the profile names ordered largest first, the order in which instances are created,
    then by name so the order is stable."""
    return tuple(sorted(names, key=lambda n: (-model.profile(n).memory_slices,
                                              -model.profile(n).compute_slices, n)))


def lower_bound(model: GpuModel, demand: Mapping[str, int]) -> int:
    """Return the fewest GPUs `demand` could fit in, counting compute slices alone and memory
    slices alone; no packing needs fewer."""
    compute = sum(model.profile(n).compute_slices * k for n, k in demand.items())
    memory = sum(model.profile(n).memory_slices * k for n, k in demand.items())
    return max(math.ceil(compute / model.compute_slices), math.ceil(memory / model.memory_slices))


def maximal_layouts(model: GpuModel, profiles: frozenset[str]) -> list[Layout]:
    """Return the model's valid layouts made only of `profiles` to which no further instance of
    them can be added: the ways of cutting a GPU the integer program chooses between."""
    within = [names for names in placeable_layouts(model) if set(names) <= profiles]
    counts = [(Counter(names), names) for names in within]  # each multiset once already
    maximal = []
    for counter, names in counts:
        if not any(other != counter and all(other[n] >= k for n, k in counter.items())
                   for other, _ in counts):
            maximal.append(names)
    return sorted(maximal)


def pack(model: GpuModel, demand: Mapping[str, int], time_limit_s: float = 10.0) -> Packing:
    """Return the fewest GPUs found for `demand` (profile -> instances)."""
    wanted = {name: count for name, count in sorted(demand.items()) if count > 0}
    bound = lower_bound(model, wanted)
    if not wanted:
        return Packing((), 0, True, "ilp")
    heuristic = first_fit(model, wanted)
    if heuristic.gpus == bound:
        return Packing(heuristic.layouts, bound, True, heuristic.method)
    exact = _ilp(model, wanted, bound, time_limit_s)
    if exact is not None and (exact.optimal or exact.gpus <= heuristic.gpus):
        return exact
    best_bound = max(bound, exact.bound if exact is not None else 0)
    return Packing(heuristic.layouts, best_bound, heuristic.gpus == best_bound,
                   heuristic.method)


def _ilp(model: GpuModel, wanted: Mapping[str, int], bound: int,
         time_limit_s: float) -> Packing | None:
    import numpy as np
    from scipy.optimize import Bounds, LinearConstraint, milp

    patterns = maximal_layouts(model, frozenset(wanted))
    names = list(wanted)
    supply = np.array([[pattern.count(n) for pattern in patterns] for n in names], dtype=float)
    needed = np.array([wanted[n] for n in names], dtype=float)
    result = milp(np.ones(len(patterns)), integrality=np.ones(len(patterns), dtype=np.int64),
                  bounds=Bounds(0, np.inf),
                  constraints=LinearConstraint(supply, lb=needed, ub=np.inf),
                  options={"time_limit": time_limit_s, "disp": False, "presolve": True})
    if result.x is None:
        return None
    counts = [round(v) for v in result.x]
    layouts = _trimmed(model, [pattern for pattern, k in zip(patterns, counts, strict=True)
                               for _ in range(k)], wanted)
    dual = getattr(result, "mip_dual_bound", None)
    proven = bound
    if dual is not None and math.isfinite(dual):
        proven = max(bound, math.ceil(dual - 1e-6))
    optimal = result.status == 0 or len(layouts) <= proven
    return Packing(layouts, len(layouts) if optimal else proven, optimal, "ilp")


def _trimmed(model: GpuModel, layouts: Sequence[Layout],
             wanted: Mapping[str, int]) -> tuple[Layout, ...]:
    """Return the layouts with the instances beyond the demand removed (taken from the last GPUs
    first, since a subset of a valid layout is valid) and the GPUs left empty dropped, in a
    stable order."""
    surplus = Counter(n for layout in layouts for n in layout)
    surplus.subtract(wanted)
    out: list[Layout] = []
    for layout in sorted(layouts, key=lambda names: (len(names), names)):
        kept = []
        for name in layout:
            if surplus[name] > 0:
                surplus[name] -= 1
            else:
                kept.append(name)
        if kept:
            out.append(_ordered(model, kept))
    return tuple(sorted(out, key=_gpu_order(model)))


def _gpu_order(model: GpuModel) -> Callable[[Layout], tuple[int, Layout]]:
    """Return the sort key that puts the fullest GPUs first, then orders by layout."""
    def key(layout: Layout) -> tuple[int, Layout]:
        return (-sum(model.profile(n).compute_slices for n in layout), layout)
    return key


@cache
def _fits(model: GpuModel, layout: Layout, name: str) -> bool:
    return place(model, (*layout, name)) is not None


def first_fit(model: GpuModel, wanted: Mapping[str, int]) -> Packing:
    """Return the packing first-fit decreasing finds: each instance, largest first, goes onto the
    first GPU it fits on. GPUs with the same layout are interchangeable, so each step looks at
    the distinct open layouts only (at most the model's valid layouts, whatever the fleet)."""
    items = sorted((n for n, k in wanted.items() for _ in range(k)),
                   key=lambda n: (-model.profile(n).compute_slices,
                                  -model.profile(n).memory_slices, n))
    gpus: list[list[str]] = []
    open_by_layout: dict[Layout, list[int]] = {}
    for name in items:
        choices = [(ids[0], layout) for layout, ids in open_by_layout.items()
                   if ids and _fits(model, layout, name)]
        if choices:
            index, layout = min(choices)
            open_by_layout[layout].pop(0)
        else:
            index, layout = len(gpus), ()
            gpus.append([])
        gpus[index].append(name)
        grown = tuple(sorted(gpus[index]))
        ids = open_by_layout.setdefault(grown, [])
        ids.append(index)
        ids.sort()
    layouts = tuple(sorted((_ordered(model, g) for g in gpus), key=_gpu_order(model)))
    bound = lower_bound(model, wanted)
    return Packing(layouts, bound, len(layouts) == bound, "first-fit")

"""From each holder's fit to each pool's GPUs and each node's layout.

A pool is one GPU model. On a MIG-capable model the instances advised (and those of holders
not advised, which keep what they hold) are packed (`exporter.advise.packing`); GPUs advised
whole are added. On a model without MIG one replica count is chosen for the pool, the one
needing fewest GPUs: holders whose use fits 1/R of a GPU share, the others get whole GPUs.
The GPUs are then laid onto the pool's nodes in name order, sharing GPUs first (time-slicing
is node-wide), so each node gets one layout and the nodes left over are freed.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from exporter.advise.demand import SHARED, TIME_SLICING, WHOLE, Holder
from exporter.advise.fitting import Fit, FitSettings, fit
from exporter.advise.packing import Layout, Packing, pack
from exporter.partitions.mig_profiles import GpuModel, find_model

HOURS_PER_MONTH = 730.5
"""365.25 days of 24 hours over 12 months."""
FREE = "free"
MIG = "mig"


@dataclass(frozen=True, slots=True)
class GpuPlan:
    """One GPU as advised: `whole`, `mig` (with its instances), `time-slicing` (with its
    replicas) or `free`."""

    kind: str
    instances: Layout = ()
    replicas: int = 0


@dataclass(frozen=True, slots=True)
class NodePlan:
    """One node's GPUs as held today and as advised, with the names of the mig-parted and
    device-plugin configs that apply the advice to it."""

    node: str
    now: tuple[tuple[str, tuple[str, ...]], ...]
    """Each GPU seen held on the node: (UUID, what is on it: MIG profiles, or `whole`,
    `shared`)."""
    gpu_count: int
    advised: tuple[GpuPlan, ...]
    mig_config: str = ""
    """Name of its mig-parted config; "" when the pool has no MIG."""
    sharing_config: str = ""
    """Name of its device-plugin config; "" when it does not share."""


@dataclass(frozen=True, slots=True)
class PoolPlan:
    """The advice for one pool, all the GPUs of one model: the GPUs it holds and needs, how its
    MIG instances were packed or how many ways its GPUs are shared, each node's plan, and the
    price of a GPU-hour."""

    gpu_model: str
    model: GpuModel | None
    gpus_now: int
    gpus_needed: int
    packing: Packing | None
    replicas: int
    """Time-sliced replicas per GPU; 0: no sharing advised."""
    nodes: tuple[NodePlan, ...]
    price_per_hour: float | None = None

    @property
    def gpus_freed(self) -> int:
        """Return the GPUs the pool would no longer need under the advice."""
        return self.gpus_now - self.gpus_needed

    @property
    def money_per_month(self) -> float | None:
        """Return what the pool's freed GPUs cost per month at its price per GPU-hour, or None
        when no price is known."""
        if self.price_per_hour is None:
            return None
        return self.gpus_freed * self.price_per_hour * HOURS_PER_MONTH


@dataclass(frozen=True, slots=True)
class Advice:
    """The whole advice over one window: every holder's fit, every pool's plan, and notes for the
    reader."""

    start: float
    end: float
    fits: tuple[Fit, ...]
    pools: tuple[PoolPlan, ...]
    notes: tuple[str, ...] = ()

    @property
    def gpus_now(self) -> int:
        """Return the GPUs held now across all pools."""
        return sum(p.gpus_now for p in self.pools)

    @property
    def gpus_needed(self) -> int:
        """Return the GPUs all pools need under the advice."""
        return sum(p.gpus_needed for p in self.pools)

    @property
    def money_per_month(self) -> float | None:
        """Return what the freed GPUs of the known pools cost per month, or None when any of them
        has no price, since a partial total would understate the saving."""
        figures = [p.money_per_month for p in self.pools if p.model is not None]
        return None if not figures or any(f is None for f in figures) else \
            sum(f or 0.0 for f in figures)


def advise(holders: Iterable[Holder], settings: FitSettings, start: float, end: float,
           gpu_counts: Mapping[str, int] | None = None, prices: Mapping[str, float | None]
           | None = None, time_limit_s: float = 10.0, notes: Sequence[str] = ()) -> Advice:
    """Return the whole advice for `holders`: each one's fit, then each GPU model's pool packed
    or shared and laid onto its nodes. `gpu_counts` gives the GPUs on each node (else the GPUs
    seen held are counted); `prices` gives the price of a GPU-hour for each model."""
    fits = [fit(h, settings) for h in sorted(holders)]
    by_pool: dict[str, list[Fit]] = defaultdict(list)
    for f in fits:
        by_pool[f.holder.gpu_model].append(f)
    pools: list[PoolPlan] = []
    final: list[Fit] = []
    for gpu_model in sorted(by_pool):
        pool_fits = by_pool[gpu_model]
        model = find_model(gpu_model)
        if model is None:
            final += pool_fits
            pools.append(PoolPlan(gpu_model, None, _gpus_now(pool_fits), _gpus_now(pool_fits),
                                  None, 0, ()))
            continue
        pool, chosen = _plan_pool(model, gpu_model, pool_fits, gpu_counts or {},
                                  settings, time_limit_s)
        final += chosen
        price = (prices or {}).get(gpu_model)
        pools.append(replace(pool, price_per_hour=price))
    return Advice(start, end, tuple(sorted(final, key=lambda f: f.holder)), tuple(pools),
                  tuple(notes))


def _gpus_now(fits: Sequence[Fit]) -> int:
    return len({f.holder.uuid for f in fits})


def _kept_shared_devices(fits: Sequence[Fit]) -> int:
    """Return the number of devices shared now by holders that are not advised; those devices
    stay as they are."""
    return len({f.holder.device for f in fits if not f.advised and f.holder.now == SHARED})


def _whole_gpus(fits: Sequence[Fit]) -> int:
    """Return the GPUs given whole: those advised whole, plus those kept by holders that are not
    advised (their whole GPUs and the devices they share now)."""
    kept = sum(1 for f in fits if not f.advised and f.holder.now == WHOLE)
    return sum(1 for f in fits if f.advice == WHOLE) + kept + _kept_shared_devices(fits)


def _plan_pool(model: GpuModel, gpu_model: str, fits: list[Fit], counts: Mapping[str, int],
               settings: FitSettings, time_limit_s: float) -> tuple[PoolPlan, list[Fit]]:
    packing: Packing | None = None
    replicas = 0
    if model.mig_capable:
        demand = Counter(f.advice for f in fits if f.advised and f.advice != WHOLE)
        demand.update(f.holder.now for f in fits
                      if not f.advised and f.holder.now not in (WHOLE, SHARED))
        packing = pack(model, {str(k): v for k, v in demand.items()}, time_limit_s)
        plans = [GpuPlan(MIG, layout) for layout in packing.layouts]
    else:
        replicas, fits = _choose_replicas(fits, settings)
        sharers = sum(1 for f in fits if f.advice == TIME_SLICING)
        plans = [GpuPlan(TIME_SLICING, replicas=replicas)] * (
            math.ceil(sharers / replicas) if replicas else 0)
    plans += [GpuPlan(WHOLE)] * _whole_gpus(fits)
    nodes = _lay_onto_nodes(model, fits, plans, counts)
    return PoolPlan(gpu_model, model, _gpus_now(fits), len(plans), packing, replicas,
                    nodes), fits


def _choose_replicas(fits: list[Fit], settings: FitSettings) -> tuple[int, list[Fit]]:
    """Return the replica count that needs the fewest GPUs (the smaller on a tie, 0 when sharing
    frees none), with the fits settled for it: time-slicing where a holder's use fits 1/R of a
    GPU, whole otherwise."""
    advised = [f for f in fits if f.advised]
    best, best_gpus = 1, len(advised)
    for replicas in range(2, settings.max_replicas + 1):
        sharing = sum(1 for f in advised if f.advice == TIME_SLICING and f.max_replicas >= replicas)
        gpus = math.ceil(sharing / replicas) + len(advised) - sharing
        if gpus < best_gpus:
            best, best_gpus = replicas, gpus
    settled = []
    for f in fits:
        if f.advice == TIME_SLICING and (best < 2 or f.max_replicas < best):
            f = replace(f, advice=WHOLE, reason=f"{f.reason}; the pool shares {best} ways"
                        if best >= 2 else f"{f.reason}; sharing frees no GPU here")
        elif f.advice == TIME_SLICING:
            f = replace(f, reason=f"{f.reason}; the pool shares {best} ways")
        settled.append(f)
    return (best if best >= 2 else 0), settled


def _now_by_node(fits: Sequence[Fit]) -> dict[str, dict[str, list[str]]]:
    seen: dict[str, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
    for f in fits:
        h = f.holder
        held = seen[h.node][h.uuid]
        if h.now in (WHOLE, SHARED):
            if h.now not in held:
                held.append(h.now)
        else:
            held.append(h.now)
    return seen


def _lay_onto_nodes(model: GpuModel, fits: Sequence[Fit], plans: list[GpuPlan],
                    counts: Mapping[str, int]) -> tuple[NodePlan, ...]:
    """Return each node's plan, nodes in name order, with the advised GPUs laid onto them.
    Time-slicing is node-wide (the device plugin shares every GPU of a labelled node), so sharing
    GPUs are placed first, then whole GPUs on nodes with no sharing GPU while they have room, and
    only then on a sharing node's spare GPUs, where they would be shared."""
    seen = _now_by_node(fits)
    names = sorted(seen)
    capacity = {node: max(counts.get(node, 0), len(seen[node])) for node in names}
    placed: dict[str, list[GpuPlan]] = {node: [] for node in names}
    shared = [g for g in plans if g.kind == TIME_SLICING]
    others = [g for g in plans if g.kind != TIME_SLICING]
    for node in names:
        while shared and len(placed[node]) < capacity[node]:
            placed[node].append(shared.pop(0))
    sharing_nodes = {node for node in names if placed[node]}
    for pass_nodes in ([n for n in names if n not in sharing_nodes],
                       [n for n in names if n in sharing_nodes]):
        for node in pass_nodes:
            while others and len(placed[node]) < capacity[node]:
                placed[node].append(others.pop(0))
    out = [NodePlan(node, tuple((uuid, tuple(sorted(held)))
                                for uuid, held in sorted(seen[node].items())), capacity[node],
                    tuple(placed[node]) + (GpuPlan(FREE),) * (capacity[node] - len(placed[node])))
           for node in names]
    queue = shared + others
    if queue:  # more GPUs advised than the pool's nodes hold
        out.append(NodePlan("(more GPUs)", (), len(queue), tuple(queue)))
    return tuple(_name_configs(model, out))


def _name_configs(model: GpuModel, nodes: list[NodePlan]) -> list[NodePlan]:
    """Return the nodes with their config names set: one mig-parted config per distinct node
    layout on a MIG model, one device-plugin config per replica count on nodes that share."""
    names: dict[tuple[GpuPlan, ...], str] = {}
    out = []
    for node in nodes:
        mig_config = ""
        if model.mig_capable:
            if all(g.kind in (WHOLE, FREE) for g in node.advised):
                mig_config = "all-disabled"
            else:
                mig_config = names.setdefault(node.advised,
                                              f"{model.key}-advised-{len(names) + 1}")
        sharing = next((g.replicas for g in node.advised if g.kind == TIME_SLICING), 0)
        out.append(replace(node, mig_config=mig_config,
                           sharing_config=f"time-slicing-{sharing}" if sharing else ""))
    return out

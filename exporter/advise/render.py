"""The advice as a terminal table and as JSON: the same figures, in a fixed order, so the same
history gives the same bytes."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from exporter.advise.demand import TIME_SLICING, WHOLE
from exporter.advise.fitting import Fit
from exporter.advise.plan import MIG, Advice, GpuPlan, NodePlan, PoolPlan
from exporter.partitions.mig_profiles import find_model

GPU_RESOURCE = "nvidia.com/gpu"


def utc(ts: float) -> str:
    """Return the Unix time `ts` as an ISO 8601 UTC timestamp to the second, as the advice prints
    its window."""
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def resource(f: Fit) -> str:
    """Return the extended resource the pod should ask for under its advice: the MIG profile's
    mixed-strategy resource name, else `nvidia.com/gpu`."""
    model = find_model(f.holder.gpu_model)
    if f.advice is None or f.advice in (WHOLE, TIME_SLICING) or model is None:
        return GPU_RESOURCE
    return model.profile(f.advice).resource_name


def listed(advice: Advice, everyone: bool) -> list[Fit]:
    """Return the holders to list: those whose advice changes what they hold, or every advised
    holder with `everyone`."""
    return [f for f in advice.fits if f.advised and (everyone or not f.unchanged)]


def unchanged_count(advice: Advice) -> int:
    """Return how many advised holders already hold what they are advised, the ones left out of
    the listing unless `everyone` is asked for."""
    return sum(1 for f in advice.fits if f.advised and f.unchanged)


def gpu_text(gpu: GpuPlan) -> str:
    """Return one advised GPU in words for the table: its MIG instances joined by `+`,
    `shared xR` for time-slicing, else its kind."""
    if gpu.kind == MIG:
        return "+".join(gpu.instances)
    if gpu.kind == TIME_SLICING:
        return f"shared x{gpu.replicas}"
    return gpu.kind


def mig_label_line(node: NodePlan) -> str:
    """Return the `kubectl label` command that selects the node's advised mig-parted config."""
    return f"kubectl label node {node.node} nvidia.com/mig.config={node.mig_config} --overwrite"


def sharing_label_line(node: NodePlan) -> str:
    """Return the `kubectl label` command that selects the node's advised device-plugin config."""
    return (f"kubectl label node {node.node} nvidia.com/device-plugin.config="
            f"{node.sharing_config} --overwrite")


def real_nodes(pool: PoolPlan) -> list[NodePlan]:
    """Return the pool's nodes without the placeholder entry that holds the GPUs advised beyond
    what the nodes have."""
    return [n for n in pool.nodes if not n.node.startswith("(")]


def _money(value: float | None) -> Any:
    return None if value is None else round(value, 2)


def _workload(f: Fit) -> dict[str, Any]:
    h = f.holder
    return {
        "namespace": h.namespace, "pod": h.pod, "node": h.node, "gpu_model": h.gpu_model,
        "uuid": h.uuid, "gpu_instance": h.gpu_instance, "now": h.now, "advice": f.advice,
        "resource": resource(f), "peak_framebuffer_mib": round(h.peak_framebuffer_mib),
        "need_mib": round(f.need_mib),
        "compute_need": None if h.compute_need is None else round(h.compute_need, 4),
        "activity_source": h.activity_source, "samples": h.samples,
        "hours": round(h.hours, 3), "sharers": h.sharers, "reason": f.reason,
    }


def _pool(pool: PoolPlan) -> dict[str, Any]:
    packing = pool.packing
    return {
        "gpu_model": pool.gpu_model, "known": pool.model is not None,
        "gpus_now": pool.gpus_now, "gpus_needed": pool.gpus_needed,
        "gpus_freed": pool.gpus_freed, "price_per_gpu_hour": pool.price_per_hour,
        "money_per_month": _money(pool.money_per_month),
        "time_slicing_replicas": pool.replicas,
        "packing": None if packing is None else {
            "method": packing.method, "optimal": packing.optimal, "bound": packing.bound,
            "gap": round(packing.gap, 4), "mig_gpus": packing.gpus},
        "nodes": [{"node": n.node, "gpus": n.gpu_count, "mig_config": n.mig_config or None,
                   "sharing_config": n.sharing_config or None,
                   "now": [{"uuid": u, "holds": list(held)} for u, held in n.now],
                   "advised": [{"kind": g.kind, "instances": list(g.instances),
                                "replicas": g.replicas} for g in n.advised]}
                  for n in pool.nodes],
    }


def as_json(advice: Advice, everyone: bool) -> dict[str, Any]:
    """Return the advice as a dict ready for JSON: window, summary, pools, listed holders,
    holders not advised and notes, in a fixed order so the same history gives the same bytes."""
    not_advised = [f for f in advice.fits if not f.advised]
    return {
        "window": {"start": utc(advice.start), "end": utc(advice.end)},
        "summary": {
            "gpus_now": advice.gpus_now, "gpus_needed": advice.gpus_needed,
            "gpus_freed": advice.gpus_now - advice.gpus_needed,
            "money_per_month": _money(advice.money_per_month),
            "holders": len(advice.fits), "unchanged": unchanged_count(advice),
            "not_advised": len(not_advised)},
        "pools": [_pool(p) for p in advice.pools],
        "workloads": [_workload(f) for f in listed(advice, everyone)],
        "not_advised": [{"namespace": f.holder.namespace, "pod": f.holder.pod,
                         "node": f.holder.node, "gpu_model": f.holder.gpu_model,
                         "now": f.holder.now, "reason": f.reason} for f in not_advised],
        "notes": list(advice.notes),
    }


def json_text(advice: Advice, everyone: bool = False) -> str:
    """Return the advice as indented JSON text ending in a newline."""
    return json.dumps(as_json(advice, everyone), indent=2) + "\n"


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    widths = [max(len(c) for c in column) for column in zip(header, *rows, strict=True)]
    line = "  ".join
    return [line(c.ljust(w) for c, w in zip(header, widths, strict=True)).rstrip(),
            *(line(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows)]


def table_text(advice: Advice, everyone: bool = False) -> str:
    """Return the advice as a terminal report: each pool's totals, each node's advised layout
    with its `kubectl label` lines, the holders listed, and those not advised with why."""
    freed = advice.gpus_now - advice.gpus_needed
    money = advice.money_per_month
    out = [f"GPU partition advice, {utc(advice.start)} to {utc(advice.end)}",
           f"GPUs held now {advice.gpus_now}, needed {advice.gpus_needed}, freed {freed}"
           + (f", {money:,.2f} per month" if money is not None else ""), ""]
    pool_rows = []
    for p in advice.pools:
        how = "model not in the MIG table" if p.model is None else (
            f"time-slicing x{p.replicas}" if p.replicas else
            "" if p.packing is None else
            f"{p.packing.method}, {'optimal' if p.packing.optimal else f'gap {p.packing.gap:.1%}'}")
        pool_rows.append([p.gpu_model, str(p.gpus_now), str(p.gpus_needed), str(p.gpus_freed),
                          "" if p.money_per_month is None else f"{p.money_per_month:,.2f}", how])
    out += _table(["GPU model", "now", "needed", "freed", "per month", "how"], pool_rows)
    for p in advice.pools:
        nodes = real_nodes(p)
        if not nodes or p.model is None:
            continue
        out += ["", f"{p.gpu_model}: layout per node"]
        out += _table(["node", "GPUs advised", "config"],
                      [[n.node, ", ".join(gpu_text(g) for g in n.advised),
                        n.mig_config or n.sharing_config or "-"] for n in p.nodes])
        for n in nodes:
            if n.mig_config:
                out.append("  " + mig_label_line(n))
            if n.sharing_config:
                out.append("  " + sharing_label_line(n))
    shown = listed(advice, everyone)
    out += ["", f"Holders: {len(shown)} listed, {unchanged_count(advice)} unchanged"
            + ("" if everyone else " (not listed; --all lists them)")]
    if shown:
        out += _table(
            ["namespace/pod", "node", "now", "advice", "resource", "peak MiB", "compute"],
            [[f"{f.holder.namespace}/{f.holder.pod}", f.holder.node, f.holder.now,
              f.advice or "", resource(f), f"{f.holder.peak_framebuffer_mib:,.0f}",
              "" if f.holder.compute_need is None else f"{f.holder.compute_need:.0%}"]
             for f in shown])
    skipped = [f for f in advice.fits if not f.advised]
    if skipped:
        out += ["", f"Not advised: {len(skipped)}"]
        out += [f"  {f.holder.namespace}/{f.holder.pod} on {f.holder.node}: {f.reason}"
                for f in skipped]
    out += [f"note: {n}" for n in advice.notes]
    return "\n".join(out) + "\n"


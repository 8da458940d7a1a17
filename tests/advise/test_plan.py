"""A pool's replica count and node layouts, worked out by hand (L4: 23,034 MiB)."""

from __future__ import annotations

from exporter.advise.fitting import FitSettings
from exporter.advise.plan import advise
from tests.advise.fleet import holder

L4 = "NVIDIA L4"


def test_replicas_are_chosen_for_fewest_gpus_and_whole_gpus_avoid_sharing_nodes() -> None:
    holders = [
        # 4,000 MiB + 10 % = 4,400: 5 by memory, 15 %: 6 by compute -> up to 5 replicas.
        *(holder(p, 4_000, 0.15, model=L4, node="l4-a") for p in ("a", "b", "c")),
        # 9,900 MiB: 2 by memory -> up to 2.
        holder("d", 9_000, 0.30, model=L4, node="l4-b"),
        # 16,500 MiB: does not share.
        holder("e", 15_000, 0.30, model=L4, node="l4-b"),
    ]
    # R = 2: a-d share (2 GPUs) + e = 3; R = 3..5: a-c share (1) + d + e = 3; the tie goes
    # to the smaller count.
    advice = advise(holders, FitSettings(), 0.0, 86400.0, {"l4-a": 3, "l4-b": 2},
                    {L4: 1.0})
    pool = advice.pools[0]
    assert (pool.replicas, pool.gpus_now, pool.gpus_needed, pool.gpus_freed) == (2, 5, 3, 2)
    assert {f.holder.pod: f.advice for f in advice.fits} == {
        "a": "time-slicing", "b": "time-slicing", "c": "time-slicing", "d": "time-slicing",
        "e": "whole"}
    nodes = {n.node: n for n in pool.nodes}
    assert [g.kind for g in nodes["l4-a"].advised] == ["time-slicing", "time-slicing", "free"]
    assert [g.kind for g in nodes["l4-b"].advised] == ["whole", "free"]  # not on l4-a
    assert (nodes["l4-a"].sharing_config, nodes["l4-b"].sharing_config) == (
        "time-slicing-2", "")
    assert pool.money_per_month == 2 * 1.0 * 730.5


def test_sharing_that_frees_nothing_is_not_advised() -> None:
    # One small holder alone: sharing its GPU with nobody frees nothing.
    advice = advise([holder("a", 4_000, 0.15, model=L4)], FitSettings(), 0.0, 86400.0)
    assert advice.fits[0].advice == "whole"
    assert advice.pools[0].replicas == 0
    assert advice.pools[0].gpus_freed == 0

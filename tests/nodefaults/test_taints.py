"""The opt-in taint and its circuit breaker, against the fake API server."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from exporter.nodefaults.writer import NodeFaultWriter
from tests.nodefaults.writer_helpers import FELL_OFF, NODE, PAGE_FAULT, snapshot, writer
from tests.support.apiserver import FakeApiServer
from tests.support.apiserver_nodes import node
from tests.support.wait import wait_until

GPU = {"nvidia.com/gpu.present": "true"}
OURS = {"key": "gpu-exporter/gpu-fault", "value": "RESTART_BM", "effect": "NoSchedule"}
OTHER = {"key": "dedicated", "value": "ml", "effect": "NoSchedule"}


@pytest.fixture
def w(kubeconfig: str) -> Iterator[NodeFaultWriter]:
    made = writer(kubeconfig, node_condition=True, taint=True)
    made.restore_to(lambda _: None)
    made.start()
    yield made
    made.close()


def _taints(api: FakeApiServer, name: str = NODE) -> list[dict[str, Any]]:
    return list(api.state.store.nodes[name].get("spec", {}).get("taints") or [])


def _condition_status(api: FakeApiServer) -> str | None:
    for c in api.state.store.nodes[NODE]["status"]["conditions"]:
        if c["type"] == "GPUHardwareReady":
            return str(c["status"])
    return None


def _cluster(api: FakeApiServer, tainted_others: int, others: int) -> None:
    """This node, `others` more GPU nodes of which `tainted_others` carry the taint, and two
    CPU nodes carrying it (never counted)."""
    api.state.store.add(node(NODE, GPU, taints=[OTHER]))
    for i in range(others):
        api.state.store.add(node(f"gpu-{i}", GPU, taints=[OURS] if i < tainted_others else []))
    for i in range(2):
        api.state.store.add(node(f"cpu-{i}", {}, taints=[OURS]))


def test_taint_while_a_reboot_fault_is_held_other_taints_kept_then_removed(
        api: FakeApiServer, w: NodeFaultWriter) -> None:
    _cluster(api, tainted_others=0, others=3)
    w.offer(snapshot((FELL_OFF,)))
    wait_until(lambda: OURS in _taints(api), what="taint added")
    assert _taints(api) == [OTHER, OURS]
    w.offer(snapshot((), taken_at=1796648500.0))
    wait_until(lambda: OURS not in _taints(api), what="taint removed")
    assert _taints(api) == [OTHER]
    assert w.counts[("taint", "success")] == 2


def test_a_fault_cleared_by_holder_exit_never_taints(
        api: FakeApiServer, w: NodeFaultWriter) -> None:
    _cluster(api, tainted_others=0, others=1)
    w.offer(snapshot((PAGE_FAULT,)))
    wait_until(lambda: _condition_status(api) == "True", what="condition written")
    wait_until(w.idle.is_set, what="writer idle")
    assert _taints(api) == [OTHER]
    assert w.counts[("taint", "success")] == 0


def test_breaker_holds_at_its_threshold_and_the_condition_still_goes_on(
        api: FakeApiServer, w: NodeFaultWriter) -> None:
    _cluster(api, tainted_others=2, others=3)  # 2 of 4 GPU nodes: at half
    w.offer(snapshot((FELL_OFF,)))
    wait_until(lambda: _condition_status(api) == "False", what="condition False")
    wait_until(lambda: w.counts[("taint", "held_back")] >= 1, what="taint held back")
    assert _taints(api) == [OTHER]
    assert ("PATCH", f"/api/v1/nodes/{NODE}") not in api.state.writes()
    # One other node recovers: 1 of 4 is under half, and the recheck adds the taint.
    api.state.store.nodes["gpu-0"]["spec"]["taints"] = []
    wait_until(lambda: OURS in _taints(api), what="taint added after the recheck")


def test_under_the_threshold_the_taint_goes_on(api: FakeApiServer, w: NodeFaultWriter) -> None:
    _cluster(api, tainted_others=1, others=3)  # 1 of 4 (the CPU nodes are not counted)
    w.offer(snapshot((FELL_OFF,)))
    wait_until(lambda: OURS in _taints(api), what="taint added")
    assert w.counts[("taint", "held_back")] == 0
    listed = [q for p, q in api.state.requests if p == "/api/v1/nodes"]
    assert listed == [{"labelSelector": ["nvidia.com/gpu.present=true"]}]

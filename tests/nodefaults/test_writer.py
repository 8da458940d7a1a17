"""The node fault writer against the fake API server (a real HTTP server): the condition,
conflicts, the API server refusing, Events and their deduplication, restore at start."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest

from exporter.fields.faults import GpuFault
from exporter.nodefaults.writer import NodeFaultWriter
from tests.nodefaults.writer_helpers import (
    FELL_OFF,
    NODE,
    PAGE_FAULT,
    snapshot,
    writer,
    writer_with_backoff,
)
from tests.support.apiserver import FakeApiServer
from tests.support.apiserver_nodes import node
from tests.support.wait import wait_until

READY = {"type": "Ready", "status": "True", "reason": "KubeletReady",
         "message": "kubelet is posting ready status",
         "lastHeartbeatTime": "2026-12-07T12:00:00Z",
         "lastTransitionTime": "2026-12-07T12:00:00Z"}
FELL_OFF_MESSAGE = (
    "[XID 79] GPU 1 GPU-00000001 ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS - "
    "RecommendedAction: RESTART_BM (fatal, cleared by reboot, since "
    "2026-12-07T12:59:31.250Z, boot 4f1c2d3e-0000-1111-2222-333344445555)")


@pytest.fixture
def node_api(api: FakeApiServer) -> FakeApiServer:
    api.state.store.add(node(NODE, {"nvidia.com/gpu.present": "true"}))
    return api


@pytest.fixture
def started() -> Iterator[list[NodeFaultWriter]]:
    writers: list[NodeFaultWriter] = []
    yield writers
    for w in writers:
        w.close()


def _start(started: list[NodeFaultWriter], kubeconfig: str, **settings: bool | str | float
           ) -> NodeFaultWriter:
    made = writer(kubeconfig, **settings)
    made.restore_to(lambda _: None)
    made.start()
    started.append(made)
    return made


def _conditions(api: FakeApiServer) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in api.state.store.nodes[NODE]["status"]["conditions"]}


def _written(api: FakeApiServer, condition_type: str = "GPUHardwareReady") -> Any:
    return _conditions(api).get(condition_type)


def test_condition_false_while_a_fatal_fault_is_held_and_ready_untouched(
        node_api: FakeApiServer, kubeconfig: str, started: list[NodeFaultWriter]) -> None:
    w = _start(started, kubeconfig, node_condition=True)
    w.offer(snapshot((FELL_OFF,)))
    condition = wait_until(lambda: _written(node_api), what="condition written")
    assert (condition["status"], condition["reason"], condition["message"]) == (
        "False", "RobustChannelGpuHasFallenOffTheBus", FELL_OFF_MESSAGE)
    assert _conditions(node_api)["Ready"] == READY
    assert node_api.state.writes() == [("PATCH", f"/api/v1/nodes/{NODE}/status")]
    # Cleared: True again, the transition time moved, still one condition of the type.
    w.offer(snapshot((), taken_at=1796648500.0))
    wait_until(lambda: _written(node_api)["status"] == "True", what="condition True")
    cleared = _written(node_api)
    assert (cleared["reason"], cleared["message"]) == ("GpuHardwareHealthy", "No GPU fault held")
    assert sorted(_conditions(node_api)) == ["GPUHardwareReady", "Ready"]
    assert w.counts[("condition", "success")] == 2


def test_a_non_fatal_held_fault_keeps_the_condition_true_and_recorded(
        node_api: FakeApiServer, kubeconfig: str, started: list[NodeFaultWriter]) -> None:
    w = _start(started, kubeconfig, node_condition=True, condition_type="AcceleratedHardwareReady")
    w.offer(snapshot((PAGE_FAULT,)))
    condition = wait_until(lambda: _written(node_api, "AcceleratedHardwareReady"))
    assert condition["status"] == "True"
    assert condition["message"].startswith("[XID 31] GPU 0 GPU-00000000 GPU_MEMORY_PAGE_FAULT"
                                           " - RecommendedAction: RESTART_APP (non-fatal,")


def test_a_stale_write_gets_409_and_is_made_again_from_a_fresh_read(
        node_api: FakeApiServer, kubeconfig: str, started: list[NodeFaultWriter]) -> None:
    # The kubelet writes its heartbeat between the writer's read and its patch.
    node_api.state.store.before_node_write.append(lambda store: store.heartbeat(NODE))
    w = _start(started, kubeconfig, node_condition=True)
    w.offer(snapshot((FELL_OFF,)))
    wait_until(lambda: _written(node_api), what="condition written after the conflict")
    assert node_api.state.writes() == [("PATCH", f"/api/v1/nodes/{NODE}/status")] * 2
    assert (w.counts[("condition", "conflict")], w.counts[("condition", "success")]) == (1, 1)
    # The kubelet's write was not lost to ours.
    assert _conditions(node_api)["Ready"]["lastHeartbeatTime"] == "2026-12-07T13:00:00Z"


@pytest.mark.parametrize("status", [500, 403])
def test_refused_writes_are_counted_and_resume_with_backoff(
        node_api: FakeApiServer, kubeconfig: str, started: list[NodeFaultWriter],
        status: int) -> None:
    node_api.state.refuse = status
    w = _start(started, kubeconfig, node_condition=True)
    w.offer(snapshot((FELL_OFF,)))
    wait_until(lambda: len(node_api.state.log) >= 3, what="retries while refused")
    assert not w.api_up
    assert w.counts[("condition", "success")] == 0
    node_api.state.refuse = None  # no new snapshot: the backoff retry alone writes it
    wait_until(lambda: _written(node_api), what="condition written once answered")
    wait_until(lambda: w.api_up, what="API server up again")
    assert w.counts[("condition", "success")] == 1


def test_dry_run_logs_each_write_and_makes_none(
        node_api: FakeApiServer, kubeconfig: str, started: list[NodeFaultWriter],
        caplog: pytest.LogCaptureFixture) -> None:
    node_api.state.store.add(node("other", {"nvidia.com/gpu.present": "true"}))
    with caplog.at_level(logging.INFO, logger="exporter.nodefaults.writer"):
        w = _start(started, kubeconfig, node_condition=True, events=True, taint=True,
                   dry_run=True)
        w.offer(snapshot((FELL_OFF,), (FELL_OFF,)))
        wait_until(lambda: w.idle.is_set(), what="writer idle")
    lines = [r.getMessage() for r in caplog.records if "dry run" in r.getMessage()]
    assert [line.split(" ")[5:7] for line in lines] == [
        ["PATCH", f"/api/v1/nodes/{NODE}/status"], ["PATCH", f"/api/v1/nodes/{NODE}"],
        ["POST", "/api/v1/namespaces/default/events"]]
    assert node_api.state.writes() == []
    assert {k: n for k, n in w.counts.items() if n} == {
        ("condition", "dry_run"): 1, ("taint", "dry_run"): 1, ("event", "dry_run"): 1}


def _events(api: FakeApiServer) -> list[dict[str, Any]]:
    return api.state.store.node_events()


def test_events_on_the_node_and_the_holding_pod_deduplicated_as_the_kubelet_does(
        node_api: FakeApiServer, kubeconfig: str, started: list[NodeFaultWriter]) -> None:
    w = _start(started, kubeconfig, events=True)
    holders = {0: (("team-a", "trainer-0"),)}
    w.offer(snapshot((PAGE_FAULT,), (PAGE_FAULT,), holders=holders))
    wait_until(lambda: len(_events(node_api)) == 2, what="two Events")
    on_node, on_pod = _events(node_api)
    assert on_node["involvedObject"] == {"apiVersion": "v1", "kind": "Node", "name": NODE,
                                         "uid": NODE}
    assert on_node["metadata"]["namespace"] == "default"
    assert on_pod["involvedObject"] == {"apiVersion": "v1", "kind": "Pod", "name": "trainer-0",
                                        "namespace": "team-a"}
    assert on_pod["metadata"]["namespace"] == "team-a"
    for event in (on_node, on_pod):
        assert (event["type"], event["reason"], event["count"]) == (
            "Warning", "GpuMemoryPageFault", 1)
        assert event["message"] == ("[XID 31] GPU 0 GPU-00000000 GPU_MEMORY_PAGE_FAULT - "
                                    "RecommendedAction: RESTART_APP")
    # The same fault raised again: the same two Events, counted twice.
    w.offer(snapshot((PAGE_FAULT,), (PAGE_FAULT,), taken_at=1796648500.0, holders=holders))
    wait_until(lambda: [e["count"] for e in _events(node_api)] == [2, 2], what="counts 2")
    assert [m for m, _ in node_api.state.writes()] == ["POST", "POST", "PATCH", "PATCH"]


def test_a_fatal_fault_gets_an_event_on_the_node_only(
        node_api: FakeApiServer, kubeconfig: str, started: list[NodeFaultWriter]) -> None:
    w = _start(started, kubeconfig, events=True)
    w.offer(snapshot((FELL_OFF,), (FELL_OFF,), holders={1: (("team-a", "trainer-1"),)}))
    wait_until(lambda: w.idle.is_set() and _events(node_api), what="an Event")
    assert [e["involvedObject"]["kind"] for e in _events(node_api)] == ["Node"]
    # Only Events were asked for: the node itself is never read or written.
    assert [p for _, p in node_api.state.log] == ["/api/v1/namespaces/default/events"]


def test_the_same_snapshot_published_again_raises_no_second_event(
        node_api: FakeApiServer, kubeconfig: str, started: list[NodeFaultWriter]) -> None:
    w = _start(started, kubeconfig, events=True)
    polled = snapshot((FELL_OFF,), (FELL_OFF,))
    w.offer(polled)
    w.offer(polled)  # a failed poll republishes the last snapshot
    wait_until(lambda: w.idle.is_set() and _events(node_api), what="an Event")
    assert [e["count"] for e in _events(node_api)] == [1]


def test_faults_recorded_on_the_node_are_restored_before_anything_is_written(
        node_api: FakeApiServer, kubeconfig: str, started: list[NodeFaultWriter]) -> None:
    first = _start(started, kubeconfig, node_condition=True)
    first.offer(snapshot((FELL_OFF,)))
    wait_until(lambda: _written(node_api), what="condition written")
    first.close()
    writes = len(node_api.state.writes())
    # A new exporter: its first snapshot holds nothing yet.
    restored: list[tuple[GpuFault, ...]] = []
    second = writer(kubeconfig, node_condition=True)
    started.append(second)
    second.restore_to(restored.append)
    second.offer(snapshot((), taken_at=1796648400.0))
    second.start()
    wait_until(lambda: restored, what="faults restored")
    assert restored == [(FELL_OFF,)]
    assert len(node_api.state.writes()) == writes  # the record was not overwritten
    assert _written(node_api)["message"] == FELL_OFF_MESSAGE


def test_a_refused_kind_keeps_neither_of_the_others_from_being_written(
        node_api: FakeApiServer, kubeconfig: str, started: list[NodeFaultWriter]) -> None:
    node_api.state.store.denied_access.add(("patch", "nodes", ""))  # no taint allowed
    w = _start(started, kubeconfig, node_condition=True, events=True, taint=True)
    w.offer(snapshot((FELL_OFF,), (FELL_OFF,)))
    wait_until(lambda: _written(node_api) and _events(node_api),
               what="condition and Event written")
    wait_until(lambda: w.counts[("taint", "failure")] >= 2, what="the taint retried")
    assert (w.counts[("condition", "success")], w.counts[("event", "success")]) == (1, 1)
    assert "taints" not in node_api.state.store.nodes[NODE].get("spec", {})


def test_new_polls_do_not_cut_the_backoff_short(
        node_api: FakeApiServer, kubeconfig: str, started: list[NodeFaultWriter]) -> None:
    node_api.state.refuse = 500
    w = writer_with_backoff(kubeconfig, (2.0, 2.0), {"node_condition": True})
    started.append(w)
    w.restore_to(lambda _: None)
    w.start()
    w.offer(snapshot((FELL_OFF,)))
    wait_until(lambda: w.counts[("condition", "failure")] == 1, what="the first failure")
    for n in range(20):  # a poll every few milliseconds, each one waking the writer
        w.offer(snapshot((FELL_OFF,), taken_at=1796648400.0 + n))
    node_api.state.refuse = None
    wait_until(lambda: _written(node_api), what="written after the backoff")
    assert w.counts[("condition", "failure")] == 1

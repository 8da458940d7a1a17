"""Real exporter processes (`--backend sim` with an injected XID) writing to the fake API
server: the condition read back after a restart, the API server away and back, dry run."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.apiserver import FakeApiServer
from tests.support.apiserver_nodes import node
from tests.support.exporter_process import ExporterProcess
from tests.support.wait import wait_until

NODE = "gpu-node-1"
TAINT = {"key": "gpu-exporter/gpu-fault", "value": "RESTART_BM", "effect": "NoSchedule"}
SIM = ["--backend", "sim", "--sim.profile", "h100-8", "-c", "500ms"]
FELL_OFF = ["--sim.fault", "xid,code=79,gpu=1,at=1s"]

Start = Callable[..., ExporterProcess]


@pytest.fixture
def start(tmp_path: Path) -> Iterator[Start]:
    started: list[ExporterProcess] = []

    def _start(api: FakeApiServer, *args: str) -> ExporterProcess:
        kubeconfig = api.write_kubeconfig(tmp_path / "kubeconfig")
        proc = ExporterProcess([*SIM, *args], env={"KUBECONFIG": kubeconfig, "NODE_NAME": NODE,
                                                   "KUBERNETES_SERVICE_HOST": ""})
        started.append(proc)
        proc.wait_ready()
        return proc

    yield _start
    for proc in started:
        proc.close()


def _condition(api: FakeApiServer) -> dict[str, Any] | None:
    for c in api.state.store.nodes[NODE]["status"]["conditions"]:
        if c["type"] == "GPUHardwareReady":
            return dict(c)
    return None


def _false(api: FakeApiServer) -> dict[str, Any] | None:
    condition = _condition(api)
    return condition if condition and condition["status"] == "False" else None


def _sample(metrics: str, series: str) -> float | None:
    for line in metrics.splitlines():
        if line.startswith(series + " "):
            return float(line.rsplit(" ", 1)[1])
    return None


def _shape(metrics: str) -> set[str]:
    """The comment lines of a scrape, and each series as its name and label names: the
    values move between scrapes (the last XID's code is a label value too)."""
    shape = set()
    for line in metrics.splitlines():
        if line.startswith("#") or not line:
            shape.add(line)
            continue
        name, _, rest = line.partition("{")
        labels = re.findall(r'([A-Za-z_][A-Za-z0-9_]*)="(?:[^"\\]|\\.)*"', rest)
        shape.add(f"{name.split(' ')[0]}{{{','.join(labels)}}}")
    return shape


def test_the_condition_read_back_at_start_restores_the_fault(start: Start) -> None:
    api = FakeApiServer().start()
    try:
        api.state.store.add(node(NODE, {"nvidia.com/gpu.present": "true"}))
        first = start(api, *FELL_OFF, "--faults.node-condition", "--faults.taint")
        held = wait_until(lambda: _false(api), what="condition False")
        assert held["message"].startswith("[XID 79] GPU 1 GPU-")
        assert (" ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS - RecommendedAction: RESTART_BM "
                "(fatal, cleared by reboot, since ") in held["message"]
        wait_until(lambda: TAINT in api.state.store.nodes[NODE]["spec"].get("taints", []),
                   what="taint added")
        first.stop()
        # Someone removes the taint while the exporter is away; the new exporter sees no
        # XID at all: only the condition's record can tell it the fault is still held.
        api.state.store.nodes[NODE]["spec"]["taints"] = []
        second = start(api, "--faults.node-condition", "--faults.taint")
        wait_until(lambda: TAINT in api.state.store.nodes[NODE]["spec"].get("taints", []),
                   what="taint put back from the restored fault")
        assert "1 fault(s) restored from the node's GPUHardwareReady condition" in \
            second.output()
        assert _condition(api) == held  # the record was neither lost nor rewritten
    finally:
        api.stop()


def test_api_server_away_leaves_metrics_unchanged_and_writes_resume(start: Start) -> None:
    api = FakeApiServer().start()
    api.state.store.add(node(NODE, {"nvidia.com/gpu.present": "true"}))
    port, state = api.port, api.state
    api.stop()  # nothing listens on its port: the exporter starts with the API server away
    proc = start(api, *FELL_OFF, "--faults.node-condition")
    failures = 'gpu_exporter_node_fault_writes_total{kind="condition",result="failure"}'

    def down_after_the_fault() -> str | None:
        # The XID's own series are on the page, and the writer has failed at least once.
        text = proc.metrics()
        seen = "gpu_exporter_xid_last_seen" in text and (_sample(text, failures) or 0) >= 1
        return text if seen else None

    down = wait_until(down_after_the_fault, what="the fault served, its write failed")
    assert _sample(down, "gpu_exporter_node_fault_api_up") == 0
    assert state.store.nodes[NODE]["metadata"]["resourceVersion"] == "1001"  # never written
    back = FakeApiServer(port, state=state).start()
    try:
        wait_until(lambda: _false(back), timeout=60, what="condition False once back")
        up = wait_until(lambda: (lambda m: m if _sample(m, "gpu_exporter_node_fault_api_up")
                                 == 1 else None)(proc.metrics()), what="API server up")
        # The same series, down or up: only values moved.
        assert _shape(down) == _shape(up)
    finally:
        back.stop()


def test_dry_run_writes_nothing_and_logs_each_write(start: Start) -> None:
    api = FakeApiServer().start()
    try:
        api.state.store.add(node(NODE, {"nvidia.com/gpu.present": "true"}))
        proc = start(api, *FELL_OFF, "--faults.node-condition", "--faults.events",
                     "--faults.taint", "--faults.dry-run")
        taint_logged = f"dry run, would PATCH /api/v1/nodes/{NODE} "
        wait_until(lambda: taint_logged in proc.output(), what="the taint's write logged")
        wait_until(lambda: "dry run, would POST /api/v1/namespaces/default/events" in
                   proc.output(), what="the Event logged")
        assert api.state.writes() == []
        assert api.state.log  # it did read
        assert _condition(api) is None
    finally:
        api.stop()


def _holder_of_gpu0(metrics: str) -> tuple[str, str] | None:
    """(namespace, pod) on GPU 0's temperature series, as the exporter attributes it."""
    for line in metrics.splitlines():
        if line.startswith("DCGM_FI_DEV_GPU_TEMP{") and 'gpu="0"' in line and 'pod="' in line:
            labels = dict(part.split("=", 1) for part in
                          line[line.index("{") + 1:line.index("}")].split(","))
            return labels["namespace"].strip('"'), labels["pod"].strip('"')
    return None


def test_a_restart_app_fault_is_an_event_on_the_node_and_the_pod_holding_the_gpu(
        start: Start) -> None:
    api = FakeApiServer().start()
    try:
        api.state.store.add(node(NODE, {"nvidia.com/gpu.present": "true"}))
        proc = start(api, "--sim.kubelet", "--sim.fault", "xid,code=31,gpu=0,at=1s",
                     "--faults.events")
        namespace, pod = wait_until(lambda: _holder_of_gpu0(proc.metrics()),
                                    what="GPU 0 attributed to a pod")
        def two_events() -> list[dict[str, Any]] | None:
            events = api.state.store.node_events()
            return events if len(events) >= 2 else None

        events = wait_until(two_events, what="two Events")
        objects = sorted((e["involvedObject"]["kind"], e["metadata"]["namespace"],
                          e["involvedObject"]["name"]) for e in events)
        assert objects == [("Node", "default", NODE), ("Pod", namespace, pod)]
        assert {e["reason"] for e in events} == {"RobustChannelFifoErrorMmuErrFlt"}
    finally:
        api.stop()

"""`doctor` with `--faults.*`: one line per permission the enabled options need, each asked
of the fake API server with a SelfSubjectAccessReview, and the node's condition as a restart
would read it back."""

from __future__ import annotations

from pathlib import Path

import pytest

from exporter.simulated.kubelet import SimKubeletHandle, allocatable_for, plan_allocations
from tests.doctor.test_doctor import SIM, lines_about, run_doctor, sim_inventory
from tests.nodefaults.writer_helpers import NODE
from tests.support.apiserver import FakeApiServer
from tests.support.apiserver_nodes import node


@pytest.fixture
def args(kubelet: SimKubeletHandle, socket_path: str, api: FakeApiServer, tmp_path: Path,
         monkeypatch: pytest.MonkeyPatch) -> tuple[str, ...]:
    inventory = sim_inventory("h200-mig")
    kubelet.servicer.set_pods(plan_allocations(inventory))
    kubelet.servicer.set_allocatable(allocatable_for(inventory))
    api.state.store.add(node(NODE))
    monkeypatch.setenv("NODE_NAME", NODE)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    return (*SIM, "--kubernetes.pod-resources-socket", socket_path,
            "--kubeconfig", api.write_kubeconfig(tmp_path / "kubeconfig"))


def test_each_enabled_permission_is_one_line(args: tuple[str, ...], api: FakeApiServer) -> None:
    rc, lines = run_doctor(*args, "--faults.node-condition", "--faults.events",
                           "--faults.taint")
    assert rc == 0, lines
    assert lines_about(lines, "node faults") == [
        f"[INFO] node faults: node {NODE} has no GPUHardwareReady condition yet (serve "
        "writes it)",
        "[  OK] node faults: get nodes/status: allowed",
        "[  OK] node faults: patch nodes/status: allowed",
        "[  OK] node faults: create events: allowed",
        "[  OK] node faults: patch events: allowed",
        "[  OK] node faults: get nodes: allowed",
        "[  OK] node faults: list nodes: allowed",
        "[  OK] node faults: patch nodes: allowed",
    ]
    assert {"verb": "patch", "resource": "nodes", "group": "", "subresource": "status",
            "name": NODE} in api.state.store.reviews


def test_a_refused_permission_fails_and_names_it(args: tuple[str, ...],
                                                 api: FakeApiServer) -> None:
    api.state.store.denied_access.add(("patch", "nodes", "status"))
    rc, lines = run_doctor(*args, "--faults.node-condition")
    assert rc == 1
    assert lines_about(lines, "node faults")[2] == (
        "[FAIL] node faults: patch nodes/status: refused; grant it to the ServiceAccount (the "
        "chart does with the faults.* values)")


def test_dry_run_asks_only_for_reads(args: tuple[str, ...]) -> None:
    rc, lines = run_doctor(*args, "--faults.node-condition", "--faults.events",
                           "--faults.taint", "--faults.dry-run")
    assert rc == 0, lines
    assert [line.split(": ")[1] for line in lines_about(lines, "node faults")[1:]] == [
        "get nodes/status", "get nodes", "list nodes"]


def test_nothing_enabled_nothing_checked(args: tuple[str, ...], api: FakeApiServer) -> None:
    rc, lines = run_doctor(*args)
    assert rc == 0, lines
    assert lines_about(lines, "node faults") == []
    assert api.state.store.reviews == []

"""The fault matrix end to end: for each class of NVIDIA's recommended actions, a real exporter
process (`--backend sim`, all three writers on) and what it writes to the fake API server,
and what clears it. How soon after a fault the first write arrives is a timing, measured by
`benchmarks/bench_fault_writes.py`.

What each case expects is read from NVIDIA's catalog files in `tests/fixtures/nvsentinel/`
(`CATALOG_XIDS`, `CATALOG_HEALTH`), never from the exporter's own table; the lifetimes are
docs/faults.md's. Faults on different GPUs of one h100-8 node share a process where their
clearing events do not disturb each other."""

from __future__ import annotations

import csv
import json
import re
import time
from typing import Any, cast

import pytest

from tests.nodefaults.conftest import NODE, Start, condition
from tests.support.apiserver import FakeApiServer
from tests.support.apiserver_nodes import node
from tests.support.exporter_process import ExporterProcess
from tests.support.paths import fixture_file
from tests.support.wait import wait_until

POLL_S = 0.5
"""The exporters' `-c 500ms`."""
KEY = "gpu-exporter/gpu-fault"
WRITERS = ("--faults.node-condition", "--faults.events", "--faults.taint")
GPU_NODE = {"nvidia.com/gpu.present": "true"}
OTHER_NODES = ("gpu-node-2", "gpu-node-3", "gpu-node-4")
EXIT_AT_S = 5
"""When GPU 0's processes exit in the RESTART_APP case, in the simulated node's time."""
CLOCK_SLACK_S = 0.002
"""The logged start is rounded to the millisecond."""
FAULT_AT = "2s"
"""When the faults come, in the simulated node's time from its start. An XID due before the
exporter registered for its GPU's events is lost, as with NVML; the exporter registers within
a few tens of milliseconds, and 2 s leaves room for a start slowed by a loaded machine."""


def _catalog_xids() -> dict[int, tuple[str, str, str]]:
    """Return NVIDIA's XID rows (the file has no header) by XID."""
    with fixture_file("nvsentinel", "xiderrorsmapping.csv").open(newline="") as f:
        return {int(row[0]): (row[1], row[2], row[3]) for row in csv.reader(f) if row}


def _catalog_health() -> dict[str, str]:
    """Return NVIDIA's action for each DCGM health failure code."""
    with fixture_file("nvsentinel", "dcgmerrorsmapping.csv").open(newline="") as f:
        return {row[0]: row[1] for row in csv.reader(f) if row}


CATALOG_XIDS = _catalog_xids()
"""XID: (name, action, FATAL or NONFATAL), NVIDIA's rows."""
CATALOG_HEALTH = _catalog_health()
"""DCGM health failure code: action, NVIDIA's rows."""

DBE, LINK_DOWN = "DCGM_FR_VOLATILE_DBE_DETECTED", "DCGM_FR_NVLINK_DOWN"


def test_the_catalog_puts_each_case_in_the_class_it_stands_for() -> None:
    # The cases below are chosen for their class: a catalog that moved one would leave its
    # case testing another class than its name says.
    assert CATALOG_XIDS[95][1:] == ("RESET_GPU", "FATAL")
    assert CATALOG_XIDS[79][1:] == ("RESTART_BM", "FATAL")
    assert CATALOG_XIDS[31][1:] == ("RESTART_APP", "NONFATAL")
    assert CATALOG_XIDS[43][1:] == ("IGNORE", "NONFATAL")
    assert CATALOG_HEALTH[DBE] == "RESET_GPU"
    assert CATALOG_HEALTH[LINK_DOWN] == "NODE_REBOOT"


# -- the fake API server's side ------------------------------------------------------------


def _api(tainted_others: int = 0) -> FakeApiServer:
    """Return a started fake API server holding this node and three other GPU nodes, the first
    `tainted_others` of them already tainted by another exporter."""
    api = FakeApiServer().start()
    api.state.store.add(node(NODE, GPU_NODE))
    for i, name in enumerate(OTHER_NODES):
        taints = [{"key": KEY, "value": "RESET_GPU", "effect": "NoSchedule"}] \
            if i < tainted_others else None
        api.state.store.add(node(name, GPU_NODE, taints))
    return api


def _taint(api: FakeApiServer) -> dict[str, str] | None:
    """Return this node's taint of the exporter's key as stored now, or None."""
    for taint in api.state.store.nodes[NODE]["spec"].get("taints", []):
        if taint["key"] == KEY:
            return dict(taint)
    return None


def _condition_writes(api: FakeApiServer) -> list[tuple[float, dict[str, Any]]]:
    """Return (arrival time, condition) of every condition written to this node, oldest first."""
    found = []
    for at, method, path, body in list(api.state.history):
        if method == "PATCH" and path == f"/api/v1/nodes/{NODE}/status":
            found += [(at, c) for c in body["status"]["conditions"]
                      if c["type"] == "GPUHardwareReady"]
    return found


def _taint_writes(api: FakeApiServer) -> list[tuple[float, list[dict[str, str]]]]:
    """Return (arrival time, taints sent) of every write of this node's taints, oldest first."""
    return [(at, body["spec"].get("taints") or []) for at, method, path, body
            in list(api.state.history)
            if method in ("PATCH", "PUT") and path == f"/api/v1/nodes/{NODE}"]


def _first_false_with(api: FakeApiServer, part: str) -> tuple[float, dict[str, Any]] | None:
    """Return (arrival time, condition) of the first False condition written whose message
    holds `part`, or None."""
    for at, c in _condition_writes(api):
        if c["status"] == "False" and part in c["message"]:
            return at, c
    return None


def _first_taint(api: FakeApiServer) -> float | None:
    """Return the arrival time of the first write that put the exporter's taint on, or None."""
    for at, taints in _taint_writes(api):
        if any(t["key"] == KEY and t["effect"] == "NoSchedule" for t in taints):
            return at
    return None


def _events(api: FakeApiServer, part: str) -> list[dict[str, Any]]:
    """Return the stored Events whose message holds `part`."""
    return [e for e in api.state.store.node_events() if part in e["message"]]


# -- the exporter's side -------------------------------------------------------------------


def _labels(line: str) -> dict[str, str]:
    """Return the labels of one exposition line."""
    return dict(re.findall(r'([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"', line))


def _value(metrics: str, name: str, **labels: str) -> float | None:
    """Return the value of the first series `name` carrying every one of `labels`."""
    for line in metrics.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            have = _labels(line.split("}", 1)[0]) if "{" in line else {}
            if all(have.get(k) == v for k, v in labels.items()):
                return float(line.rsplit(" ", 1)[1])
    return None


def _uuid(metrics: str, gpu: int) -> str:
    """Return GPU `gpu`'s UUID as its series carry it."""
    for line in metrics.splitlines():
        if line.startswith("DCGM_FI_DEV_GPU_TEMP{"):
            labels = _labels(line)
            if labels.get("gpu") == str(gpu):
                return labels["UUID"]
    raise AssertionError(f"no DCGM_FI_DEV_GPU_TEMP series for GPU {gpu}")


def _xid_seen(proc: ExporterProcess, gpu: int, code: int) -> float:
    """Wait for, and return, the Unix time of the XID event on `gpu`, as NVML stamped it."""
    return wait_until(lambda: _value(proc.metrics(), "gpu_exporter_xid_last_seen_timestamp_seconds",
                                     gpu=str(gpu), xid=str(code)),
                      what=f"XID {code} on GPU {gpu} served")


def _last_poll(proc: ExporterProcess) -> float:
    """Return the Unix time of the exporter's last successful poll (0 before the first)."""
    return _value(proc.metrics(), "gpu_exporter_last_poll_success_timestamp_seconds") or 0.0


def _polls_past(proc: ExporterProcess, when: float, polls: int = 4) -> None:
    """Wait until a poll at least `polls` polls after Unix time `when` has succeeded."""
    wait_until(lambda: _last_poll(proc) >= when + polls * POLL_S,
               what=f"{polls} polls after {when}")


def _fault_series(proc: ExporterProcess, gpu: int, code: int) -> float | None:
    """Return the value of the `gpu_exporter_gpu_fault` series of an XID, or None when absent."""
    return _value(proc.metrics(), "gpu_exporter_gpu_fault", gpu=str(gpu), source="xid",
                  code=str(code))


def _headline(code: int, gpu: int, uuid: str) -> str:
    """Return an XID fault's line as NVIDIA's catalog row and docs/faults.md spell it."""
    name, action, _ = CATALOG_XIDS[code]
    return f"[XID {code}] GPU {gpu} {uuid} {name} - RecommendedAction: {action}"


def _health_headline(code: str, gpu: int, uuid: str) -> str:
    """Return the start of a health code's fault line."""
    return f"[HEALTH {code}] GPU {gpu} {uuid}"


# -- the cases -----------------------------------------------------------------------------


def _true(api: FakeApiServer) -> dict[str, Any] | None:
    """Return the node's condition when it is True, else None."""
    c = condition(api)
    return c if c and c["status"] == "True" else None


def test_reset_gpu_faults_hold_condition_and_taint_until_the_gpu_reset(
        start: Start) -> None:
    """XID 95 (GPU 2) and a double-bit error (GPU 3), both RESET_GPU, in one process. GPU 3
    is reset at 5 s: its fault ends, XID 95's stays. XID 95 is held through a restart and
    ends at the reset the second process sees."""
    api = _api()
    try:
        first = start(api, *WRITERS, "--sim.boot-id", "boot-a",
                      "--sim.fault", f"xid,code=95,gpu=2,at={FAULT_AT}",
                      "--sim.fault", f"ecc,gpu=3,at={FAULT_AT},dbe=1",
                      "--sim.fault", "reset,gpu=3,at=5s,for=1s")
        metrics = first.metrics()
        uuid2, uuid3 = _uuid(metrics, 2), _uuid(metrics, 3)
        xid95, dbe = _headline(95, 2, uuid2), _health_headline(DBE, 3, uuid3)
        _xid_seen(first, 2, 95)

        # Both faults: the condition False naming each, and the taint. How soon after the
        # fault each is written is measured by benchmarks/bench_fault_writes.py, not here.
        wait_until(lambda: _first_false_with(api, xid95), what="condition False naming XID 95")
        _, dbe_condition = wait_until(lambda: _first_false_with(api, dbe),
                                      what="condition False naming the DBE")
        wait_until(lambda: _first_taint(api), what="taint added")
        assert (f" - RecommendedAction: {CATALOG_HEALTH[DBE]} (fatal, cleared by gpu-reset"
                in dbe_condition["message"].split(dbe, 1)[1])
        assert _taint(api) == {"key": KEY, "value": "RESET_GPU", "effect": "NoSchedule"}

        # GPU 3 reset at 5 s (lost until 6 s): the double-bit error ends, XID 95 stays.
        after_reset = wait_until(lambda: (lambda c: c if c and dbe not in c["message"]
                                          else None)(condition(api)),
                                 what="double-bit error cleared by GPU 3's reset")
        # By then XID 95 has been held for about eight polls.
        assert after_reset["status"] == "False"
        assert xid95 in after_reset["message"]
        assert _taint(api) == {"key": KEY, "value": "RESET_GPU", "effect": "NoSchedule"}
        assert len(_taint_writes(api)) == 1  # added once, never taken off meanwhile
        first.stop()

        # A restart, same boot: the new process sees no XID; the condition's record holds
        # XID 95 until the reset it sees (GPU 2 lost from 2 s to 3 s).
        writes_before = len(_condition_writes(api))
        second = start(api, *WRITERS, "--sim.boot-id", "boot-a",
                       "--sim.fault", "reset,gpu=2,at=2s,for=1s")
        assert "1 fault(s) restored from the node's GPUHardwareReady condition" in \
            second.output()
        cleared = wait_until(lambda: _true(api), what="condition True after GPU 2's reset")
        assert cleared["message"] == "No GPU fault held"
        wait_until(lambda: _taint(api) is None, what="taint removed after GPU 2's reset")
        # Until the reset, every write still named XID 95.
        since_restart = _condition_writes(api)[writes_before:]
        assert all(xid95 in c["message"] for _, c in since_restart[:-1])
    finally:
        api.stop()


def test_reboot_faults_hold_through_a_reset_and_a_restart_until_the_boot_id_changes(
        start: Start) -> None:
    """XID 79 (RESTART_BM, GPU 1) and a link down (GPU 4, DCGM_FR_NVLINK_DOWN, which NVIDIA's
    file maps to NODE_REBOOT): GPU 1's reset does not end them, a restart with the same boot
    id restores them, one with a new boot id (a reboot) ends them."""
    api = _api()
    try:
        first = start(api, *WRITERS, "--sim.boot-id", "boot-a",
                      "--sim.fault", f"xid,code=79,gpu=1,at={FAULT_AT}",
                      "--sim.fault", f"nvlink-down,gpu=4,link=0,at={FAULT_AT}",
                      "--sim.fault", "reset,gpu=1,at=5s,for=1s")
        metrics = first.metrics()
        uuid1, uuid4 = _uuid(metrics, 1), _uuid(metrics, 4)
        xid79, link = _headline(79, 1, uuid1), _health_headline(LINK_DOWN, 4, uuid4)
        xid79_at = _xid_seen(first, 1, 79)
        wait_until(lambda: _first_false_with(api, xid79), what="condition False naming XID 79")
        _, link_condition = wait_until(lambda: _first_false_with(api, link),
                                       what="condition False naming the link")
        wait_until(lambda: _first_taint(api), what="taint added")
        assert (f" - RecommendedAction: {CATALOG_HEALTH[LINK_DOWN]} (fatal, cleared by reboot"
                in link_condition["message"].split(link, 1)[1])

        # GPU 1 is reset at 5 s and back at 6 s: a reboot's fault is not a reset's to end.
        wait_until(lambda: "GPU 1 is lost" in first.output(), what="GPU 1 reset")
        _polls_past(first, xid79_at + 4.0, polls=2)
        held = condition(api)
        assert held is not None
        assert held["status"] == "False"
        assert xid79 in held["message"]
        assert link in held["message"]
        taint = _taint(api)
        assert taint is not None
        assert taint["value"] in ("RESTART_BM", "NODE_REBOOT")
        first.stop()

        # Same boot: both read back from the condition and held; the record is unchanged.
        second = start(api, *WRITERS, "--sim.boot-id", "boot-a")
        assert "2 fault(s) restored from the node's GPUHardwareReady condition" in \
            second.output()
        _polls_past(second, _last_poll(second), polls=2)
        assert condition(api) == held
        assert _taint(api) == taint
        second.stop()

        # A new boot id: the node rebooted, both end.
        start(api, *WRITERS, "--sim.boot-id", "boot-b")
        cleared = wait_until(lambda: _true(api), what="condition True after the reboot")
        assert cleared["message"] == "No GPU fault held"
        wait_until(lambda: _taint(api) is None, what="taint removed after the reboot")
    finally:
        api.stop()


def _holders(metrics: str, gpu: int) -> set[tuple[str, str]]:
    """Return (namespace, pod) of every pod the exporter attributes `gpu` to, from its allocation
    series."""
    found = set()
    for line in metrics.splitlines():
        labels = _labels(line) if line.startswith("gpu_exporter_pod_gpu_allocation{") else {}
        if labels.get("gpu") == str(gpu) and labels.get("pod"):
            found.add((labels["namespace"], labels["pod"]))
    return found


def _objects(events: list[dict[str, Any]]) -> list[tuple[str, str, str]]:
    """Return (kind, Event namespace, name) of each Event's object, sorted."""
    return sorted((e["involvedObject"]["kind"], e["metadata"]["namespace"],
                   e["involvedObject"]["name"]) for e in events)


def test_restart_app_is_events_only_until_the_holders_exit_and_ignore_writes_nothing(
        start: Start) -> None:
    """XID 31 (RESTART_APP) on GPU 0 of `a100-timesliced` (three processes) and XID 43
    (IGNORE) on GPU 3: an Event for XID 31, its series until GPU 0's processes exit at 5 s;
    never a taint or a False condition; nothing written for XID 43."""
    api = _api()
    try:
        proc = start(api, *WRITERS, "--sim.kubelet",
                     "--sim.fault", f"xid,code=31,gpu=0,at={FAULT_AT}",
                     "--sim.fault", f"exit,gpu=0,at={EXIT_AT_S}s",
                     "--sim.fault", f"xid,code=43,gpu=3,at={FAULT_AT}",
                     profile="a100-timesliced")
        uuid0 = _uuid(proc.metrics(), 0)
        _xid_seen(proc, 0, 31)
        xid43_at = _xid_seen(proc, 3, 43)
        wait_until(lambda: _fault_series(proc, 0, 31) == 1, what="XID 31 held before the exit")

        xid31 = _headline(31, 0, uuid0)
        # The Pods' Events: test_restart_app_events_go_on_each_pod_sharing_the_gpu.
        events = wait_until(lambda: _events(api, xid31), what="XID 31 Event on the Node")
        assert ("Node", "default", NODE) in _objects(events)

        # Held while the processes run. When the series is gone, the exit must be past: the
        # simulated node lists no process from EXIT_AT_S after its logged start. (When the
        # XID was seen is no anchor: a loaded machine can deliver it late.)
        wait_until(lambda: _fault_series(proc, 0, 31) is None, what="XID 31 ended by the exit")
        ended_by = time.time()
        started_at = proc.sim_started_at()
        assert started_at is not None, "the simulated node's start time was not logged"
        exit_at = started_at + EXIT_AT_S
        assert ended_by >= exit_at - CLOCK_SLACK_S, \
            f"XID 31 ended {exit_at - ended_by:.2f}s before its holders exited"
        _polls_past(proc, max(xid43_at, _last_poll(proc)), polls=3)
        assert _fault_series(proc, 3, 43) is None

        history = list(api.state.history)
        conditions = _condition_writes(api)
        assert conditions, "the condition was never written"
        assert all(c["status"] == "True" for _, c in conditions), \
            "a RESTART_APP or IGNORE fault made the condition False"
        assert _taint_writes(api) == [], "a RESTART_APP or IGNORE fault wrote a taint"
        # Every write is a condition or an XID 31 Event (on the Node and, following it in the
        # same pass, on each holding Pod): none is XID 43's.
        stray = [(method, path) for _, method, path, body in history
                 if not (method == "PATCH" and path == f"/api/v1/nodes/{NODE}/status")
                 and not (path.endswith("/events") and xid31 in json.dumps(body))]
        assert stray == [], f"writes that are neither the condition nor XID 31's Events: {stray}"
        assert "[XID 43]" not in json.dumps(history)
        assert cast(dict[str, Any], condition(api))["message"] == "No GPU fault held"
    finally:
        api.stop()


def test_restart_app_events_go_on_each_pod_sharing_the_gpu(start: Start) -> None:
    """A RESTART_APP fault on a time-sliced GPU held by three pods: an Event on the Node and
    on each of them."""
    api = _api()
    try:
        proc = start(api, "--faults.events", "--sim.kubelet",
                     "--sim.fault", f"xid,code=31,gpu=0,at={FAULT_AT}", profile="a100-timesliced")
        pods = wait_until(lambda: _holders(proc.metrics(), 0), what="GPU 0 attributed to pods")
        xid31 = _headline(31, 0, _uuid(proc.metrics(), 0))
        wait_until(lambda: _events(api, xid31), what="XID 31 Event on the Node")
        expected = [("Node", "default", NODE), *sorted(("Pod", ns, pod) for ns, pod in pods)]
        # The Events of one fault are written in one pass: the Pods' follow at once.
        wait_until(lambda: _objects(_events(api, xid31)) == expected, timeout=5.0,
                   what=f"XID 31 Events on {expected}")
    finally:
        api.stop()


@pytest.mark.parametrize(("tainted_others", "tainted"), [(2, False), (1, True)],
                         ids=["two-of-four-tainted", "one-of-four-tainted"])
def test_the_breaker_holds_the_taint_back_at_its_share_and_the_condition_goes_on(
        start: Start, tainted_others: int, tainted: bool) -> None:
    """Four GPU nodes and the default share 0.5: with two of the others tainted the taint is
    held back, with one it is added; the condition goes False either way."""
    api = _api(tainted_others)
    try:
        proc = start(api, *WRITERS, "--sim.fault", f"xid,code=95,gpu=0,at={FAULT_AT}")
        _, held = wait_until(lambda: _first_false_with(api, "[XID 95] GPU 0 "),
                             what="condition False naming XID 95")
        assert held["reason"] == "RobustChannelUncontainedError"  # NVIDIA's name, CamelCase

        def held_back() -> float:
            return _value(proc.metrics(), "gpu_exporter_node_fault_writes_total",
                          kind="taint", result="held_back") or 0.0

        if tainted:
            wait_until(lambda: _taint(api), what="taint added")
            assert held_back() == 0
        else:
            wait_until(lambda: held_back() >= 1, what="taint held back")
            assert _taint_writes(api) == []
            assert _taint(api) is None
    finally:
        api.stop()

"""The fake API server's Nodes, Events and access reviews behave as the real API server's:
the status subresource, resourceVersion conflicts, conditions merged by type, taints
replaced whole, Events created and patched, refusal and coming back."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.apiserver import FakeApiServer
from tests.support.apiserver_nodes import STRATEGIC, node

MERGE = "application/merge-patch+json"


@pytest.fixture
def server() -> Iterator[FakeApiServer]:
    api = FakeApiServer().start()
    api.state.store.add(node("n1", {"gpu": "yes"}))
    api.state.store.add(node("n2", {}))
    yield api
    api.stop()


def call(api: FakeApiServer, method: str, path: str, body: Any = None,
         content_type: str = "application/json") -> tuple[int, dict[str, Any]]:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(api.url + path, data=data, method=method,
                                     headers={"Content-Type": content_type})
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_a_status_write_changes_only_status_and_a_node_write_ignores_status(
        server: FakeApiServer) -> None:
    _, before = call(server, "GET", "/api/v1/nodes/n1")
    status, after = call(server, "PATCH", "/api/v1/nodes/n1/status", {
        "spec": {"taints": [{"key": "k", "effect": "NoSchedule"}]},
        "status": {"conditions": [{"type": "X", "status": "True"}]}}, STRATEGIC)
    assert status == 200
    assert after["spec"] == before["spec"]
    assert [c["type"] for c in after["status"]["conditions"]] == ["Ready", "X"]
    status, after = call(server, "PATCH", "/api/v1/nodes/n1", {
        "spec": {"taints": [{"key": "k", "effect": "NoSchedule"}]},
        "status": {"conditions": [{"type": "Y", "status": "True"}]}}, STRATEGIC)
    assert after["spec"]["taints"] == [{"key": "k", "effect": "NoSchedule"}]
    assert [c["type"] for c in after["status"]["conditions"]] == ["Ready", "X"]


def test_each_write_bumps_the_version_and_a_stale_one_is_a_conflict(
        server: FakeApiServer) -> None:
    _, read = call(server, "GET", "/api/v1/nodes/n1/status")
    stale = read["metadata"]["resourceVersion"]
    _, written = call(server, "PATCH", "/api/v1/nodes/n1/status", {
        "metadata": {"resourceVersion": stale},
        "status": {"conditions": [{"type": "X", "status": "False"}]}}, STRATEGIC)
    assert int(written["metadata"]["resourceVersion"]) > int(stale)
    status, answer = call(server, "PATCH", "/api/v1/nodes/n1/status", {
        "metadata": {"resourceVersion": stale},
        "status": {"conditions": [{"type": "X", "status": "True"}]}}, STRATEGIC)
    assert (status, answer["reason"]) == (409, "Conflict")
    _, now = call(server, "GET", "/api/v1/nodes/n1")
    assert [c["status"] for c in now["status"]["conditions"] if c["type"] == "X"] == ["False"]


def test_conditions_merge_by_type_and_a_merge_patch_replaces_the_list(
        server: FakeApiServer) -> None:
    call(server, "PATCH", "/api/v1/nodes/n1/status",
         {"status": {"conditions": [{"type": "Ready", "message": "m"}]}}, STRATEGIC)
    _, merged = call(server, "GET", "/api/v1/nodes/n1")
    (ready,) = merged["status"]["conditions"]
    assert (ready["status"], ready["message"]) == ("True", "m")
    _, replaced = call(server, "PATCH", "/api/v1/nodes/n1/status",
                       {"status": {"conditions": [{"type": "X", "status": "True"}]}}, MERGE)
    assert replaced["status"]["conditions"] == [{"type": "X", "status": "True"}]


def test_put_of_status_keeps_the_spec(server: FakeApiServer) -> None:
    _, read = call(server, "GET", "/api/v1/nodes/n2")
    read["spec"] = {"unschedulable": True}
    read["status"] = {"conditions": []}
    _, written = call(server, "PUT", "/api/v1/nodes/n2/status", read)
    assert written["spec"] == {}
    assert written["status"] == {"conditions": []}


def test_nodes_are_listed_by_label_selector(server: FakeApiServer) -> None:
    def names(selector: str) -> list[str]:
        _, listed = call(server, "GET", f"/api/v1/nodes?labelSelector={selector}")
        return [n["metadata"]["name"] for n in listed["items"]]

    assert names("gpu%3Dyes") == ["n1"]
    assert names("gpu") == ["n1"]
    assert names("%21gpu") == ["n2"]
    assert names("") == ["n1", "n2"]


def test_events_are_created_once_and_patched(server: FakeApiServer) -> None:
    event = {"metadata": {"name": "n1.1"}, "reason": "R", "count": 1}
    assert call(server, "POST", "/api/v1/namespaces/default/events", event)[0] == 201
    assert call(server, "POST", "/api/v1/namespaces/default/events", event)[0] == 409
    status, patched = call(server, "PATCH", "/api/v1/namespaces/default/events/n1.1",
                           {"count": 2}, STRATEGIC)
    assert (status, patched["count"], patched["reason"]) == (200, 2, "R")
    assert call(server, "PATCH", "/api/v1/namespaces/default/events/gone", {"count": 2},
                STRATEGIC)[0] == 404


def test_access_reviews_answer_as_configured(server: FakeApiServer) -> None:
    server.state.store.denied_access.add(("patch", "nodes", "status"))

    def allowed(verb: str, resource: str, subresource: str = "") -> bool:
        attributes = {"verb": verb, "resource": resource, "subresource": subresource}
        _, answer = call(server, "POST", "/apis/authorization.k8s.io/v1/"
                         "selfsubjectaccessreviews", {"spec": {"resourceAttributes": attributes}})
        return bool(answer["status"]["allowed"])

    assert not allowed("patch", "nodes", "status")
    assert allowed("get", "nodes", "status")
    assert allowed("patch", "nodes")
    # The request itself is refused as the review says.
    status, answer = call(server, "PATCH", "/api/v1/nodes/n1/status",
                          {"status": {"conditions": []}}, STRATEGIC)
    assert (status, answer["reason"]) == (403, "Forbidden")
    assert call(server, "GET", "/api/v1/nodes/n1/status")[0] == 200
    assert call(server, "PATCH", "/api/v1/nodes/n1", {"spec": {}}, STRATEGIC)[0] == 200


def test_refusing_then_stopped_then_back_with_its_state(server: FakeApiServer) -> None:
    server.state.refuse = 500
    assert call(server, "GET", "/api/v1/nodes/n1")[0] == 500
    server.state.refuse = 403
    assert call(server, "GET", "/api/v1/nodes/n1")[0] == 403
    server.state.refuse = None
    port, state = server.port, server.state
    server.stop()
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/nodes/n1", timeout=2)
    back = FakeApiServer(port, state=state).start()
    try:
        assert call(back, "GET", "/api/v1/nodes/n1")[0] == 200
        assert state.writes() == []
    finally:
        back.stop()

"""What the fake API server (`tests/support/apiserver.py`) does with Nodes, Events and
SelfSubjectAccessReviews, as the real one does it:

- a Node and its `status` subresource: a write to `nodes/{name}/status` changes only
  `status`, a write to the node ignores `status`;
- every write bumps `metadata.resourceVersion`; a write carrying an older one is answered
  409 Conflict;
- a strategic-merge patch merges `status.conditions` by `type`, and replaces `spec.taints`
  whole (it has no merge key); a merge patch replaces every list;
- Events: create (409 when the name exists), patch (404 when it does not), list;
- SelfSubjectAccessReview: allowed unless the (verb, resource, subresource) was denied.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

STRATEGIC = "application/strategic-merge-patch+json"


def node(name: str, labels: dict[str, str] | None = None,
         taints: list[dict[str, str]] | None = None) -> dict[str, Any]:
    """Return a Node as the kubelet registers it, with its Ready condition."""
    return {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": dict(labels or {}), "resourceVersion": "1"},
        "spec": {"taints": list(taints or [])} if taints else {},
        "status": {"conditions": [
            {"type": "Ready", "status": "True", "reason": "KubeletReady",
             "message": "kubelet is posting ready status",
             "lastHeartbeatTime": "2026-12-07T12:00:00Z",
             "lastTransitionTime": "2026-12-07T12:00:00Z"}]},
    }


class Answer(Exception):
    """An HTTP status and Status body to answer with."""

    def __init__(self, code: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.body = {"kind": "Status", "apiVersion": "v1", "status": "Failure",
                     "reason": reason, "code": code, "message": message}


def _merge(target: dict[str, Any], patch: dict[str, Any], *, strategic: bool,
           path: str = "") -> None:
    """Apply a JSON merge patch (strategic: `status.conditions` merged by `type`)."""
    for key, value in patch.items():
        here = f"{path}.{key}" if path else key
        if value is None:
            target.pop(key, None)
        elif strategic and here == "status.conditions" and isinstance(value, list):
            current = target.setdefault(key, [])
            for item in value:
                same = [c for c in current if c.get("type") == item.get("type")]
                if same:
                    same[0].update(item)
                else:
                    current.append(copy.deepcopy(item))
        elif isinstance(value, dict) and isinstance(target.get(key), dict):
            _merge(target[key], value, strategic=strategic, path=here)
        else:
            target[key] = copy.deepcopy(value)


def _labels_match(obj: dict[str, Any], selector: str) -> bool:
    labels = obj["metadata"].get("labels") or {}
    for term in filter(None, (t.strip() for t in selector.split(","))):
        if "!=" in term:
            key, _, value = term.partition("!=")
            if labels.get(key) == value:
                return False
        elif "=" in term:
            key, _, value = term.replace("==", "=").partition("=")
            if labels.get(key) != value:
                return False
        elif term.startswith("!"):
            if term[1:] in labels:
                return False
        elif term not in labels:
            return False
    return True


@dataclass
class NodeStore:
    """The Nodes, Events and access answers of the fake API server."""

    nodes: dict[str, dict[str, Any]] = field(default_factory=dict)
    events: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    denied_access: set[tuple[str, str, str]] = field(default_factory=set)
    """(verb, resource, subresource) not granted: a SelfSubjectAccessReview answers not
    allowed, and the request itself is answered 403, as RBAC does."""
    reviews: list[dict[str, Any]] = field(default_factory=list)
    version: int = 1000
    before_node_write: list[Callable[[NodeStore], None]] = field(default_factory=list)
    """Each runs once, first in first out, just before a write to a node is checked: another
    client writing between a reader's read and its write (the kubelet's heartbeat)."""

    def add(self, obj: dict[str, Any]) -> None:
        self.version += 1
        obj = copy.deepcopy(obj)
        obj["metadata"]["resourceVersion"] = str(self.version)
        self.nodes[obj["metadata"]["name"]] = obj

    def _node(self, name: str) -> dict[str, Any]:
        if name not in self.nodes:
            raise Answer(404, "NotFound", f'nodes "{name}" not found')
        return self.nodes[name]

    def heartbeat(self, name: str, at: str = "2026-12-07T13:00:00Z") -> None:
        """Write the kubelet's Ready heartbeat on the node, as the kubelet does."""
        node = self.nodes[name]
        for condition in node["status"]["conditions"]:
            if condition["type"] == "Ready":
                condition["lastHeartbeatTime"] = at
        self._bump(node)

    def _write(self, current: dict[str, Any], body: dict[str, Any], name: str) -> None:
        if self.before_node_write:
            self.before_node_write.pop(0)(self)
        sent = (body.get("metadata") or {}).get("resourceVersion")
        if sent and sent != current["metadata"]["resourceVersion"]:
            raise Answer(409, "Conflict",
                         f'Operation cannot be fulfilled on nodes "{name}": the object has '
                         "been modified; please apply your changes to the latest version "
                         "and try again")

    def _bump(self, obj: dict[str, Any]) -> dict[str, Any]:
        self.version += 1
        obj["metadata"]["resourceVersion"] = str(self.version)
        return copy.deepcopy(obj)

    def handle(self, method: str, parts: list[str], query: dict[str, list[str]],
               body: Any, content_type: str) -> tuple[int, dict[str, Any]] | None:
        """Answer a request this store knows; None for any other path."""
        self._authorize(method, parts)
        if parts[:3] == ["api", "v1", "nodes"]:
            return self._nodes(method, parts[3:], query, body, content_type)
        if len(parts) in (5, 6) and parts[:3] == ["api", "v1", "namespaces"] and \
                parts[4] == "events":
            return self._events(method, parts[3], parts[5] if len(parts) == 6 else None, body)
        if parts == ["apis", "authorization.k8s.io", "v1", "selfsubjectaccessreviews"] and \
                method == "POST":
            attrs = (body.get("spec") or {}).get("resourceAttributes") or {}
            self.reviews.append(attrs)
            allowed = (attrs.get("verb", ""), attrs.get("resource", ""),
                       attrs.get("subresource", "")) not in self.denied_access
            return 201, {**body, "status": {"allowed": allowed}}
        return None

    def _authorize(self, method: str, parts: list[str]) -> None:
        """Answer 403 to a request whose (verb, resource, subresource) is not granted."""
        if parts[:3] == ["api", "v1", "nodes"]:
            resource, named, sub = "nodes", len(parts) > 3, "/".join(parts[4:5])
        elif len(parts) in (5, 6) and parts[:3] == ["api", "v1", "namespaces"] and \
                parts[4] == "events":
            resource, named, sub = "events", len(parts) == 6, ""
        else:
            return
        verb = {"GET": "get" if named else "list", "POST": "create", "PUT": "update",
                "PATCH": "patch"}.get(method, method.lower())
        if (verb, resource, sub) in self.denied_access:
            what = f"{resource}/{sub}" if sub else resource
            raise Answer(403, "Forbidden", f'{what} is forbidden: User '
                         f'"system:serviceaccount:x:y" cannot {verb} resource "{what}"')

    def _nodes(self, method: str, rest: list[str], query: dict[str, list[str]], body: Any,
               content_type: str) -> tuple[int, dict[str, Any]]:
        if not rest:
            if method != "GET":
                raise Answer(405, "MethodNotAllowed", f"{method} on nodes")
            selector = ",".join(query.get("labelSelector", []))
            items = [copy.deepcopy(n) for n in self.nodes.values() if _labels_match(n, selector)]
            return 200, {"kind": "NodeList", "apiVersion": "v1",
                         "metadata": {"resourceVersion": str(self.version)}, "items": items}
        name, status = rest[0], rest[1:] == ["status"]
        current = self._node(name)
        if method == "GET":
            return 200, copy.deepcopy(current)
        if not isinstance(body, dict):
            raise Answer(400, "BadRequest", "the body is not a JSON object")
        self._write(current, body, name)
        if method == "PUT":
            if status:
                current["status"] = copy.deepcopy(body.get("status") or {})
            else:
                current["metadata"].update({k: v for k, v in (body.get("metadata") or {}).items()
                                            if k != "resourceVersion"})
                current["spec"] = copy.deepcopy(body.get("spec") or {})
            return 200, self._bump(current)
        if method == "PATCH":
            strategic = content_type == STRATEGIC
            if content_type not in (STRATEGIC, "application/merge-patch+json"):
                raise Answer(415, "UnsupportedMediaType", f"patch type {content_type!r}")
            if status:
                _merge(current, {"status": body.get("status") or {}}, strategic=strategic)
            else:
                kept = {k: v for k, v in body.items() if k != "status"}
                kept["metadata"] = {k: v for k, v in (body.get("metadata") or {}).items()
                                    if k != "resourceVersion"}
                _merge(current, kept, strategic=strategic)
            return 200, self._bump(current)
        raise Answer(405, "MethodNotAllowed", f"{method} on a node")

    def _events(self, method: str, namespace: str, name: str | None,
                body: Any) -> tuple[int, dict[str, Any]]:
        if name is None and method == "GET":
            items = [copy.deepcopy(e) for (ns, _), e in self.events.items() if ns == namespace]
            return 200, {"kind": "EventList", "apiVersion": "v1", "items": items,
                         "metadata": {"resourceVersion": str(self.version)}}
        if name is None and method == "POST":
            key = (namespace, str((body.get("metadata") or {}).get("name") or ""))
            if key in self.events:
                raise Answer(409, "AlreadyExists", f'events "{key[1]}" already exists')
            event = copy.deepcopy(body)
            event["metadata"]["namespace"] = namespace
            self.events[key] = event
            return 201, self._bump(event)
        if name is not None and method == "PATCH":
            if (namespace, name) not in self.events:
                raise Answer(404, "NotFound", f'events "{name}" not found')
            event = self.events[(namespace, name)]
            _merge(event, body, strategic=True)
            return 200, self._bump(event)
        raise Answer(405, "MethodNotAllowed", f"{method} on events")

    def node_events(self) -> list[dict[str, Any]]:
        """Every Event stored, oldest first."""
        return list(self.events.values())

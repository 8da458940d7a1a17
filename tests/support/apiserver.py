"""A small HTTP server speaking the few Kubernetes API paths enrichment uses: list pods (all
namespaces with a field selector, or one namespace) and watch them."""

from __future__ import annotations

import json
import queue
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse


def pod(
    namespace: str, name: str, uid: str, labels: dict[str, str], node: str = "node-a"
) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"namespace": namespace, "name": name, "uid": uid, "labels": labels,
                     "resourceVersion": "1"},
        "spec": {"nodeName": node},
    }


@dataclass
class ApiState:
    pods: list[dict[str, Any]] = field(default_factory=list)
    forbidden: bool = False
    requests: list[tuple[str, dict[str, list[str]]]] = field(default_factory=list)
    events: queue.Queue[dict[str, Any]] = field(default_factory=queue.Queue)
    resource_version: int = 100
    stopping: threading.Event = field(default_factory=threading.Event)
    watch_idle_s: float = 1.0

    def push(self, kind: str, obj: dict[str, Any]) -> None:
        self.resource_version += 1
        obj = json.loads(json.dumps(obj))
        obj["metadata"]["resourceVersion"] = str(self.resource_version)
        self.events.put({"type": kind, "object": obj})

    def lists(self) -> list[dict[str, list[str]]]:
        return [q for _, q in self.requests if q.get("watch") != ["true"]]

    def watches(self) -> list[dict[str, list[str]]]:
        return [q for _, q in self.requests if q.get("watch") == ["true"]]


def _selected(state: ApiState, path: str, query: dict[str, list[str]]) -> list[dict[str, Any]]:
    pods = state.pods
    parts = path.strip("/").split("/")
    if len(parts) == 5 and parts[2] == "namespaces":
        pods = [p for p in pods if p["metadata"]["namespace"] == parts[3]]
    for selector in query.get("fieldSelector", []):
        key, _, value = selector.partition("=")
        if key == "spec.nodeName":
            pods = [p for p in pods if p["spec"]["nodeName"] == value]
        elif key == "metadata.name":
            pods = [p for p in pods if p["metadata"]["name"] == value]
    return pods


class _Handler(BaseHTTPRequestHandler):
    state: ApiState
    protocol_version = "HTTP/1.0"

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _json(self, code: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        url = urlparse(self.path)
        query = parse_qs(url.query)
        self.state.requests.append((url.path, query))
        if not (url.path == "/api/v1/pods" or
                (url.path.startswith("/api/v1/namespaces/") and url.path.endswith("/pods"))):
            self._json(404, {"kind": "Status", "code": 404, "reason": "NotFound"})
            return
        if self.state.forbidden:
            self._json(403, {"kind": "Status", "apiVersion": "v1", "status": "Failure",
                             "reason": "Forbidden", "code": 403,
                             "message": 'pods is forbidden: User "system:serviceaccount:x:y" '
                                        "cannot list resource"})
            return
        if query.get("watch") == ["true"]:
            self._watch()
            return
        self._json(200, {
            "kind": "PodList",
            "apiVersion": "v1",
            "metadata": {"resourceVersion": str(self.state.resource_version)},
            "items": _selected(self.state, url.path, query),
        })

    def _watch(self) -> None:
        # Chunked, one event per chunk, as the API server streams watches.
        self.protocol_version = "HTTP/1.1"
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("Connection", "close")
        self.end_headers()
        while not self.state.stopping.is_set():
            try:
                event = self.state.events.get(timeout=self.state.watch_idle_s)
            except queue.Empty:
                break  # like a watch reaching its timeout: the client watches again
            line = json.dumps(event).encode() + b"\n"
            self.wfile.write(f"{len(line):x}\r\n".encode() + line + b"\r\n")
            self.wfile.flush()
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()


class FakeApiServer:
    def __init__(self) -> None:
        self.state = ApiState()
        handler = type("Handler", (_Handler,), {"state": self.state})
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        port = self._server.server_address[1]
        return f"http://127.0.0.1:{port}"

    def start(self) -> FakeApiServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self.state.stopping.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def write_kubeconfig(self, path: Path) -> str:
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "local", "cluster": {"server": self.url}}],
            "users": [{"name": "exporter", "user": {"token": "test-token"}}],
            "contexts": [{"name": "local", "context": {"cluster": "local", "user": "exporter"}}],
            "current-context": "local",
        }
        path.write_text(json.dumps(config))
        return str(path)

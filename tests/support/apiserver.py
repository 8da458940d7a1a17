"""A small HTTP server speaking the few Kubernetes API paths the exporter uses: list pods (all
namespaces with a field selector, or one namespace) and watch them; list and watch
ResourceSlices (`resource.k8s.io/v1`); get, list and watch ConfigMaps of a namespace; and
what the node fault writer uses, Nodes with their `status` subresource, Events and
SelfSubjectAccessReviews (`tests/support/apiserver_nodes.py`).

`ApiState.refuse` makes it answer every request with that status (500, 403); `stop` and a
new server on the same port with the same state (`FakeApiServer(port, state=...)`) make it
stop listening and come back. `ApiState.log` lists every request as (method, path), and
`writes()` those that are not reads.

Plain HTTP on loopback by default. For a client that uses in-cluster credentials (a pod's
service-account token and the cluster's CA), it serves HTTPS with a given certificate and
answers 401 to a request without the expected bearer token, as the API server does."""

from __future__ import annotations

import json
import queue
import ssl
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

from tests.support.apiserver_nodes import Answer, NodeStore


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


def resource_slice(
    name: str, node: str, devices: list[dict[str, Any]], *, pool: str | None = None,
    generation: int = 1, driver: str = "gpu.nvidia.com",
) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": name, "resourceVersion": "1"},
        "spec": {"driver": driver, "nodeName": node,
                 "pool": {"name": pool or node, "generation": generation,
                          "resourceSliceCount": 1},
                 "devices": devices},
    }


def config_map(namespace: str, name: str, data: dict[str, str]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"namespace": namespace, "name": name, "resourceVersion": "1"},
            "data": data}


PODS, SLICES, CONFIGMAPS = "pods", "resourceslices", "configmaps"
RESOURCE_API_VERSIONS = ("v1", "v1beta2", "v1beta1")
"""Versions of resource.k8s.io served; slices are stored in v1's shape."""


def slice_in_version(slice_: dict[str, Any], version: str) -> dict[str, Any]:
    """A v1 ResourceSlice as `version` writes it: v1beta1 nests a device's attributes under
    `basic`, v1beta2 has v1's shape."""
    out: dict[str, Any] = json.loads(json.dumps(slice_))
    out["apiVersion"] = f"resource.k8s.io/{version}"
    if version == "v1beta1":
        out["spec"]["devices"] = [
            {"name": d["name"], "basic": {k: v for k, v in d.items() if k != "name"}}
            for d in slice_["spec"]["devices"]]
    return out


@dataclass
class ApiState:
    pods: list[dict[str, Any]] = field(default_factory=list)
    forbidden: bool = False
    """Pod requests answer 403."""
    slices: list[dict[str, Any]] = field(default_factory=list)
    configmaps: list[dict[str, Any]] = field(default_factory=list)
    denied: set[tuple[str, str]] = field(default_factory=set)
    """(resource, verb) answered 403; verbs get, list, watch."""
    other_events: dict[str, queue.Queue[dict[str, Any]]] = field(default_factory=lambda: {
        SLICES: queue.Queue(), CONFIGMAPS: queue.Queue()})
    requests: list[tuple[str, dict[str, list[str]]]] = field(default_factory=list)
    events: queue.Queue[dict[str, Any]] = field(default_factory=queue.Queue)
    resource_version: int = 100
    stopping: threading.Event = field(default_factory=threading.Event)
    watch_idle_s: float = 1.0
    token: str | None = None
    """The bearer token every request must carry; None: any request is let in."""
    unauthorized: int = 0
    """Requests answered 401."""
    store: NodeStore = field(default_factory=NodeStore)
    """Nodes, Events and access reviews."""
    refuse: int | None = None
    """Answer every request with this status (500, 403) while set."""
    log: list[tuple[str, str]] = field(default_factory=list)
    """Every request let in, as (method, path)."""

    def writes(self) -> list[tuple[str, str]]:
        """The requests that would change something (access reviews are not writes)."""
        return [(m, p) for m, p in self.log if m not in ("GET", "HEAD")
                and not p.endswith("/selfsubjectaccessreviews")]

    def push(self, kind: str, obj: dict[str, Any], resource: str = PODS) -> None:
        """An event on the watch of `resource`; slices and ConfigMaps also update the list
        (pod tests keep their list as set)."""
        self.resource_version += 1
        obj = json.loads(json.dumps(obj))
        obj["metadata"]["resourceVersion"] = str(self.resource_version)
        if resource != PODS:
            stored = self.slices if resource == SLICES else self.configmaps
            stored[:] = [o for o in stored if o["metadata"]["name"] != obj["metadata"]["name"]
                         or o["metadata"].get("namespace") != obj["metadata"].get("namespace")]
            if kind != "DELETED":
                stored.append(obj)
        self.queue_of(resource).put({"type": kind, "object": obj})

    def queue_of(self, resource: str) -> queue.Queue[dict[str, Any]]:
        return self.events if resource == PODS else self.other_events[resource]

    def lists(self) -> list[dict[str, list[str]]]:
        return [q for _, q in self.requests if q.get("watch") != ["true"]]

    def watches(self) -> list[dict[str, list[str]]]:
        return [q for _, q in self.requests if q.get("watch") == ["true"]]


def _selected(objs: list[dict[str, Any]], namespace: str | None,
              query: dict[str, list[str]]) -> list[dict[str, Any]]:
    if namespace is not None:
        objs = [o for o in objs if o["metadata"].get("namespace") == namespace]
    for selector in ",".join(query.get("fieldSelector", [])).split(","):
        key, _, value = selector.partition("=")
        if key == "spec.nodeName":
            objs = [o for o in objs if o["spec"]["nodeName"] == value]
        elif key == "metadata.name":
            objs = [o for o in objs if o["metadata"]["name"] == value]
    return objs


def _route(path: str) -> tuple[str, str | None, str | None] | None:
    """(resource, namespace, name) of a path this server knows."""
    parts = path.strip("/").split("/")
    if parts == ["api", "v1", "pods"]:
        return PODS, None, None
    if len(parts) == 4 and parts[:2] == ["apis", "resource.k8s.io"] and \
            parts[2] in RESOURCE_API_VERSIONS and parts[3] == SLICES:
        return SLICES, None, None
    if len(parts) in (5, 6) and parts[:3] == ["api", "v1", "namespaces"] and \
            parts[4] in (PODS, CONFIGMAPS):
        if len(parts) == 6 and parts[4] != CONFIGMAPS:
            return None
        return parts[4], parts[3], parts[5] if len(parts) == 6 else None
    return None


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

    def _let_in(self, method: str) -> bool:
        """Whether the request is authorised and not refused (else it was answered)."""
        scheme, _, token = (self.headers.get("Authorization") or "").partition(" ")
        if self.state.token is not None and \
                (scheme.lower() != "bearer" or token != self.state.token):  # any case
            self.state.unauthorized += 1
            self._json(401, {"kind": "Status", "apiVersion": "v1", "status": "Failure",
                             "reason": "Unauthorized", "code": 401, "message": "Unauthorized"})
            return False
        self.state.log.append((method, urlparse(self.path).path))
        if self.state.refuse is not None:
            code = self.state.refuse
            self._json(code, {"kind": "Status", "apiVersion": "v1", "status": "Failure",
                              "code": code, "reason": "Forbidden" if code == 403
                              else "InternalError", "message": f"refused ({code})"})
            return False
        return True

    def _store(self, method: str) -> bool:
        """Answer from the node store; False when the path is not one of its own."""
        url = urlparse(self.path)
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            self._json(400, {"kind": "Status", "code": 400, "reason": "BadRequest",
                             "message": "the body is not JSON"})
            return True
        content_type = (self.headers.get("Content-Type") or "").split(";")[0].strip()
        try:
            answer = self.state.store.handle(method, url.path.strip("/").split("/"),
                                             parse_qs(url.query), body, content_type)
        except Answer as exc:
            self._json(exc.code, exc.body)
            return True
        if answer is None:
            return False
        self._json(*answer)
        return True

    def _write_method(self, method: str) -> None:
        if not self._let_in(method):
            return
        if not self._store(method):
            self._json(404, {"kind": "Status", "code": 404, "reason": "NotFound"})

    def do_POST(self) -> None:
        self._write_method("POST")

    def do_PUT(self) -> None:
        self._write_method("PUT")

    def do_PATCH(self) -> None:
        self._write_method("PATCH")

    def do_GET(self) -> None:
        url = urlparse(self.path)
        query = parse_qs(url.query)
        if not self._let_in("GET"):
            return
        self.state.requests.append((url.path, query))
        if self._store("GET"):
            return
        route = _route(url.path)
        if route is None:
            self._json(404, {"kind": "Status", "code": 404, "reason": "NotFound"})
            return
        resource, namespace, name = route
        verb = "get" if name else "watch" if query.get("watch") == ["true"] else "list"
        if (resource == PODS and self.state.forbidden) or (resource, verb) in self.state.denied:
            self._json(403, {"kind": "Status", "apiVersion": "v1", "status": "Failure",
                             "reason": "Forbidden", "code": 403,
                             "message": f'{resource} is forbidden: User '
                                        f'"system:serviceaccount:x:y" cannot {verb} resource'})
            return
        if verb == "watch":
            self._watch(self.state.queue_of(resource))
            return
        stored = {PODS: self.state.pods, SLICES: self.state.slices,
                  CONFIGMAPS: self.state.configmaps}[resource]
        if verb == "get":
            found = _selected(stored, namespace, {"fieldSelector": [f"metadata.name={name}"]})
            if not found:
                self._json(404, {"kind": "Status", "apiVersion": "v1", "status": "Failure",
                                 "reason": "NotFound", "code": 404,
                                 "message": f'{resource} "{name}" not found'})
            else:
                self._json(200, found[0])
            return
        items = _selected(stored, namespace, query)
        if resource == SLICES:
            items = [slice_in_version(i, url.path.strip("/").split("/")[2]) for i in items]
        self._json(200, {
            "kind": "List",
            "apiVersion": "v1",
            "metadata": {"resourceVersion": str(self.state.resource_version)},
            "items": items,
        })

    def _watch(self, events: queue.Queue[dict[str, Any]]) -> None:
        # Chunked, one event per chunk, as the API server streams watches.
        self.protocol_version = "HTTP/1.1"
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("Connection", "close")
        self.end_headers()
        while not self.state.stopping.is_set():
            try:
                event = events.get(timeout=self.state.watch_idle_s)
            except queue.Empty:
                break  # like a watch reaching its timeout: the client watches again
            line = json.dumps(event).encode() + b"\n"
            self.wfile.write(f"{len(line):x}\r\n".encode() + line + b"\r\n")
            self.wfile.flush()
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()


class FakeApiServer:
    def __init__(self, port: int = 0, *, tls: tuple[Path, Path] | None = None,
                 token: str | None = None, state: ApiState | None = None) -> None:
        """`port` 0: any free one; a given port lets a test start it where a client already
        points. `tls`: (certificate, key) files to serve HTTPS with; `token`: the bearer
        token required of every request. `state`: a stopped server's, to bring it back."""
        self.state = state or ApiState(token=token)
        self.state.stopping.clear()
        handler = type("Handler", (_Handler,), {"state": self.state})
        self._server = ThreadingHTTPServer(("127.0.0.1", port), handler)
        self._server.daemon_threads = True
        self._scheme = "http"
        if tls is not None:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(*tls)
            # The handshake happens in the request's thread, at its first read: a client
            # that connects and stalls never holds up the accepting loop.
            self._server.socket = context.wrap_socket(
                self._server.socket, server_side=True, do_handshake_on_connect=False)
            self._scheme = "https"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def port(self) -> int:
        port: int = self._server.server_address[1]
        return port

    @property
    def url(self) -> str:
        return f"{self._scheme}://127.0.0.1:{self.port}"

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
            "users": [{"name": "exporter", "user": {"token": self.state.token or "test-token"}}],
            "contexts": [{"name": "local", "context": {"cluster": "local", "user": "exporter"}}],
            "current-context": "local",
        }
        path.write_text(json.dumps(config))
        return str(path)

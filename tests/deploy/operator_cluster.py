"""The API server around the simulated GPU node.

It answers the reads an exporter on a GPU node makes when the operator mounts
its token: pods (list and watch, `spec.nodeName` / `metadata.name` field selectors) and DRA
ResourceSlices (`resource.k8s.io` v1, v1beta2 and v1beta1, list and watch). Watches stay
open without events until the server stops, as on a quiet cluster.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

Obj = dict[str, Any]

DRA_DRIVER = "gpu.nvidia.com"
RESOURCE_API_VERSIONS = ("v1", "v1beta2", "v1beta1")


def pod_object(namespace: str, name: str, uid: str, labels: dict[str, str], node: str,
               container: str) -> Obj:
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"namespace": namespace, "name": name, "uid": uid, "labels": labels,
                     "resourceVersion": "10"},
        "spec": {"nodeName": node, "containers": [{"name": container, "image": "app:1"}]},
        "status": {"phase": "Running"},
    }


def gpu_resource_slice(node: str, devices: dict[str, str]) -> Obj:
    """The NVIDIA DRA driver's slice for a node's whole GPUs: device name -> GPU UUID.
    Written in resource.k8s.io/v1's shape; `_in_version` adapts it for v1beta1."""
    return {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
        "metadata": {"name": f"{node}-{DRA_DRIVER}-gpus", "resourceVersion": "10"},
        "spec": {
            "driver": DRA_DRIVER,
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": [
                {"name": name, "attributes": {"type": {"string": "gpu"},
                                              "uuid": {"string": uuid}}}
                for name, uuid in devices.items()
            ],
        },
    }


def _in_version(slice_: Obj, version: str) -> Obj:
    out: Obj = json.loads(json.dumps(slice_))
    out["apiVersion"] = f"resource.k8s.io/{version}"
    if version == "v1beta1":  # v1beta1 nests a device's attributes under `basic`
        out["spec"]["devices"] = [{"name": d["name"], "basic": {"attributes": d["attributes"]}}
                                  for d in slice_["spec"]["devices"]]
    return out


@dataclass
class ClusterState:
    pods: list[Obj] = field(default_factory=list)
    resource_slices: list[Obj] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)
    stopping: threading.Event = field(default_factory=threading.Event)


def _matches(obj: Obj, selectors: list[str]) -> bool:
    for selector in ",".join(selectors).split(","):
        key, _, want = selector.partition("=")
        if not key:
            continue
        value: Any = obj
        for part in key.split("."):
            value = value.get(part) if isinstance(value, dict) else None
        if value != want:
            return False
    return True


class _Handler(BaseHTTPRequestHandler):
    state: ClusterState
    protocol_version = "HTTP/1.0"

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _json(self, code: int, body: Obj) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _items(self, path: str) -> tuple[str, list[Obj]] | None:
        parts = path.strip("/").split("/")
        if parts == ["api", "v1", "pods"]:
            return "PodList", self.state.pods
        if len(parts) == 5 and parts[:3] == ["api", "v1", "namespaces"] and parts[4] == "pods":
            return "PodList", [p for p in self.state.pods
                               if p["metadata"]["namespace"] == parts[3]]
        if (len(parts) == 4 and parts[:2] == ["apis", "resource.k8s.io"]
                and parts[2] in RESOURCE_API_VERSIONS and parts[3] == "resourceslices"):
            return "ResourceSliceList", [_in_version(s, parts[2])
                                         for s in self.state.resource_slices]
        return None

    def do_GET(self) -> None:
        url = urlparse(self.path)
        query = parse_qs(url.query)
        self.state.requests.append(self.path)
        found = self._items(url.path)
        if found is None:
            self._json(404, {"kind": "Status", "apiVersion": "v1", "status": "Failure",
                             "reason": "NotFound", "code": 404})
            return
        if query.get("watch") in (["true"], ["1"]):
            self._quiet_watch()
            return
        kind, items = found
        selected = [i for i in items if _matches(i, query.get("fieldSelector", []))]
        self._json(200, {"kind": kind, "apiVersion": "v1",
                         "metadata": {"resourceVersion": "10"}, "items": selected})

    def _quiet_watch(self) -> None:
        self.protocol_version = "HTTP/1.1"
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.flush()
        self.state.stopping.wait()
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()


class FakeCluster:
    """An API server on a free loopback port; `kubeconfig()` points a client at it."""

    def __init__(self, state: ClusterState | None = None) -> None:
        self.state = state or ClusterState()
        handler = type("Handler", (_Handler,), {"state": self.state})
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def write_kubeconfig(self, path: Path) -> Path:
        path.write_text(json.dumps({
            "apiVersion": "v1", "kind": "Config",
            "clusters": [{"name": "sim", "cluster": {"server": self.url}}],
            "users": [{"name": "nvidia-dcgm-exporter", "user": {"token": "sa-token"}}],
            "contexts": [{"name": "sim", "context": {"cluster": "sim",
                                                     "user": "nvidia-dcgm-exporter"}}],
            "current-context": "sim",
        }))
        return path

    def stop(self) -> None:
        self.state.stopping.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

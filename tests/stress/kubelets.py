"""Kubelets that misbehave: slow answers, bytes that are no protobuf, oversized answers.

Each is a real gRPC server on a unix socket, speaking pod-resources v1 as far as it does.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterable
from concurrent import futures
from typing import Any

import grpc

from exporter.k8s.proto import PodResources, pb
from exporter.simulated.kubelet import SimKubeletServicer, pod_resources
from exporter.simulated.node.profiles import gpu_uuid

PROFILE = "h100-8"
"""The built-in simulated node these kubelets hand devices of."""
NAMESPACE = "prod"
GPU = "nvidia.com/gpu"


def pods(prefix: str, gpus: Iterable[int] = (0, 1)) -> list[PodResources]:
    """One pod per GPU, `<prefix>-<gpu>`, its container `main` holding the whole GPU."""
    return [pod_resources(NAMESPACE, f"{prefix}-{g}", {"main": [(GPU, [gpu_uuid(PROFILE, g)])]})
            for g in gpus]


class SlowKubelet(SimKubeletServicer):
    """Answers List only after `delay_s` (0: at once); `release()` answers the waiting ones."""

    def __init__(self) -> None:
        super().__init__()
        self.delay_s = 0.0
        self._release = threading.Event()

    def List(self, request: Any, context: Any) -> Any:
        if self.delay_s > 0:
            self._release.wait(self.delay_s)  # the fault itself: an answer this late
        return super().List(request, context)

    def release(self) -> None:
        self.delay_s = 0.0
        self._release.set()


def list_answer(listed: Iterable[PodResources]) -> bytes:
    return bytes(pb.ListPodResourcesResponse(pod_resources=list(listed)).SerializeToString())


NOT_PROTOBUF = b"\x0a\xff\xff\xff\xff\x0f\x12\x00garbage"
"""Field 1 announcing a 4 GiB payload that is not there: no parser accepts it."""


def oversized_answer(min_bytes: int) -> bytes:
    """A well-formed List answer of at least `min_bytes`: a crowded node's worth of NIC ids,
    and a pod `huge-1` holding GPU 1 (which must never be believed)."""
    ids = [f"nic-{i:06d}-" + "x" * 1000 for i in range(min_bytes // 1000 + 1)]
    crowded = pod_resources(NAMESPACE, "huge-0", {"main": [("example.com/nic", ids)]})
    return list_answer([crowded, *pods("huge", [1])])


class RawKubelet:
    """A pod-resources server whose List answers the bytes in `answer`, whatever they are."""

    def __init__(self, socket_path: str, answer: bytes) -> None:
        self.socket_path = socket_path
        self.answer = answer
        with contextlib.suppress(FileNotFoundError):
            os.unlink(socket_path)
        self._server = grpc.server(
            futures.ThreadPoolExecutor(max_workers=2, thread_name_prefix="raw-kubelet"),
            options=[("grpc.max_send_message_length", 64 * 1024 * 1024)])
        handler = grpc.unary_unary_rpc_method_handler(lambda _request, _context: self.answer)
        self._server.add_generic_rpc_handlers([grpc.method_handlers_generic_handler(
            "v1.PodResourcesLister", {"List": handler})])
        if self._server.add_insecure_port(f"unix:{socket_path}") == 0:
            raise OSError(f"could not listen on {socket_path}")
        self._server.start()

    def stop(self) -> None:
        self._server.stop(grace=None).wait(timeout=5)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.socket_path)

"""A kubelet stand-in: a real gRPC server speaking pod-resources v1 on a unix socket.

Used by the tests (which drive its knobs: pods, failures, Get disabled, DRA claims) and by
the demo's `--sim.kubelet`, where `start_sim_kubelet(path, inventory)` hands the simulated
node's devices to pods the way a busy inference node looks: whole GPUs to an inference
Deployment, MIG devices under `nvidia.com/mig-<profile>`, and time-sliced replicas `::N` of
one GPU to several notebook pods.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from concurrent import futures
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

import grpc

from exporter.devices.model import Entity, Inventory
from exporter.k8s.proto import ContainerDevices, PodResources, pb, pb_grpc

SharedBy = Mapping[int, int]
"""How many pods share each GPU by time-slicing, by GPU index (`SimNvml.shared_by`)."""
NOT_SHARED: SharedBy = MappingProxyType({})
DeviceGrant = tuple[str, Sequence[str]]
"""The devices one container holds: (resource name, device ids)."""


@dataclass(frozen=True, slots=True)
class ClaimedDevice:
    """One device of a DRA claim, as the kubelet reports it (`ClaimResource`)."""

    pool: str
    device: str
    driver: str = "gpu.nvidia.com"
    share_id: str | None = None


@dataclass(frozen=True, slots=True)
class ClaimGrant:
    """A ResourceClaim a container uses, with the devices allocated to it."""

    namespace: str
    name: str
    devices: Sequence[ClaimedDevice]

GET_ENABLED = "enabled"
GET_DISABLED = "disabled"
"""Get fails as on kubelets before 1.34 with its feature gate off: UNKNOWN "PodResources API
Get method disabled"."""
GET_UNIMPLEMENTED = "unimplemented"
"""Get is missing, as on kubelets that predate it."""


def _claim_resource(device: ClaimedDevice) -> Any:
    resource = pb.ClaimResource(
        driver_name=device.driver,
        pool_name=device.pool,
        device_name=device.device,
        cdi_devices=[pb.CDIDevice(name=f"k8s.{device.driver}/device={device.device}")],
    )
    if device.share_id is not None:
        resource.share_id = device.share_id
    return resource


def pod_resources(
    namespace: str,
    name: str,
    containers: Mapping[str, Iterable[DeviceGrant]],
    claims: Mapping[str, Iterable[ClaimGrant]] | None = None,
) -> PodResources:
    """Return a pod's answer: device-plugin grants per container, and DRA claims per container
    (`claims` may name containers that hold no device-plugin grant)."""
    claims = claims or {}
    names = list(containers) + [c for c in claims if c not in containers]
    return pb.PodResources(
        name=name,
        namespace=namespace,
        containers=[
            pb.ContainerResources(
                name=container,
                devices=[
                    pb.ContainerDevices(resource_name=res, device_ids=list(ids))
                    for res, ids in containers.get(container, ())
                ],
                dynamic_resources=[
                    pb.DynamicResource(
                        claim_name=claim.name,
                        claim_namespace=claim.namespace,
                        claim_resources=[_claim_resource(d) for d in claim.devices],
                    )
                    for claim in claims.get(container, ())
                ],
            )
            for container in names
        ],
    )


class SimKubeletServicer(pb_grpc.PodResourcesListerServicer):  # type: ignore[misc]
    """The pod-resources service of the simulated kubelet, answering with the pods, the
    allocatable devices and the failures that the tests or the demo set. State is replaced
    wholesale under a lock, so a call sees one consistent node."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pods: tuple[PodResources, ...] = ()
        self._allocatable: tuple[ContainerDevices, ...] = ()
        self._failures: list[tuple[grpc.StatusCode, str]] = []
        self.get_mode = GET_ENABLED
        self.calls: Counter[str] = Counter()

    def set_pods(self, pods: Iterable[PodResources]) -> None:
        """Replace the pods the kubelet reports, with the devices each holds."""
        with self._lock:
            self._pods = tuple(pods)

    def set_allocatable(self, devices: Iterable[ContainerDevices]) -> None:
        """Replace the devices the kubelet reports as allocatable."""
        with self._lock:
            self._allocatable = tuple(devices)

    def fail_next(self, code: grpc.StatusCode, details: str, times: int = 1) -> None:
        """Make the next `times` calls (of any method) fail with this status."""
        with self._lock:
            self._failures += [(code, details)] * times

    def _take_failure(self) -> tuple[grpc.StatusCode, str] | None:
        with self._lock:
            return self._failures.pop(0) if self._failures else None

    def _answer(self, method: str, context: Any) -> bool:
        """Count a call of `method` and fail it with the next queued failure, if any."""
        self.calls[method] += 1
        failure = self._take_failure()
        if failure is not None:
            context.abort(failure[0], failure[1])
        return True

    def List(self, request: Any, context: Any) -> Any:  # noqa: ARG002 (gRPC servicer)
        """Answer List with every pod, unless a queued failure fails the call."""
        self._answer("List", context)
        with self._lock:
            pods = self._pods
        return pb.ListPodResourcesResponse(pod_resources=pods)

    def Get(self, request: Any, context: Any) -> Any:
        """Answer Get with the pod the request names. The call fails as a kubelet without Get
        (or with it disabled) fails, as `get_mode` says, with a queued failure, or with
        UNKNOWN for a pod the kubelet does not know."""
        self.calls["Get"] += 1
        if self.get_mode == GET_UNIMPLEMENTED:
            context.abort(grpc.StatusCode.UNIMPLEMENTED, "unknown method Get")
        if self.get_mode == GET_DISABLED:
            context.abort(grpc.StatusCode.UNKNOWN, "PodResources API Get method disabled")
        failure = self._take_failure()
        if failure is not None:
            context.abort(failure[0], failure[1])
        with self._lock:
            pods = self._pods
        for pod in pods:
            if pod.name == request.pod_name and pod.namespace == request.pod_namespace:
                return pb.GetPodResourcesResponse(pod_resources=pod)
        context.abort(
            grpc.StatusCode.UNKNOWN,
            f"pod {request.pod_name} in namespace {request.pod_namespace} not found",
        )
        raise AssertionError("unreachable")

    def GetAllocatableResources(
        self, request: Any, context: Any  # noqa: ARG002 (gRPC servicer)
    ) -> Any:
        """Answer with the allocatable devices, unless a queued failure fails the call."""
        self._answer("GetAllocatableResources", context)
        with self._lock:
            devices = self._allocatable
        return pb.AllocatableResourcesResponse(devices=devices)


@dataclass
class SimKubeletHandle:
    """A running simulated kubelet: its socket, its service (to change what it answers) and
    the gRPC server behind them."""

    socket_path: str
    servicer: SimKubeletServicer
    _server: grpc.Server

    def stop(self) -> None:
        """Stop serving and remove the socket, as a stopped kubelet leaves the directory."""
        self._server.stop(grace=None).wait(timeout=5)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.socket_path)


def serve_pod_resources(
    socket_path: str, servicer: SimKubeletServicer | None = None
) -> SimKubeletHandle:
    """Start a pod-resources server on `socket_path` (a stale socket file is replaced)."""
    servicer = servicer or SimKubeletServicer()
    with contextlib.suppress(FileNotFoundError):
        os.unlink(socket_path)
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=4, thread_name_prefix="sim-kubelet"),
        options=[("grpc.max_send_message_length", 64 * 1024 * 1024)],
    )
    pb_grpc.add_PodResourcesListerServicer_to_server(servicer, server)
    if server.add_insecure_port(f"unix:{socket_path}") == 0:
        raise OSError(f"could not listen on unix socket {socket_path}")
    server.start()
    return SimKubeletHandle(socket_path, servicer, server)


# -- the demo node's allocations ---------------------------------------------------------------

INFERENCE_NAMESPACE = "inference"
INFERENCE_DEPLOYMENT = "llm-inference"
EMBEDDING_DEPLOYMENT = "text-embedder"
EMBEDDING_REPLICASET_HASH = "5f6b8c9d7"
INFERENCE_REPLICASET_HASH = "7d9c5b8f4"
NOTEBOOK_NAMESPACE = "research"
TIME_SLICE_REPLICAS = 4
_POD_SUFFIXES = ("x2k9p", "b7m4q", "r8t2w", "h3n6z", "f5c1v", "k9w7d", "p2q8s", "m6j3l",
                 "t4g5y", "w1e9u", "c8v2b", "n7x4a", "s3d6f", "g9h1k", "z5r8m", "q2w6e")


def _pod_name(deployment: str, index: int, rs_hash: str = INFERENCE_REPLICASET_HASH) -> str:
    suffix = _POD_SUFFIXES[index % len(_POD_SUFFIXES)]
    if index >= len(_POD_SUFFIXES):
        suffix += str(index // len(_POD_SUFFIXES))
    return f"{deployment}-{rs_hash}-{suffix}"


def _whole_gpu_roles(
    inventory: Inventory, shared_by: SharedBy
) -> tuple[list[Entity], list[Entity]]:
    """Return the GPUs handed out whole and the time-sliced GPUs among the GPUs not in MIG mode."""
    mig_gpus = {inst.gpu for inst in inventory.instances}
    whole = [g for g in inventory.gpus if g.gpu not in mig_gpus]
    if shared_by:
        return ([g for g in whole if g.gpu not in shared_by],
                [g for g in whole if g.gpu in shared_by])
    exclusive = list(whole)
    shared = []
    if len(whole) >= 2:
        shared.append(exclusive.pop())
        if len(whole) >= 4:
            exclusive.pop()  # left free: an idle, unallocated GPU
    return exclusive, shared


def _mig_resource(inst: Entity) -> str:
    return "nvidia.com/mig-" + (inst.gpu_instance_profile or "unknown").replace("+", ".")


def plan_allocations(inventory: Inventory, *, shared_by: SharedBy = NOT_SHARED
                     ) -> list[PodResources]:
    """Plan deterministic demo allocations for this inventory.

    - every MIG device (compute instance) goes to its own inference pod, under
      `nvidia.com/mig-<GPU-instance profile>`;
    - whole GPUs: with two or more, the last is time-sliced into `TIME_SLICE_REPLICAS`
      replicas of which three are held by notebook pods, and with four or more the one
      before it stays free; the rest go one per inference pod;
    - `shared_by` names GPUs shared by time-slicing (the simulated node says which, and by
      how many: the `a100-timesliced` profile's every GPU, by three): each is split into
      replicas, as many held as it is shared by, by pods of an embedding Deployment, the
      rest left free.
    """
    pods: list[PodResources] = []
    exclusive, shared = _whole_gpu_roles(inventory, shared_by)
    index = 0
    for gpu in exclusive:
        pods.append(
            pod_resources(
                INFERENCE_NAMESPACE,
                _pod_name(INFERENCE_DEPLOYMENT, index),
                {"server": [("nvidia.com/gpu", [gpu.uuid])], "metrics-sidecar": []},
            )
        )
        index += 1
    for inst in inventory.instances:
        for mig in inst.mig_devices:
            pods.append(
                pod_resources(
                    INFERENCE_NAMESPACE,
                    _pod_name(INFERENCE_DEPLOYMENT, index),
                    {"server": [(_mig_resource(inst), [mig.uuid])]},
                )
            )
            index += 1
    if shared_by:
        held = ((g, r) for g in shared for r in range(min(shared_by[g.gpu], TIME_SLICE_REPLICAS)))
        for n, (gpu, replica) in enumerate(held):
            pods.append(
                pod_resources(
                    INFERENCE_NAMESPACE,
                    _pod_name(EMBEDDING_DEPLOYMENT, n, EMBEDDING_REPLICASET_HASH),
                    {"server": [("nvidia.com/gpu", [f"{gpu.uuid}::{replica}"])]},
                )
            )
    else:
        for gpu in shared:
            for replica, user in enumerate(("alice", "bob", "carol")):
                pods.append(
                    pod_resources(
                        NOTEBOOK_NAMESPACE,
                        f"notebook-{user}-0",
                        {"notebook": [("nvidia.com/gpu", [f"{gpu.uuid}::{replica}"])]},
                    )
                )
    return pods


def allocatable_for(
    inventory: Inventory, *, shared_by: SharedBy = NOT_SHARED
) -> list[ContainerDevices]:
    """Return what the device plugin would advertise for this inventory (one entry per resource)."""
    by_resource: dict[str, list[str]] = {}
    _, shared = _whole_gpu_roles(inventory, shared_by)
    shared_gpus = {g.gpu for g in shared}
    mig_gpus = {inst.gpu for inst in inventory.instances}
    for gpu in inventory.gpus:
        if gpu.gpu in mig_gpus:
            continue
        if gpu.gpu in shared_gpus:
            ids = [f"{gpu.uuid}::{r}" for r in range(TIME_SLICE_REPLICAS)]
        else:
            ids = [gpu.uuid]
        by_resource.setdefault("nvidia.com/gpu", []).extend(ids)
    for inst in inventory.instances:
        by_resource.setdefault(_mig_resource(inst), []).extend(m.uuid for m in inst.mig_devices)
    return [
        pb.ContainerDevices(resource_name=res, device_ids=ids)
        for res, ids in by_resource.items()
    ]


def start_sim_kubelet(
    socket_path: str, inventory: Inventory, *, shared_by: SharedBy = NOT_SHARED
) -> SimKubeletHandle:
    """Serve `plan_allocations(inventory)` on `socket_path` until `.stop()`."""
    servicer = SimKubeletServicer()
    servicer.set_pods(plan_allocations(inventory, shared_by=shared_by))
    servicer.set_allocatable(allocatable_for(inventory, shared_by=shared_by))
    return serve_pod_resources(socket_path, servicer)

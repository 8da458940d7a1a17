"""The simulated node's pod objects, as an API server would serve them, for the demo.

`--sim.kubelet` hands the simulated devices to pods (`exporter.simulated.kubelet`); with pod
labels asked for (`--kubernetes.pod-labels inference`, dcgm-exporter's pod labels, pod UID),
`SimPodMetadata` gives those pods the labels an inference cluster puts on them and feeds them
into the same map the API-server watch fills (`exporter.k8s.pod_map`), so everything after
the map - label rules, attribution, exposition - runs as in a cluster, with no API server.

The demo node's pods, by what they hold (see `exporter.simulated.kubelet.plan_allocations`):

- whole GPUs: the workers of an NVIDIA Dynamo graph serving Qwen3-32B, the first half
  prefill, the rest decode, in KAI queue `chat`. Labelled as Dynamo releases that keep
  component type `worker` do: the phase is in the sub-component type;
- MIG devices: an llm-d deployment of `qwen3-8b`, prefill on the larger slices and decode on
  the 1g ones, in KAI queue `search`;
- time-sliced replicas: notebooks in queue `research`, or an embedding service in `batch`.

Each pod also carries labels no preset copies (pod-template hash, selectors, switches).

The simulated GPUs' processes (`SimNvml.tenant_pids`: on `a100-timesliced`, three per GPU) get
cgroup files under a private /proc (`write_demo_proc`): process N of a GPU runs in the
container holding its replica `::N`. With the pods' container ids in their status, process
attribution and virtual GPUs then find each process's container as on a node with `hostPID`.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from exporter.k8s.config import KubernetesConfig
from exporter.k8s.pod_labels import PodLabelRules
from exporter.k8s.pod_map import PodMap, PodObject, ReadsPodMap
from exporter.k8s.proto import PodResources
from exporter.selfmetrics import KUBERNETES_API_ERRORS, KUBERNETES_API_UP
from exporter.series import Family
from exporter.simulated.kubelet import (
    EMBEDDING_DEPLOYMENT,
    EMBEDDING_REPLICASET_HASH,
    INFERENCE_REPLICASET_HASH,
    NOTEBOOK_NAMESPACE,
)

DYNAMO_GRAPH = "qwen3-32b"
DYNAMO_MODEL = "Qwen/Qwen3-32B"
LLM_D_MODEL = "qwen3-8b"
QUEUE_DYNAMO, QUEUE_LLM_D, QUEUE_NOTEBOOKS, QUEUE_EMBEDDING = "chat", "search", "research", "batch"
_UID_NAMESPACE = uuid.UUID("6b3f2c4e-8d1a-4f5e-9c7b-2a1d0e9f8b7c")


def _resources(pod: PodResources) -> list[tuple[str, list[str]]]:
    return [(d.resource_name, list(d.device_ids)) for c in pod.containers for d in c.devices]


def _dynamo_labels(phase: str) -> dict[str, str]:
    component = f"Vllm{phase.capitalize()}Worker"
    return {
        "nvidia.com/dynamo-component-type": "worker",
        "nvidia.com/dynamo-sub-component-type": phase,
        "nvidia.com/dynamo-component": component,
        "nvidia.com/dynamo-graph-deployment-name": DYNAMO_GRAPH,
        "nvidia.com/dynamo-namespace": f"inference-{DYNAMO_GRAPH}",
        # Newer operators label the model's hash; the name is an annotation.
        "nvidia.com/dynamo-base-model-hash":
            hashlib.sha256(DYNAMO_MODEL.encode()).hexdigest()[:8],
        "nvidia.com/selector": f"{DYNAMO_GRAPH}-{component.lower()}",
        "nvidia.com/dynamo-worker-hash": "5d8f2a91",
        "nvidia.com/metrics-enabled": "true",
        "kai.scheduler/queue": QUEUE_DYNAMO,
        "pod-template-hash": INFERENCE_REPLICASET_HASH,
    }


def _llm_d_labels(mig_profile: str) -> dict[str, str]:
    return {
        "llm-d.ai/role": "decode" if mig_profile.startswith("1g") else "prefill",
        "llm-d.ai/model": LLM_D_MODEL,
        "llm-d.ai/inference-serving": "true",
        "llm-d.ai/guide": "pd-disaggregation",
        "kai.scheduler/queue": QUEUE_LLM_D,
        "pod-template-hash": INFERENCE_REPLICASET_HASH,
    }


def demo_pod_labels(pods: Sequence[PodResources]) -> dict[tuple[str, str], dict[str, str]]:
    """Return the labels, by (namespace, name), of each of the simulated kubelet's pods."""
    whole = [(p.namespace, p.name) for p in pods if any(
        res == "nvidia.com/gpu" and not any("::" in i for i in ids)
        for res, ids in _resources(p))]
    prefill = set(whole[:(len(whole) + 1) // 2])
    out: dict[tuple[str, str], dict[str, str]] = {}
    for pod in pods:
        key = (pod.namespace, pod.name)
        mig = [res.removeprefix("nvidia.com/mig-") for res, _ in _resources(pod)
               if res.startswith("nvidia.com/mig-")]
        if pod.namespace == NOTEBOOK_NAMESPACE:
            out[key] = {"kai.scheduler/queue": QUEUE_NOTEBOOKS,
                        "app.kubernetes.io/name": "jupyter"}
        elif pod.name.startswith(f"{EMBEDDING_DEPLOYMENT}-"):
            out[key] = {"kai.scheduler/queue": QUEUE_EMBEDDING,
                        "app.kubernetes.io/name": EMBEDDING_DEPLOYMENT,
                        "pod-template-hash": EMBEDDING_REPLICASET_HASH}
        elif mig:
            out[key] = _llm_d_labels(mig[0])
        elif key in whole:
            out[key] = _dynamo_labels("prefill" if key in prefill else "decode")
    return out


def demo_pod_uid(namespace: str, name: str) -> str:
    """Return the pod's UID, derived from its namespace and name so that it is the same at
    every start."""
    return str(uuid.uuid5(_UID_NAMESPACE, f"{namespace}/{name}"))


def demo_container_id(namespace: str, pod: str, container: str) -> str:
    """Return a container runtime id (64 hex digits, as containerd's), fixed per container."""
    return hashlib.sha256(f"{namespace}/{pod}/{container}".encode()).hexdigest()


def demo_pod_objects(pods: Sequence[PodResources], node_name: str) -> list[PodObject]:
    """Return the pods as the API server serves them (what the watch would list), running."""
    labels = demo_pod_labels(pods)
    objects: list[PodObject] = []
    for pod in pods:
        meta: dict[str, Any] = {
            "namespace": pod.namespace,
            "name": pod.name,
            "uid": demo_pod_uid(pod.namespace, pod.name),
            "labels": labels.get((pod.namespace, pod.name), {}),
            "resourceVersion": "1",
        }
        statuses = [{"name": c.name, "containerID": "containerd://"
                     + demo_container_id(pod.namespace, pod.name, c.name)}
                    for c in pod.containers]
        objects.append({"apiVersion": "v1", "kind": "Pod", "metadata": meta,
                        "spec": {"nodeName": node_name},
                        "status": {"phase": "Running", "containerStatuses": statuses}})
    return objects


def write_demo_proc(root: Path, pods: Sequence[PodResources],
                    tenant_pids: Mapping[str, Sequence[int]]) -> int:
    """Write `<root>/<pid>/cgroup` for each simulated process that runs in a pod (cgroup v2,
    systemd driver, containerd, as on a current node); returns how many."""
    written = 0
    for pod in pods:
        uid = demo_pod_uid(pod.namespace, pod.name).replace("-", "_")
        for container in pod.containers:
            cid = demo_container_id(pod.namespace, pod.name, container.name)
            for device in container.devices:
                for device_id in device.device_ids:
                    gpu, _, replica = device_id.partition("::")
                    pids = tenant_pids.get(gpu, ())
                    if not replica.isdigit() or int(replica) >= len(pids):
                        continue
                    directory = root / str(pids[int(replica)])
                    directory.mkdir(parents=True, exist_ok=True)
                    (directory / "cgroup").write_text(
                        f"0::/kubepods.slice/kubepods-besteffort.slice/"
                        f"kubepods-besteffort-pod{uid}.slice/cri-containerd-{cid}.scope\n")
                    written += 1
    return written


class SimPodMetadata(ReadsPodMap):
    """The pod-metadata source of the simulated node: the demo's pods, put into the pod map
    once at start, with the API-server self-metrics of an established watch."""

    def __init__(self, pods: Iterable[PodObject], rules: PodLabelRules) -> None:
        self._objects = tuple(pods)
        self._map = PodMap(rules)

    @classmethod
    def for_node(cls, allocations: Sequence[PodResources], config: KubernetesConfig
                 ) -> SimPodMetadata:
        """Return the pod metadata of the pods in `allocations` on the node `config` names
        (`sim-node` without one), labelled by the pod label rules `config` sets."""
        node = config.node_name or "sim-node"
        return cls(demo_pod_objects(allocations, node), PodLabelRules.from_config(config))

    def start(self) -> None:
        """Put the demo's pods into the pod map, once: they never change."""
        self._map.replace_all(self._objects)

    def families(self) -> list[Family]:
        """Return the API-server self-metrics of a watch that works (up, no errors) and the
        pod map's own families."""
        return [KUBERNETES_API_UP.single(1.0), KUBERNETES_API_ERRORS.single(0.0),
                *self._map.families()]

    def close(self) -> None:
        """Do nothing: there is no thread and no connection to stop."""

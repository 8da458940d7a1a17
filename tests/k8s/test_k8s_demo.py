"""The demo path: the simulated node's inventory served by `start_sim_kubelet` and attributed
by `KubeletSource` in one poll."""

from __future__ import annotations

import pytest

from exporter.devices.enumerate import enumerate_devices
from exporter.devices.filter import ALL_DEVICES
from exporter.devices.model import Inventory
from exporter.k8s.config import KubernetesConfig
from exporter.k8s.inference_labels import QUEUE, ROLE
from exporter.k8s.source import KubeletSource
from exporter.simulated.kubelet import plan_allocations, start_sim_kubelet
from exporter.simulated.pods import SimPodMetadata, demo_pod_labels, demo_pod_objects


def sim_inventory(profile: str) -> Inventory:
    from exporter.simulated.node import SimNvml

    lib = SimNvml(profile)
    lib.nvmlInit()
    return enumerate_devices(lib, ALL_DEVICES).inventory


def sim_shared_by(profile: str) -> dict[int, int]:
    """The GPUs the profile's node shares by time-slicing, as serve hands them out."""
    from exporter.simulated.node import SimNvml

    return SimNvml(profile).shared_by


@pytest.mark.parametrize("profile", ["h100-8", "h200-mig", "a100-4", "a100-timesliced", "l4-1"])
async def test_every_allocation_attributed_in_one_poll(socket_path: str, profile: str) -> None:
    inventory = sim_inventory(profile)
    handle = start_sim_kubelet(socket_path, inventory)
    source = KubeletSource(KubernetesConfig(enabled=True, pod_resources_socket=socket_path))
    try:
        attribution = await source.refresh(inventory)
        families = {f.name: f for f in source.families()}
    finally:
        await source.close()
        handle.stop()
    unattributed = families["gpu_exporter_unattributed_devices"].samples
    assert sum(s.value for s in unattributed) == 0
    rows = [dict(s.labels) for s in families["gpu_exporter_pod_gpu_allocation"].samples]
    shared_keys = {(int(r["gpu"]), int(r.get("GPU_I_ID", -1))) for r in rows}
    # Every MIG GPU instance is held by someone; every whole GPU but (with four or more of
    # them) one deliberately idle GPU is held by someone.
    held = set(attribution.owners) | shared_keys
    assert {i.key for i in inventory.instances} <= held
    mig_gpus = {i.gpu for i in inventory.instances}
    whole = [g.key for g in inventory.gpus if g.gpu not in mig_gpus]
    idle = set(whole) - held
    assert len(idle) == (1 if len(whole) >= 4 else 0)
    assert not held & {(g, -1) for g in mig_gpus}
    # Time-sliced replicas: one GPU shared by three notebook pods, never given an owner.
    if len(whole) >= 2:
        notebooks = [r for r in rows if r["namespace"] == "research"]
        assert len(notebooks) == 3
        assert len({r["gpu"] for r in notebooks}) == 1
        assert {r["replica"] for r in notebooks} == {"0", "1", "2"}
        assert (int(notebooks[0]["gpu"]), -1) not in attribution.owners
    assert attribution.owners
    assert all(ref.namespace == "inference" and ref.container == "server"
               for ref in attribution.owners.values())


async def test_time_sliced_node_has_no_owners(socket_path: str) -> None:
    inventory = sim_inventory("a100-timesliced")
    shared_by = sim_shared_by("a100-timesliced")
    assert sorted(shared_by) == [g.gpu for g in inventory.gpus]  # every GPU, by three
    assert set(shared_by.values()) == {3}
    handle = start_sim_kubelet(socket_path, inventory, shared_by=shared_by)
    source = KubeletSource(KubernetesConfig(enabled=True, pod_resources_socket=socket_path))
    try:
        attribution = await source.refresh(inventory)
        (rows,) = [f.samples for f in source.families()
                   if f.name == "gpu_exporter_pod_gpu_allocation"]
    finally:
        await source.close()
        handle.stop()
    assert attribution.owners == {}
    per_gpu = {g.uuid: sorted(dict(s.labels)["replica"] for s in rows
                              if dict(s.labels)["UUID"] == g.uuid) for g in inventory.gpus}
    assert per_gpu == {g.uuid: ["0", "1", "2"] for g in inventory.gpus}
    assert len({dict(s.labels)["pod"] for s in rows}) == 3 * len(inventory.gpus)


@pytest.mark.parametrize("profile", ["h100-8", "h200-mig", "a100-timesliced", "l4-1"])
async def test_simulated_pod_labels_through_the_real_rules(socket_path: str,
                                                           profile: str) -> None:
    """`--sim.kubelet --kubernetes.pod-labels inference`: the demo's pods get their Dynamo,
    llm-d and KAI labels from the simulated pod metadata, named by the preset's rules."""
    inventory = sim_inventory(profile)
    shared_by = sim_shared_by(profile)
    handle = start_sim_kubelet(socket_path, inventory, shared_by=shared_by)
    config = KubernetesConfig(enabled=True, pod_resources_socket=socket_path,
                              pod_label_presets=("inference",))
    metadata = SimPodMetadata.for_node(plan_allocations(inventory, shared_by=shared_by),
                                       config)
    source = KubeletSource(config, metadata=metadata)
    try:
        attribution = await source.refresh(inventory)
        families = {f.name: f for f in source.families()}
    finally:
        await source.close()
        handle.stop()
    holders = [dict(ref.extra) for ref in attribution.owners.values()]
    holders += [dict(s.labels) for s in families["gpu_exporter_pod_gpu_allocation"].samples]
    assert holders
    assert all("kai_scheduler_queue" in h for h in holders)
    assert not any(name.startswith("label_") or name == "pod_uid" for h in holders for name in h)
    roles = {ROLE.value_of(h) for h in holders}
    queues = {QUEUE.value_of(h) for h in holders}
    if shared_by:
        assert (roles, queues) == ({None}, {"batch"})
    else:
        # One GPU (l4-1) makes a graph of one prefill worker.
        assert roles - {None} == ({"prefill"} if profile == "l4-1" else {"prefill", "decode"})
        assert "chat" in queues
    if inventory.instances:
        # MIG slices serve llm-d: its role and model; whole GPUs serve the Dynamo graph.
        assert {h.get("llm_d_ai_model") for h in holders} >= {"qwen3-8b"}
        assert {"search", "research"} <= queues
    assert families["gpu_exporter_kubernetes_api_up"].samples[0].value == 1.0
    dropped = families["gpu_exporter_pod_labels_dropped"].samples
    assert sum(s.value for s in dropped) == 0


def test_demo_labels_follow_the_stacks() -> None:
    pods = plan_allocations(sim_inventory("h200-mig"))
    labels = demo_pod_labels(pods)
    assert set(labels) == {(p.namespace, p.name) for p in pods}
    dynamo = [v for v in labels.values() if "nvidia.com/dynamo-component-type" in v]
    llm_d = [v for v in labels.values() if "llm-d.ai/role" in v]
    assert sorted(v["nvidia.com/dynamo-sub-component-type"] for v in dynamo) == [
        "decode", "decode", "prefill", "prefill"]
    assert all(v["nvidia.com/dynamo-component-type"] == "worker" for v in dynamo)
    assert {v["llm-d.ai/role"] for v in llm_d} == {"prefill", "decode"}
    objects = demo_pod_objects(pods, "node-a")
    uids = {o["metadata"]["uid"] for o in objects}
    assert len(uids) == len(pods)
    assert demo_pod_objects(pods, "node-a") == objects  # the same pods on every start

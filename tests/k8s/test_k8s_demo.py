"""The demo path: the simulated node's inventory served by `start_sim_kubelet` and attributed
by `KubeletSource` in one poll."""

from __future__ import annotations

import pytest

from exporter.devices.enumerate import enumerate_devices
from exporter.devices.filter import ALL_DEVICES
from exporter.devices.model import Inventory
from exporter.k8s.config import KubernetesConfig
from exporter.k8s.simkubelet import start_sim_kubelet
from exporter.k8s.source import KubeletSource


def sim_inventory(profile: str) -> Inventory:
    from exporter.devices.sim import SimNvml

    lib = SimNvml(profile)
    lib.nvmlInit()
    return enumerate_devices(lib, ALL_DEVICES).inventory


@pytest.mark.parametrize("profile", ["h100-8", "h200-mig", "a100-timesliced", "l4-1"])
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
        assert len(notebooks) == 3 and len({r["gpu"] for r in notebooks}) == 1
        assert {r["replica"] for r in notebooks} == {"0", "1", "2"}
        assert (int(notebooks[0]["gpu"]), -1) not in attribution.owners
    assert all(ref.namespace == "inference" and ref.container == "server"
               for ref in attribution.owners.values())


async def test_time_sliced_node_has_no_owners(socket_path: str) -> None:
    inventory = sim_inventory("a100-timesliced")
    handle = start_sim_kubelet(socket_path, inventory, time_sliced=True)
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

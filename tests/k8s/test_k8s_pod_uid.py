"""`pod_uid` on every attribution path with `--kubernetes-enable-pod-uid`, as dcgm-exporter
4.8.4's `addPodIdentityAttributes` adds it: a GPU held through the device plugin, the copies
of a shared GPU with virtual GPUs, and GPUs and MIG devices claimed through DRA (where 4.8.3
had none). The real pod-resources server (the simulated kubelet) reports the allocations;
the fake API server serves the pods (their UIDs) and this node's ResourceSlices."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from exporter.devices.model import Inventory
from exporter.k8s.config import KubernetesConfig
from exporter.k8s.dra import DraClaims, claim_labels
from exporter.k8s.kubelet_client import PodResourcesClient
from exporter.k8s.resourceslices import SliceDevice
from exporter.k8s.source import KubeletSource
from exporter.k8s.types import Attribution
from exporter.simulated.kubelet import ClaimedDevice, ClaimGrant, SimKubeletHandle, pod_resources
from tests.support.apiserver import FakeApiServer, pod, resource_slice
from tests.support.wait import wait_until

from .k8s_helpers import (
    gpu_uuid,
    mig_instance,
    mig_uuid,
    plain_node,
    slice_gpu,
    slice_mig,
    whole_gpu,
)

NODE = "node-a"
DRIVER = "gpu.nvidia.com"
MIG_1G = "gpu-2-mig-1g18gb-19-0"
PODS = [pod("inference", "llm-0", "uid-llm-0", {"team": "ml"}),
        pod("research", "nb-a", "uid-nb-a", {}), pod("research", "nb-b", "uid-nb-b", {}),
        pod("inference", "mig-0", "uid-mig-0", {})]


@pytest.fixture
def api() -> Iterator[FakeApiServer]:
    server = FakeApiServer().start()
    server.state.pods = list(PODS)
    server.state.slices = [resource_slice(f"{NODE}-{DRIVER}-7xk2p", NODE, [
        slice_gpu(0), slice_gpu(1), slice_mig(2, 1, "1g.18gb", 19, 0)])]
    try:
        yield server
    finally:
        server.stop()


async def _attribution(socket_path: str, inventory_gpus: int = 2, **config: object
                       ) -> tuple[Attribution, KubeletSource]:
    settings: dict[str, object] = {"enabled": True, "pod_resources_socket": socket_path,
                                   "node_name": NODE, **config}
    kube = KubernetesConfig(**settings)  # type: ignore[arg-type]
    dra = DraClaims.from_config(kube, retry_s=0.2) if kube.dra else None
    source = KubeletSource(kube, client=PodResourcesClient(socket_path), dra=dra)
    inventory = plain_node(inventory_gpus)
    if kube.dra:
        inventory = Inventory(
            gpus=(whole_gpu(0), whole_gpu(1), whole_gpu(2)),
            instances=(mig_instance(2, 1, "1g.18gb"),), driver_version="590.48.01")
    await source.refresh(inventory)  # starts the watches
    assert await source.wait_metadata(30)
    metadata = source._metadata
    assert metadata is not None
    wait_until(lambda: metadata.labels_for("inference", "llm-0") != (), what="pod UIDs")
    if dra is not None:
        assert dra.watch is not None
        assert dra.watch.synced.wait(10)
    return await source.refresh(inventory), source


@pytest.mark.usefixtures("kubeconfig")
async def test_the_device_plugin_path_carries_pod_uid(
        kubelet: SimKubeletHandle, socket_path: str) -> None:
    kubelet.servicer.set_pods([
        pod_resources("inference", "llm-0", {"server": [("nvidia.com/gpu", [gpu_uuid(0)])]})])
    attribution, source = await _attribution(socket_path, enable_pod_uid=True)
    try:
        assert dict(attribution.owners[(0, -1)].extra) == {"pod_uid": "uid-llm-0"}
    finally:
        await source.close()
    # Off: no pod_uid (and no watch needed for it).
    off, source = await _attribution(socket_path, enable_pod_uid=False, pod_labels="team")
    try:
        assert dict(off.owners[(0, -1)].extra) == {"pod_uid": "uid-llm-0", "label_team": "ml"}
    finally:
        await source.close()


@pytest.mark.usefixtures("kubeconfig")
async def test_every_virtual_gpu_copy_carries_its_holders_pod_uid(
        kubelet: SimKubeletHandle, socket_path: str) -> None:
    shared = gpu_uuid(1)
    kubelet.servicer.set_pods([
        pod_resources("inference", "llm-0", {"server": [("nvidia.com/gpu", [gpu_uuid(0)])]}),
        pod_resources("research", "nb-a", {"nb": [("nvidia.com/gpu", [f"{shared}::0"])]}),
        pod_resources("research", "nb-b", {"nb": [("nvidia.com/gpu", [f"{shared}::1"])]}),
    ])
    attribution, source = await _attribution(socket_path, enable_pod_uid=True,
                                              virtual_gpus=True)
    try:
        copies = [(ref.pod, dict(ref.extra)) for ref in attribution.sharers[(1, -1)]]
        assert copies == [("nb-a", {"pod_uid": "uid-nb-a", "vgpu": "0"}),
                          ("nb-b", {"pod_uid": "uid-nb-b", "vgpu": "1"})]
        assert dict(attribution.owners[(0, -1)].extra) == {"pod_uid": "uid-llm-0"}
    finally:
        await source.close()


@pytest.mark.usefixtures("kubeconfig")
async def test_dra_claims_carry_pod_uid_and_the_mig_uuid_only_when_known(
        kubelet: SimKubeletHandle, socket_path: str) -> None:
    kubelet.servicer.set_pods([
        pod_resources("inference", "llm-0", {}, {"server": [
            ClaimGrant("inference", "llm-0-gpu", [ClaimedDevice(NODE, "gpu-0")])]}),
        pod_resources("inference", "mig-0", {"server": []}, {"server": [
            ClaimGrant("inference", "mig-0-mig", [ClaimedDevice(NODE, MIG_1G)])]}),
    ])
    attribution, source = await _attribution(socket_path, enable_pod_uid=True, dra=True,
                                              pod_namespace="gpu-operator",
                                              pod_name="nvidia-dcgm-exporter-5kq2x")
    try:
        gpu = dict(attribution.owners[(0, -1)].extra)
        assert gpu["pod_uid"] == "uid-llm-0"
        assert gpu["dra_claim_name"] == "llm-0-gpu"
        assert "dra_mig_device_uuid" not in gpu
        mig = dict(attribution.owners[(2, 1)].extra)
        assert mig["pod_uid"] == "uid-mig-0"
        assert (mig["dra_mig_profile"], mig["dra_mig_device_uuid"]) == (
            "1g.18gb", mig_uuid(2, 1, 0))
        # pod_uid first, as on the device-plugin path, then the claim's labels.
        assert next(iter(gpu)) == "pod_uid"
    finally:
        await source.close()


def test_a_mig_claim_without_a_uuid_has_no_empty_uuid_label() -> None:
    labels = dict(claim_labels("c", "ns", NODE, "gpu-2-mig-3g71gb-9-4",
                               SliceDevice("mig", None, "3g.71gb")))
    assert labels["dra_mig_profile"] == "3g.71gb"
    assert "dra_mig_device_uuid" not in labels

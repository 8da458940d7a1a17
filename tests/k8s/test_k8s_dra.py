"""GPUs claimed through DRA: a real pod-resources server (the simulated kubelet) reporting
`dynamic_resources`, and the fake API server serving this node's ResourceSlices."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from exporter.devices.model import Inventory
from exporter.k8s.config import KubernetesConfig
from exporter.k8s.dra import DraClaims, exporter_pod
from exporter.k8s.kubelet_client import PodResourcesClient
from exporter.k8s.resourceslices import SliceDevice, SliceIndex, parse_slice
from exporter.k8s.source import KubeletSource
from exporter.k8s.types import PodRef
from exporter.series import Labels
from exporter.simulated.kubelet import ClaimedDevice, ClaimGrant, SimKubeletHandle, pod_resources
from tests.support.apiserver import SLICES, FakeApiServer, resource_slice
from tests.support.wait import wait_until

from .k8s_helpers import gpu_uuid, mig_instance, mig_uuid, slice_gpu, slice_mig, whole_gpu

NODE = "node-a"
DRIVER = "gpu.nvidia.com"
MIG_1G = "gpu-2-mig-1g18gb-19-0"
MIG_3G_OFFER = "gpu-2-mig-3g71gb-9-4"
EXPORTER = ("gpu-operator", "nvidia-dcgm-exporter-dra-5kq2x")
SLICE = resource_slice(f"{NODE}-{DRIVER}-7xk2p", NODE, [
    slice_gpu(0), slice_gpu(1), slice_mig(2, 1, "1g.18gb", 19, 0),
    slice_mig(2, 3, "3g.71gb", 9, 4, created=False),
])


def dra_node() -> Inventory:
    """GPUs 0 and 1 whole; GPU 2 in MIG mode with GI 1 (1g.18gb) and GI 3 (3g.71gb)."""
    return Inventory(
        gpus=(whole_gpu(0), whole_gpu(1), whole_gpu(2)),
        instances=(mig_instance(2, 1, "1g.18gb"), mig_instance(2, 3, "3g.71gb")),
        driver_version="590.48.01",
    )


def claim(namespace: str, name: str, *devices: str, share_id: str | None = None
          ) -> ClaimGrant:
    return ClaimGrant(namespace, name,
                      [ClaimedDevice(NODE, device, share_id=share_id) for device in devices])


def dra_labels(claim_name: str, namespace: str, device: str) -> Labels:
    return (("dra_claim_name", claim_name), ("dra_claim_namespace", namespace),
            ("dra_driver_name", DRIVER), ("dra_pool_name", NODE), ("dra_device_name", device))




@pytest.fixture
def api() -> Iterator[FakeApiServer]:
    server = FakeApiServer().start()
    server.state.slices = [SLICE]
    try:
        yield server
    finally:
        server.stop()


class Node:
    """A KubeletSource with DRA on, its DraClaims, and helpers to read what it reports."""

    def __init__(self, socket_path: str, **config: object) -> None:
        settings: dict[str, object] = {
            "enabled": True, "pod_resources_socket": socket_path, "node_name": NODE,
            "dra": True, "pod_namespace": EXPORTER[0], "pod_name": EXPORTER[1], **config}
        self.config = KubernetesConfig(**settings)  # type: ignore[arg-type]
        self.dra = DraClaims.from_config(self.config, retry_s=0.2)
        self.source = KubeletSource(self.config, client=PodResourcesClient(socket_path),
                                    dra=self.dra)

    async def refresh(self, inventory: Inventory | None = None) -> dict[tuple[int, int], PodRef]:
        attribution = await self.source.refresh(inventory or dra_node())
        return dict(attribution.owners)

    async def synced(self) -> None:
        await self.refresh()  # starts the watch
        assert self.dra.watch is not None
        assert self.dra.watch.synced.wait(10)

    def family(self, name: str) -> dict[Labels, float]:
        (fam,) = [f for f in self.source.families() if f.name == name]
        return {s.labels: s.value for s in fam.samples}

    def rows(self) -> list[dict[str, str]]:
        return [dict(labels) for labels in self.family("gpu_exporter_pod_gpu_allocation")]

    def unresolved(self) -> dict[str, float]:
        return {dict(k)["reason"]: v
                for k, v in self.family("gpu_exporter_dra_unresolved_devices").items()}


@pytest.fixture
async def node(kubeconfig: str, socket_path: str,  # noqa: ARG001 (set as $KUBECONFIG)
               kubelet: SimKubeletHandle,  # noqa: ARG001 (serving on socket_path)
               ) -> AsyncIterator[Node]:
    made = Node(socket_path)
    try:
        yield made
    finally:
        await made.source.close()


async def test_an_exclusive_gpu_and_a_mig_device_carry_pod_and_claim_labels(
    node: Node, kubelet: SimKubeletHandle, api: FakeApiServer
) -> None:
    kubelet.servicer.set_pods([
        pod_resources("inference", "llm-0", {}, {"server": [
            claim("inference", "llm-0-gpu-x7k2q", "gpu-0")]}),
        pod_resources("inference", "mig-0", {"server": []}, {"server": [
            claim("inference", "mig-0-mig-q9w4z", MIG_1G)]}),
    ])
    await node.synced()
    owners = await node.refresh()
    assert owners == {
        (0, -1): PodRef("llm-0", "inference", "server",
                        dra_labels("llm-0-gpu-x7k2q", "inference", "gpu-0")),
        (2, 1): PodRef("mig-0", "inference", "server", (
            *dra_labels("mig-0-mig-q9w4z", "inference", MIG_1G),
            ("dra_mig_profile", "1g.18gb"), ("dra_mig_device_uuid", mig_uuid(2, 1, 0)))),
    }
    assert node.rows() == []
    assert node.unresolved() == {"no_resource_slice": 0, "no_uuid": 0}
    assert node.family("gpu_exporter_dra_resource_slice_watch_up") == {(): 1}
    (listed,) = [(path, q) for path, q in api.state.requests if q.get("watch") != ["true"]]
    assert listed == ("/apis/resource.k8s.io/v1/resourceslices",
                      {"fieldSelector": [f"spec.nodeName={NODE}"]})


async def test_a_claim_shared_by_two_pods_and_a_share_id_give_allocation_rows(
    node: Node, kubelet: SimKubeletHandle
) -> None:
    share = "3f9d2c1e-7a4b-4c8e-9d1f-2b6a5e8c7d40"
    other_share = "0c1d2e3f-4a5b-6c7d-8e9f-a0b1c2d3e4f5"
    kubelet.servicer.set_pods([
        pod_resources("research", "nb-a", {}, {"nb": [claim("research", "shared-gpu", "gpu-1")]}),
        pod_resources("research", "nb-b", {}, {"nb": [claim("research", "shared-gpu", "gpu-1")]}),
        pod_resources("inference", "embed-0", {}, {"server": [
            claim("inference", "embed-0-gpu", "gpu-0", share_id=share)]}),
        pod_resources("inference", "embed-1", {}, {"server": [
            claim("inference", "embed-1-gpu", "gpu-0", share_id=other_share)]}),
    ])
    await node.synced()
    assert await node.refresh() == {}  # neither GPU is one container's
    by_pod = {row["pod"]: row for row in node.rows()}
    assert set(by_pod) == {"nb-a", "nb-b", "embed-0", "embed-1"}
    assert by_pod["nb-a"] == {
        "gpu": "1", "UUID": gpu_uuid(1), "pod": "nb-a", "namespace": "research",
        "container": "nb", "resource": DRIVER, **dict(dra_labels("shared-gpu", "research",
                                                                 "gpu-1"))}
    assert by_pod["embed-0"]["gpu"] == "0"
    assert by_pod["embed-0"]["dra_share_id"] == share
    assert by_pod["embed-1"]["dra_share_id"] == other_share


async def test_one_share_held_by_one_container_makes_the_gpu_its_own(
    node: Node, kubelet: SimKubeletHandle
) -> None:
    # As a time-sliced GPU with one holder: dcgm-exporter labels it with that pod.
    kubelet.servicer.set_pods([pod_resources("inference", "embed-0", {}, {"server": [
        claim("inference", "embed-0-gpu", "gpu-0",
              share_id="3f9d2c1e-7a4b-4c8e-9d1f-2b6a5e8c7d40")]})])
    await node.synced()
    owners = await node.refresh()
    assert list(owners) == [(0, -1)]
    assert owners[0, -1].pod == "embed-0"
    assert dict(owners[0, -1].extra)["dra_device_name"] == "gpu-0"


async def test_a_slice_arriving_after_the_allocation_labels_the_next_refresh(
    node: Node, kubelet: SimKubeletHandle, api: FakeApiServer
) -> None:
    api.state.slices = []
    kubelet.servicer.set_pods([pod_resources("inference", "llm-0", {}, {"server": [
        claim("inference", "llm-0-gpu", "gpu-0")]})])
    await node.synced()
    assert await node.refresh() == {}  # unknown device: unlabelled, never a guess
    assert node.unresolved() == {"no_resource_slice": 1, "no_uuid": 0}
    api.state.push("ADDED", SLICE, SLICES)
    wait_until(lambda: node.dra.index.lookup(NODE, "gpu-0") is not None)
    assert await node.refresh() == {
        (0, -1): PodRef("llm-0", "inference", "server",
                        dra_labels("llm-0-gpu", "inference", "gpu-0"))}
    assert node.unresolved() == {"no_resource_slice": 0, "no_uuid": 0}
    api.state.push("DELETED", SLICE, SLICES)
    wait_until(lambda: node.dra.index.lookup(NODE, "gpu-0") is None)
    assert await node.refresh() == {}


async def test_the_exporters_own_admin_claim_on_every_gpu_is_left_out(
    node: Node, kubelet: SimKubeletHandle
) -> None:
    everything = ("gpu-0", "gpu-1", MIG_1G)
    kubelet.servicer.set_pods([
        pod_resources(*EXPORTER, {}, {"nvidia-dcgm-exporter-dra": [
            claim(EXPORTER[0], f"{EXPORTER[1]}-admin-gpus-8w2rt", *everything)]}),
        pod_resources("inference", "llm-0", {}, {"server": [
            claim("inference", "llm-0-gpu", "gpu-0")]}),
    ])
    await node.synced()
    assert set(await node.refresh()) == {(0, -1)}
    assert node.rows() == []
    assert EXPORTER[1] not in repr(node.source.families())

    # The same answer, not knowing which pod is the exporter: GPU 1 and the MIG device would
    # be labelled with the exporter's pod, and GPU 0 would look shared with it.
    socket_path = node.config.pod_resources_socket
    blind = KubeletSource(node.config, client=PodResourcesClient(socket_path),
                          dra=DraClaims(node.dra.index))
    try:
        owners = (await blind.refresh(dra_node())).owners
        assert {key: ref.pod for key, ref in owners.items()} == {
            (1, -1): EXPORTER[1], (2, 1): EXPORTER[1]}
        (rows,) = [f for f in blind.families() if f.name == "gpu_exporter_pod_gpu_allocation"]
        assert {(dict(s.labels)["gpu"], dict(s.labels)["pod"]) for s in rows.samples} == {
            ("0", EXPORTER[1]), ("0", "llm-0")}
    finally:
        await blind.close()


@pytest.mark.usefixtures("kubeconfig")
async def test_in_pod_scope_the_own_pods_claims_are_what_is_shown(
    socket_path: str, kubelet: SimKubeletHandle
) -> None:
    kubelet.servicer.set_pods([
        pod_resources("inference", "llm-0", {}, {"server": [
            claim("inference", "llm-0-gpu", "gpu-1")]}),
        pod_resources("inference", "llm-1", {}, {"server": [
            claim("inference", "llm-1-gpu", "gpu-0")]}),
    ])
    node = Node(socket_path, scope="pod", pod_namespace="inference", pod_name="llm-0")
    try:
        await node.synced()
        attribution = await node.source.refresh(dra_node())
        assert attribution.visible == frozenset({(1, -1)})
        assert set(attribution.owners) == {(1, -1)}
    finally:
        await node.source.close()


async def test_devices_without_uuid_are_counted_and_other_drivers_ignored(
    node: Node, kubelet: SimKubeletHandle
) -> None:
    kubelet.servicer.set_pods([pod_resources("inference", "mig-1", {}, {"server": [
        claim("inference", "mig-1-offer", MIG_3G_OFFER),
        ClaimGrant("inference", "nic", [ClaimedDevice(NODE, "eth1", driver="dra.example.com")]),
    ]})])
    await node.synced()
    assert await node.refresh() == {}
    assert node.rows() == []
    assert node.unresolved() == {"no_resource_slice": 0, "no_uuid": 1}


async def test_refused_slices_leave_dra_devices_unlabelled_and_say_why(
    node: Node, kubelet: SimKubeletHandle, api: FakeApiServer
) -> None:
    api.state.denied.add((SLICES, "list"))
    kubelet.servicer.set_pods([pod_resources("inference", "llm-0", {}, {"server": [
        claim("inference", "llm-0-gpu", "gpu-0")]})])
    await node.refresh()
    assert node.dra.watch is not None
    wait_until(lambda: node.dra.watch is not None and node.dra.watch.errors >= 1)
    assert await node.refresh() == {}
    assert node.family("gpu_exporter_dra_resource_slice_watch_up") == {(): 0}
    assert node.family("gpu_exporter_dra_resource_slice_watch_errors") != {(): 0}
    assert node.unresolved()["no_resource_slice"] == 1
    assert node.family("gpu_exporter_kubelet_up") == {(): 1}


# -- slices and identity, without servers --------------------------------------------------


def test_slices_in_v1beta1_shape_qualified_names_and_newest_generation() -> None:
    old = resource_slice("s-old", NODE, [slice_gpu(0)], generation=1)
    new = resource_slice("s-new", NODE, [slice_gpu(1)], generation=2)
    beta = resource_slice("s-beta", NODE, [], pool="other-pool")
    beta["spec"]["devices"] = [{"name": "gpu-7", "basic": {"attributes": {
        "gpu.nvidia.com/type": {"string": "gpu"}, "gpu.nvidia.com/uuid": {"string": "GPU-7"}}}}]
    foreign = resource_slice("s-nic", NODE, [slice_gpu(0)], driver="dra.example.com")
    assert parse_slice(foreign) is None
    index = SliceIndex()
    index.replace({name: parsed for name, obj in
                   (("s-old", old), ("s-new", new), ("s-beta", beta))
                   if (parsed := parse_slice(obj)) is not None})
    assert index.lookup(NODE, "gpu-0") is None  # generation 1 is superseded
    assert index.lookup(NODE, "gpu-1") == SliceDevice("gpu", gpu_uuid(1))
    assert index.lookup("other-pool", "gpu-7") == SliceDevice("gpu", "GPU-7")
    index.put("s-new", None)
    assert index.lookup(NODE, "gpu-0") == SliceDevice("gpu", gpu_uuid(0))


def test_the_exporters_pod_from_env_else_from_its_service_account(tmp_path: Path) -> None:
    config = KubernetesConfig(enabled=True, dra=True)
    absent = tmp_path / "absent"
    assert exporter_pod(replace(config, pod_name="p", pod_namespace="ns"),
                        namespace_file=absent) == ("ns", "p")
    assert exporter_pod(config, namespace_file=absent, hostname=lambda: "h") is None
    sa_namespace = tmp_path / "namespace"
    sa_namespace.write_text("gpu-operator")
    assert exporter_pod(config, namespace_file=sa_namespace,
                        hostname=lambda: "nvidia-dcgm-exporter-dra-5kq2x") == EXPORTER
    on_host_network = replace(config, node_name=NODE)
    assert exporter_pod(on_host_network, namespace_file=sa_namespace,
                        hostname=lambda: NODE) is None

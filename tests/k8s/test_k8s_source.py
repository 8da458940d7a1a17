"""KubeletSource against a real pod-resources gRPC server on a temporary unix socket."""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

import grpc
import pytest

from exporter.devices.enumerate import enumerate_devices
from exporter.devices.filter import ALL_DEVICES
from exporter.devices.model import Entity, Inventory
from exporter.devices.process_reads import EntityProcesses, ProcessReader
from exporter.k8s.config import KubernetesConfig
from exporter.k8s.kubelet_client import Backoff, PodResourcesClient
from exporter.k8s.proto import pb
from exporter.k8s.source import KubeletSource
from exporter.k8s.types import PodRef
from exporter.sampling.worker import DaemonExecutor
from exporter.series import Family, Labels
from exporter.simulated.kubelet import (
    GET_DISABLED,
    GET_UNIMPLEMENTED,
    SimKubeletHandle,
    pod_resources,
    serve_pod_resources,
    start_sim_kubelet,
)
from exporter.simulated.node import SimNvml
from tests.support.clock import FakeClock

from .k8s_helpers import gpu_uuid, mig_node, mig_uuid, plain_node

GPU = "nvidia.com/gpu"


def make_source(
    socket_path: str, clock: Callable[[], float] | None = None, **config: object
) -> KubeletSource:
    cfg = KubernetesConfig(enabled=True, pod_resources_socket=socket_path, **config)  # type: ignore[arg-type]
    client = PodResourcesClient(
        socket_path,
        timeout_s=cfg.refresh_timeout_s,
        backoff=Backoff(initial_s=30.0, max_s=60.0, jitter=0.0),
        clock=clock or FakeClock(),
    )
    return KubeletSource(cfg, client=client, wall_clock=clock or FakeClock())


@pytest.fixture
async def source(socket_path: str) -> AsyncIterator[KubeletSource]:
    src = make_source(socket_path)
    try:
        yield src
    finally:
        await src.close()


def family(src: KubeletSource, name: str) -> dict[Labels, float]:
    (fam,) = [f for f in src.families() if f.name == name]
    return {s.labels: s.value for s in fam.samples}


def scalar(src: KubeletSource, name: str) -> float:
    (value,) = family(src, name).values()
    return value


def rows(src: KubeletSource) -> list[dict[str, str]]:
    return [dict(labels) for labels in family(src, "gpu_exporter_pod_gpu_allocation")]


# -- mapping ----------------------------------------------------------------------------------


async def test_exclusive_whole_gpus(kubelet: SimKubeletHandle, source: KubeletSource) -> None:
    kubelet.servicer.set_pods([
        pod_resources("inference", "llm-0", {"server": [(GPU, [gpu_uuid(0)])], "proxy": []}),
        pod_resources("inference", "llm-1", {"server": [(GPU, [gpu_uuid(2), gpu_uuid(3)])]}),
        pod_resources("kube-system", "coredns", {"coredns": [("example.com/nic", ["eth1"])]}),
    ])
    attribution = await source.refresh(plain_node(4))
    assert attribution.owners == {
        (0, -1): PodRef("llm-0", "inference", "server"),
        (2, -1): PodRef("llm-1", "inference", "server"),
        (3, -1): PodRef("llm-1", "inference", "server"),
    }
    assert attribution.visible is None
    assert rows(source) == []
    assert scalar(source, "gpu_exporter_kubelet_up") == 1
    assert family(source, "gpu_exporter_unattributed_devices") == {
        (("reason", "malformed_id"),): 0,
        (("reason", "unknown_device"),): 0,
    }
    assert scalar(source, "gpu_exporter_kubelet_last_refresh_success_timestamp_seconds") > 0


async def test_mig_mixed_strategy(kubelet: SimKubeletHandle, source: KubeletSource) -> None:
    legacy = f"MIG-{gpu_uuid(1)}/5/0"
    kubelet.servicer.set_pods([
        pod_resources("a", "whole", {"c": [(GPU, [gpu_uuid(0)])]}),
        pod_resources("a", "two-g", {"c": [("nvidia.com/mig-2g.35gb", [mig_uuid(1, 1, 0)])]}),
        # Two pods on the two compute instances of GPU instance 2: one shared framebuffer.
        pod_resources("b", "ci-zero", {"c": [("nvidia.com/mig-1c.3g.71gb", [mig_uuid(1, 2, 0)])]}),
        pod_resources("b", "ci-one", {"c": [("nvidia.com/mig-2c.3g.71gb", [mig_uuid(1, 2, 1)])]}),
        pod_resources("c", "legacy", {"c": [("nvidia.com/mig-1g.18gb", [legacy])]}),
    ])
    attribution = await source.refresh(mig_node())
    assert attribution.owners == {
        (0, -1): PodRef("whole", "a", "c"),
        (1, 1): PodRef("two-g", "a", "c"),
        (1, 5): PodRef("legacy", "c", "c"),
    }
    assert (1, 2) not in attribution.owners
    assert (1, -1) not in attribution.owners  # the parent of MIG instances is nobody's
    assert rows(source) == [
        {"gpu": "1", "UUID": gpu_uuid(1), "GPU_I_ID": "2", "pod": "ci-one", "namespace": "b",
         "container": "c", "resource": "nvidia.com/mig-2c.3g.71gb"},
        {"gpu": "1", "UUID": gpu_uuid(1), "GPU_I_ID": "2", "pod": "ci-zero", "namespace": "b",
         "container": "c", "resource": "nvidia.com/mig-1c.3g.71gb"},
    ]


async def test_one_container_on_every_compute_instance_owns_the_gpu_instance(
    kubelet: SimKubeletHandle, source: KubeletSource
) -> None:
    kubelet.servicer.set_pods([
        pod_resources("b", "big", {"c": [("nvidia.com/mig-3g.71gb",
                                          [mig_uuid(1, 2, 0), mig_uuid(1, 2, 1)])]}),
    ])
    attribution = await source.refresh(mig_node())
    assert attribution.owners == {(1, 2): PodRef("big", "b", "c")}
    assert rows(source) == []


async def test_time_sliced_replicas(kubelet: SimKubeletHandle, source: KubeletSource) -> None:
    shared = gpu_uuid(3)
    kubelet.servicer.set_pods([
        pod_resources("research", "nb-alice", {"notebook": [(GPU, [f"{shared}::0"])]}),
        pod_resources("research", "nb-bob",
                      {"notebook": [(GPU, [f"{shared}::1", f"{shared}::2"])]}),
        pod_resources("research", "solo", {"notebook": [(GPU, [f"{gpu_uuid(1)}::0"])]}),
        pod_resources("inference", "llm-0", {"server": [(GPU, [gpu_uuid(0)])]}),
    ])
    attribution = await source.refresh(plain_node(4))
    # A time-sliced GPU held by one container is labelled with it, as dcgm-exporter does;
    # one held by several stays unlabelled, with a row per replica held.
    assert attribution.owners == {(0, -1): PodRef("llm-0", "inference", "server"),
                                  (1, -1): PodRef("solo", "research", "notebook")}
    got = {(r["gpu"], r["pod"], r["replica"]) for r in rows(source)}
    assert got == {("3", "nb-alice", "0"), ("3", "nb-bob", "1"), ("3", "nb-bob", "2")}
    assert all(r["UUID"] == gpu_uuid(int(r["gpu"])) and "GPU_I_ID" not in r for r in rows(source))


async def test_every_replica_in_one_container_is_exclusive(
    kubelet: SimKubeletHandle, source: KubeletSource
) -> None:
    mig = mig_uuid(1, 1, 0)
    kubelet.servicer.set_pods([
        pod_resources("ml", "big", {"train": [(GPU, [f"{gpu_uuid(0)}::0", f"{gpu_uuid(0)}::3"])]}),
        pod_resources("ml", "eks", {"serve": [("nvidia.com/mig-2g.35gb", [f"{mig}::5"])]}),
    ])
    attribution = await source.refresh(mig_node())
    assert attribution.owners == {(0, -1): PodRef("big", "ml", "train"),
                                  (1, 1): PodRef("eks", "ml", "serve")}
    assert rows(source) == []


async def test_shared_mig_replicas_as_on_eks(
    kubelet: SimKubeletHandle, source: KubeletSource
) -> None:
    mig = mig_uuid(1, 1, 0)
    kubelet.servicer.set_pods([
        pod_resources("x", "p1", {"c": [("nvidia.com/mig-2g.35gb", [f"{mig}::0"])]}),
        pod_resources("x", "p2", {"c": [("nvidia.com/mig-2g.35gb", [f"{mig}::7"])]}),
    ])
    attribution = await source.refresh(mig_node())
    assert attribution.owners == {}
    assert {(r["GPU_I_ID"], r["pod"], r["replica"]) for r in rows(source)} == {
        ("1", "p1", "0"), ("1", "p2", "7")
    }


async def test_renamed_shared_and_custom_resource_names(
    kubelet: SimKubeletHandle, socket_path: str
) -> None:
    kubelet.servicer.set_pods([
        pod_resources("t", "s0", {"c": [("nvidia.com/gpu.shared", [f"{gpu_uuid(0)}::0"])]}),
        pod_resources("t", "s1", {"c": [("nvidia.com/gpu.shared", [f"{gpu_uuid(0)}::1"])]}),
        pod_resources("t", "custom", {"c": [("example.com/h100", [gpu_uuid(1)])]}),
    ])
    plain = make_source(socket_path)
    custom = make_source(socket_path, resource_names=("example.com/h100",))
    try:
        without = await plain.refresh(plain_node(2))
        with_name = await custom.refresh(plain_node(2))
    finally:
        await plain.close()
        await custom.close()
    assert without.owners == {}
    assert with_name.owners == {(1, -1): PodRef("custom", "t", "c")}
    for src in (plain, custom):
        assert {(r["pod"], r["resource"], r["replica"]) for r in rows(src)} == {
            ("s0", "nvidia.com/gpu.shared", "0"), ("s1", "nvidia.com/gpu.shared", "1")
        }


async def test_gke_device_ids(kubelet: SimKubeletHandle, source: KubeletSource) -> None:
    kubelet.servicer.set_pods([
        pod_resources("g", "whole", {"c": [(GPU, ["nvidia0"])]}),
        pod_resources("g", "mig", {"c": [(GPU, ["nvidia1/gi5"])]}),
        pod_resources("g", "share-a", {"c": [(GPU, ["nvidia1/gi1/vgpu0"])]}),
        pod_resources("g", "share-b", {"c": [(GPU, ["nvidia1/gi1/vgpu1"])]}),
        pod_resources("g", "gone", {"c": [(GPU, ["nvidia7"])]}),
    ])
    attribution = await source.refresh(mig_node())
    assert attribution.owners == {
        (0, -1): PodRef("whole", "g", "c"),
        (1, 5): PodRef("mig", "g", "c"),
    }
    assert {(r["GPU_I_ID"], r["pod"], r["replica"]) for r in rows(source)} == {
        ("1", "share-a", "0"), ("1", "share-b", "1")
    }
    assert family(source, "gpu_exporter_unattributed_devices")[(("reason", "unknown_device"),)] == 1


async def test_gke_time_sliced_whole_gpu(kubelet: SimKubeletHandle, source: KubeletSource) -> None:
    kubelet.servicer.set_pods([
        pod_resources("g", "a", {"c": [(GPU, ["nvidia2/vgpu0"])]}),
        pod_resources("g", "b", {"c": [(GPU, ["nvidia2/vgpu1"])]}),
    ])
    attribution = await source.refresh(plain_node(3))
    assert attribution.owners == {}
    assert {(r["gpu"], r["UUID"], r["pod"]) for r in rows(source)} == {
        ("2", gpu_uuid(2), "a"), ("2", gpu_uuid(2), "b")
    }


async def test_unknown_uuid_is_counted_not_attributed(
    kubelet: SimKubeletHandle, source: KubeletSource
) -> None:
    kubelet.servicer.set_pods([
        pod_resources("a", "p", {"c": [(GPU, [gpu_uuid(9), gpu_uuid(0)])]}),
        pod_resources("a", "q", {"c": [("nvidia.com/mig-1g.18gb", [mig_uuid(5, 5, 5)])]}),
    ])
    attribution = await source.refresh(plain_node(2))
    assert attribution.owners == {(0, -1): PodRef("p", "a", "c")}
    assert family(source, "gpu_exporter_unattributed_devices")[(("reason", "unknown_device"),)] == 2


async def test_malformed_id_logged_once_counted_and_ignored(
    kubelet: SimKubeletHandle, source: KubeletSource, caplog: pytest.LogCaptureFixture
) -> None:
    kubelet.servicer.set_pods([
        pod_resources("a", "good", {"c": [(GPU, [gpu_uuid(0)])]}),
        pod_resources("a", "bad", {"c": [(GPU, ["GPU-not-a-uuid!", gpu_uuid(1)])]}),
    ])
    caplog.set_level(logging.WARNING, logger="exporter.k8s")
    for _ in range(3):
        attribution = await source.refresh(plain_node(2))
    assert attribution.owners == {
        (0, -1): PodRef("good", "a", "c"),
        (1, -1): PodRef("bad", "a", "c"),
    }
    assert scalar(source, "gpu_exporter_device_id_parse_errors") == 1
    assert family(source, "gpu_exporter_unattributed_devices")[(("reason", "malformed_id"),)] == 1
    logged = [r for r in caplog.records if "GPU-not-a-uuid!" in r.getMessage()]
    assert len(logged) == 1
    assert "bad" in logged[0].getMessage()


# -- kubelet behaviour ------------------------------------------------------------------------


async def test_pod_churn_followed_on_the_next_refresh(
    kubelet: SimKubeletHandle, source: KubeletSource
) -> None:
    inventory = plain_node(2)
    kubelet.servicer.set_pods([pod_resources("a", "old", {"c": [(GPU, [gpu_uuid(0)])]})])
    assert (await source.refresh(inventory)).owners == {(0, -1): PodRef("old", "a", "c")}
    kubelet.servicer.set_pods([pod_resources("a", "new", {"c": [(GPU, [gpu_uuid(1)])]})])
    assert (await source.refresh(inventory)).owners == {(1, -1): PodRef("new", "a", "c")}
    kubelet.servicer.set_pods([])
    assert (await source.refresh(inventory)).owners == {}
    assert rows(source) == []


async def test_kubelet_restart_socket_recreated(socket_path: str) -> None:
    inventory = plain_node(2)
    first = serve_pod_resources(socket_path)
    second: SimKubeletHandle | None = None
    src = make_source(socket_path)
    try:
        first.servicer.set_pods([pod_resources("a", "before", {"c": [(GPU, [gpu_uuid(0)])]})])
        assert (await src.refresh(inventory)).owners == {(0, -1): PodRef("before", "a", "c")}
        first.stop()
        # Socket gone: reported, last allocations kept, nothing raised.
        assert (await src.refresh(inventory)).owners == {(0, -1): PodRef("before", "a", "c")}
        assert scalar(src, "gpu_exporter_kubelet_up") == 0
        assert family(src, "gpu_exporter_kubelet_refresh_errors") == {
            (("code", "SOCKET_ABSENT"),): 1
        }
        second = serve_pod_resources(socket_path)
        second.servicer.set_pods([pod_resources("a", "after", {"c": [(GPU, [gpu_uuid(1)])]})])
        assert (await src.refresh(inventory)).owners == {(1, -1): PodRef("after", "a", "c")}
        assert scalar(src, "gpu_exporter_kubelet_up") == 1
        assert src.client.channels_built == 2
    finally:
        await src.close()
        first.stop()
        if second is not None:
            second.stop()


async def test_kubelet_restart_without_a_gap(socket_path: str) -> None:
    """The socket is replaced between two polls: the next poll already talks to the new one."""
    inventory = plain_node(2)
    first = serve_pod_resources(socket_path)
    src = make_source(socket_path)
    handles = [first]
    try:
        first.servicer.set_pods([pod_resources("a", "before", {"c": [(GPU, [gpu_uuid(0)])]})])
        await src.refresh(inventory)
        first.stop()
        second = serve_pod_resources(socket_path)
        handles.append(second)
        second.servicer.set_pods([pod_resources("a", "after", {"c": [(GPU, [gpu_uuid(0)])]})])
        assert (await src.refresh(inventory)).owners == {(0, -1): PodRef("after", "a", "c")}
        assert second.servicer.calls["List"] == 1
    finally:
        await src.close()
        for handle in handles:
            handle.stop()


async def test_socket_absent_at_start_then_appears(socket_path: str) -> None:
    src = make_source(socket_path)
    handle: SimKubeletHandle | None = None
    try:
        attribution = await src.refresh(plain_node(1))
        assert attribution.owners == {}
        assert scalar(src, "gpu_exporter_kubelet_up") == 0
        assert [f.name for f in src.families()].count(
            "gpu_exporter_kubelet_last_refresh_success_timestamp_seconds"
        ) == 0
        handle = serve_pod_resources(socket_path)
        handle.servicer.set_pods([pod_resources("a", "p", {"c": [(GPU, [gpu_uuid(0)])]})])
        assert (await src.refresh(plain_node(1))).owners == {(0, -1): PodRef("p", "a", "c")}
        assert scalar(src, "gpu_exporter_kubelet_up") == 1
    finally:
        await src.close()
        if handle is not None:
            handle.stop()


async def test_resource_exhausted_backs_off_and_keeps_last_good(
    kubelet: SimKubeletHandle, socket_path: str
) -> None:
    clock = FakeClock()
    src = make_source(socket_path, clock=clock)
    inventory = plain_node(2)
    try:
        kubelet.servicer.set_pods([pod_resources("a", "p", {"c": [(GPU, [gpu_uuid(0)])]})])
        await src.refresh(inventory)
        kubelet.servicer.fail_next(grpc.StatusCode.RESOURCE_EXHAUSTED, "rejected by rate limit")
        kubelet.servicer.set_pods([pod_resources("a", "q", {"c": [(GPU, [gpu_uuid(1)])]})])
        assert (await src.refresh(inventory)).owners == {(0, -1): PodRef("p", "a", "c")}
        assert family(src, "gpu_exporter_kubelet_refresh_errors") == {
            (("code", "RESOURCE_EXHAUSTED"),): 1
        }
        assert scalar(src, "gpu_exporter_kubelet_up") == 0
        calls = kubelet.servicer.calls["List"]
        for _ in range(5):  # polls during the back-off don't touch the kubelet
            assert (await src.refresh(inventory)).owners == {(0, -1): PodRef("p", "a", "c")}
        assert kubelet.servicer.calls["List"] == calls
        clock.now += 31  # past the 30 s back-off
        assert (await src.refresh(inventory)).owners == {(1, -1): PodRef("q", "a", "c")}
        assert kubelet.servicer.calls["List"] == calls + 1
        assert scalar(src, "gpu_exporter_kubelet_up") == 1
    finally:
        await src.close()


async def test_owners_are_dropped_when_the_kubelet_stays_away(
    kubelet: SimKubeletHandle, socket_path: str
) -> None:
    clock = FakeClock()
    src = make_source(socket_path, clock=clock)
    inventory = plain_node(2)
    try:
        kubelet.servicer.set_pods([pod_resources("a", "p", {"c": [(GPU, [gpu_uuid(0)])]})])
        assert (await src.refresh(inventory)).owners == {(0, -1): PodRef("p", "a", "c")}
        kubelet.servicer.fail_next(grpc.StatusCode.UNAVAILABLE, "down", times=100)
        clock.now += 60
        assert (await src.refresh(inventory)).owners == {(0, -1): PodRef("p", "a", "c")}
        clock.now += 61  # past allocations_max_age_s (120 s) without an answer
        assert (await src.refresh(inventory)).owners == {}
    finally:
        await src.close()


async def test_repeated_unavailable_rebuilds_the_channel(
    kubelet: SimKubeletHandle, socket_path: str
) -> None:
    clock = FakeClock()
    src = make_source(socket_path, clock=clock)
    try:
        await src.refresh(plain_node(1))
        kubelet.servicer.fail_next(grpc.StatusCode.UNAVAILABLE, "going away", times=2)
        for _ in range(2):
            clock.now += 120
            await src.refresh(plain_node(1))
        clock.now += 120
        kubelet.servicer.set_pods([pod_resources("a", "p", {"c": [(GPU, [gpu_uuid(0)])]})])
        assert (await src.refresh(plain_node(1))).owners == {(0, -1): PodRef("p", "a", "c")}
        assert src.client.channels_built == 2
        assert family(src, "gpu_exporter_kubelet_refresh_errors") == {
            (("code", "UNAVAILABLE"),): 2
        }
    finally:
        await src.close()


async def test_concurrent_refreshes_share_one_call(
    kubelet: SimKubeletHandle, source: KubeletSource
) -> None:
    kubelet.servicer.set_pods([pod_resources("a", "p", {"c": [(GPU, [gpu_uuid(0)])]})])
    results = await asyncio.gather(*(source.refresh(plain_node(1)) for _ in range(5)))
    assert kubelet.servicer.calls["List"] == 1
    assert all(r.owners == {(0, -1): PodRef("p", "a", "c")} for r in results)


async def test_five_megabyte_response(kubelet: SimKubeletHandle, source: KubeletSource) -> None:
    # A crowded node: thousands of CPU-pinned pods beside the GPU ones, > grpcio's 4 MiB default.
    filler = [
        pb.PodResources(
            name=f"batch-worker-{i:05d}",
            namespace="batch",
            containers=[
                pb.ContainerResources(
                    name=f"worker-{j}",
                    cpu_ids=list(range(64)),
                    devices=[pb.ContainerDevices(
                        resource_name="example.com/nic",
                        device_ids=[f"vf-{i}-{j}-{k}" for k in range(12)],
                    )],
                )
                for j in range(4)
            ],
        )
        for i in range(5000)
    ]
    gpu_pods = [pod_resources("a", f"gpu-{i}", {"c": [(GPU, [gpu_uuid(i)])]}) for i in range(4)]
    pods = filler[:2500] + gpu_pods + filler[2500:]
    size = pb.ListPodResourcesResponse(pod_resources=pods).ByteSize()
    assert 5_000_000 < size < 16 * 1024 * 1024
    kubelet.servicer.set_pods(pods)
    attribution = await source.refresh(plain_node(4))
    assert attribution.owners == {(i, -1): PodRef(f"gpu-{i}", "a", "c") for i in range(4)}
    assert scalar(source, "gpu_exporter_kubelet_up") == 1


# -- per-tenant sidecar scope -----------------------------------------------------------------


def tenant_node() -> tuple[Inventory, list[object]]:
    inventory = mig_node()
    pods = [
        pod_resources("team-a", "me", {
            "server": [(GPU, [f"{gpu_uuid(0)}::0"]),
                       ("nvidia.com/mig-2g.35gb", [mig_uuid(1, 1, 0)]),
                       ("nvidia.com/mig-1c.3g.71gb", [mig_uuid(1, 2, 0)])],
            "gpu-exporter": [],
        }),
        pod_resources("team-b", "neighbour", {
            "trainer": [(GPU, [f"{gpu_uuid(0)}::1"]),
                        ("nvidia.com/mig-2c.3g.71gb", [mig_uuid(1, 2, 1)]),
                        ("nvidia.com/mig-1g.18gb", [mig_uuid(1, 5, 0), "GPU-broken!"])],
        }),
        pod_resources("team-b", "me", {"other": [("nvidia.com/mig-1g.18gb", ["nvidia9"])]}),
    ]
    return inventory, pods


@pytest.mark.parametrize("get_mode", ["enabled", GET_DISABLED, GET_UNIMPLEMENTED])
async def test_sidecar_scope_leaks_nothing(
    kubelet: SimKubeletHandle, socket_path: str, get_mode: str
) -> None:
    inventory, pods = tenant_node()
    kubelet.servicer.set_pods(pods)
    kubelet.servicer.get_mode = get_mode
    src = make_source(socket_path, scope="pod", pod_name="me", pod_namespace="team-a")
    try:
        for _ in range(2):
            attribution = await src.refresh(inventory)
        families = src.families()
    finally:
        await src.close()
    # Ours: replica of GPU 0, MIG GI 1 (exclusive), one of GI 2's two compute instances.
    assert attribution.visible == frozenset({(0, -1), (1, 1), (1, 2)})
    assert attribution.owners == {(1, 1): PodRef("me", "team-a", "server")}
    dumped = repr(families) + repr(attribution)
    for leak in ("neighbour", "team-b", "trainer", "GPU-broken", "nvidia9", mig_uuid(1, 5, 0),
                 mig_uuid(1, 2, 1), "2c.3g.71gb", "1g.18gb", "(1, 5)", "(1, -1)"):
        assert leak not in dumped, leak
    allocation = {(r["gpu"], r.get("GPU_I_ID"), r["pod"], r.get("replica")) for r in rows(src)}
    assert allocation == {("0", None, "me", "0"), ("1", "2", "me", None)}
    assert family(src, "gpu_exporter_unattributed_devices") == {
        (("reason", "malformed_id"),): 0, (("reason", "unknown_device"),): 0
    }
    if get_mode == "enabled":
        assert kubelet.servicer.calls["List"] == 0
        assert kubelet.servicer.calls["Get"] == 2
    else:  # Get tried once, then List filtered to this pod
        assert kubelet.servicer.calls["Get"] == 1
        assert kubelet.servicer.calls["List"] == 2


async def test_sidecar_scope_shows_nothing_before_the_first_answer(socket_path: str) -> None:
    src = make_source(socket_path, scope="pod", pod_name="me", pod_namespace="team-a")
    try:
        attribution = await src.refresh(mig_node())
    finally:
        await src.close()
    assert attribution.visible == frozenset()


async def test_sidecar_scope_without_identity_shows_nothing(
    kubelet: SimKubeletHandle, socket_path: str
) -> None:
    _, pods = tenant_node()
    kubelet.servicer.set_pods(pods)
    src = make_source(socket_path, scope="pod")
    try:
        attribution = await src.refresh(mig_node())
    finally:
        await src.close()
    assert attribution.visible == frozenset()
    assert kubelet.servicer.calls["List"] + kubelet.servicer.calls["Get"] == 0
    assert rows(src) == []


async def test_restarted_kubelet_is_tried_at_once_despite_back_off(socket_path: str) -> None:
    clock = FakeClock()
    first = serve_pod_resources(socket_path)
    handles = [first]
    src = make_source(socket_path, clock=clock)
    try:
        first.servicer.set_pods([pod_resources("a", "p", {"c": [(GPU, [gpu_uuid(0)])]})])
        await src.refresh(plain_node(2))
        first.servicer.fail_next(grpc.StatusCode.RESOURCE_EXHAUSTED, "rejected by rate limit")
        await src.refresh(plain_node(2))
        assert src.client.backoff_remaining() > 0
        first.stop()
        second = serve_pod_resources(socket_path)
        handles.append(second)
        second.servicer.set_pods([pod_resources("a", "q", {"c": [(GPU, [gpu_uuid(1)])]})])
        # Same fake time: only the new socket makes the call happen.
        assert (await src.refresh(plain_node(2))).owners == {(1, -1): PodRef("q", "a", "c")}
    finally:
        await src.close()
        for handle in handles:
            handle.stop()


# -- per-process reads ------------------------------------------------------------------------


class StuckProcessList(SimNvml):
    """A time-sliced node whose process-list call hangs in the driver until released."""

    def __init__(self) -> None:
        super().__init__("a100-timesliced")
        self.entered = threading.Event()
        self.release = threading.Event()

    def nvmlDeviceGetComputeRunningProcesses(self, handle: Any) -> list[Any]:
        self.entered.set()
        self.release.wait(60)
        return super().nvmlDeviceGetComputeRunningProcesses(handle)


class NoPods:
    """Pod metadata that knows no container: every process is unattributed."""

    def start(self) -> None:
        pass

    def labels_for(self, namespace: str, pod: str) -> Labels:  # noqa: ARG002 (PodMetadata)
        return ()

    def container_of(self, pod_uid: str, container_id: str  # noqa: ARG002 (PodMetadata)
                     ) -> tuple[str, str, str] | None:
        return None

    def families(self) -> list[Family]:
        return []

    def close(self) -> None:
        pass


async def test_a_stuck_process_read_is_kept_and_never_joined_by_a_second(
    socket_path: str,
) -> None:
    lib = StuckProcessList()
    lib.nvmlInit()
    inventory = enumerate_devices(lib, ALL_DEVICES).inventory
    kubelet = start_sim_kubelet(socket_path, inventory, shared_by=lib.shared_by)
    poll_worker = DaemonExecutor("poll")
    on_poll_thread = ProcessReader(lib).on_thread(poll_worker)
    started: list[concurrent.futures.Future[list[EntityProcesses]]] = []

    def process_reads(entities: Sequence[Entity]
                      ) -> concurrent.futures.Future[list[EntityProcesses]]:
        started.append(on_poll_thread(entities))
        return started[-1]

    config = KubernetesConfig(enabled=True, pod_resources_socket=socket_path,
                              process_attribution=True, refresh_timeout_s=0.1)
    source = KubeletSource(config, metadata=NoPods(), process_reads=process_reads)
    try:
        # The read hangs: the refresh's own deadline cancels its wait for it ...
        await source.refresh(inventory)
        assert lib.entered.wait(10)
        # ... but not the read itself, which the source still holds as pending.
        assert len(started) == 1
        assert not started[0].done()
        await source.refresh(inventory)
        assert len(started) == 1, "a second read was started while the first was stuck"
        lib.release.set()
        found = await asyncio.wait_for(asyncio.wrap_future(started[0]), 10)
        assert {f.entity.key for f in found} == {g.key for g in inventory.gpus}
        # Once the stuck read is done, the next refresh starts a fresh one and uses it.
        await source.refresh(inventory)
        assert len(started) == 2
        assert started[1].done()
        assert scalar(source, "gpu_exporter_unattributed_gpu_processes") > 0
    finally:
        lib.release.set()
        await source.close()
        poll_worker.shutdown()
        kubelet.stop()

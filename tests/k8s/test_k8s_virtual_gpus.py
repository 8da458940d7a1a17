"""dcgm-exporter's virtual GPUs (one copy of a shared device's series per holder, with
`vgpu`) and GPU id types, through KubeletSource against a real pod-resources server."""

from __future__ import annotations

import logging
import re
from collections.abc import AsyncIterator

import pytest

from exporter.devices.model import Readings
from exporter.exposition.render import device_families, render
from exporter.fields.csv import parse_collectors
from exporter.k8s.config import KubernetesConfig
from exporter.k8s.kubelet_client import PodResourcesClient
from exporter.k8s.source import KubeletSource
from exporter.k8s.types import Attribution, PodRef
from exporter.sampling.snapshot import HostLabel, Snapshot
from exporter.simulated.kubelet import SimKubeletHandle, pod_resources

from .k8s_helpers import gpu_uuid, mig_node, mig_uuid, plain_node

GPU = "nvidia.com/gpu"


def make_source(socket_path: str, **config: object) -> KubeletSource:
    cfg = KubernetesConfig(enabled=True, pod_resources_socket=socket_path, **config)  # type: ignore[arg-type]
    return KubeletSource(cfg, client=PodResourcesClient(socket_path))


@pytest.fixture
async def virtual(socket_path: str) -> AsyncIterator[KubeletSource]:
    src = make_source(socket_path, virtual_gpus=True)
    try:
        yield src
    finally:
        await src.close()


def allocation_pods(src: KubeletSource) -> set[str]:
    (fam,) = [f for f in src.families() if f.name == "gpu_exporter_pod_gpu_allocation"]
    return {dict(s.labels)["pod"] for s in fam.samples}


async def test_time_sliced_gpu_is_repeated_per_replica(
    kubelet: SimKubeletHandle, virtual: KubeletSource
) -> None:
    shared = gpu_uuid(1)
    kubelet.servicer.set_pods([
        pod_resources("ml", "owner", {"c": [(GPU, [gpu_uuid(0)])]}),
        pod_resources("nb", "alice", {"nb": [(GPU, [f"{shared}::0"])]}),
        pod_resources("nb", "bob", {"nb": [(GPU, [f"{shared}::1"])]}),
        # One container holding two replicas: two copies, told apart by `vgpu`.
        pod_resources("nb", "greedy", {"nb": [(GPU, [f"{shared}::2", f"{shared}::3"])]}),
        # One replica of GPU 2 alone is still a replica: labelled, with its vgpu.
        pod_resources("nb", "lonely", {"nb": [(GPU, [f"{gpu_uuid(2)}::5"])]}),
    ])
    attribution = await virtual.refresh(plain_node(4))
    assert attribution.owners == {(0, -1): PodRef("owner", "ml", "c")}
    assert attribution.sharers == {
        (1, -1): (
            PodRef("alice", "nb", "nb", (("vgpu", "0"),)),
            PodRef("bob", "nb", "nb", (("vgpu", "1"),)),
            PodRef("greedy", "nb", "nb", (("vgpu", "2"),)),
            PodRef("greedy", "nb", "nb", (("vgpu", "3"),)),
        ),
        (2, -1): (PodRef("lonely", "nb", "nb", (("vgpu", "5"),)),),
    }
    # The allocation rows stay as they are without virtual GPUs.
    assert allocation_pods(virtual) == {"alice", "bob", "greedy", "lonely"}


async def test_off_by_default(kubelet: SimKubeletHandle, socket_path: str) -> None:
    kubelet.servicer.set_pods([
        pod_resources("nb", "alice", {"nb": [(GPU, [f"{gpu_uuid(1)}::0"])]}),
        pod_resources("nb", "bob", {"nb": [(GPU, [f"{gpu_uuid(1)}::1"])]}),
    ])
    src = make_source(socket_path)
    try:
        attribution = await src.refresh(plain_node(2))
        assert attribution.sharers == {}
        assert attribution.owners == {}
        assert allocation_pods(src) == {"alice", "bob"}
    finally:
        await src.close()


async def test_mig_instance_split_between_containers(
    kubelet: SimKubeletHandle, virtual: KubeletSource
) -> None:
    kubelet.servicer.set_pods([
        pod_resources("a", "left", {"c": [("nvidia.com/mig-3g.71gb", [mig_uuid(1, 2, 0)])]}),
        pod_resources("a", "right", {"c": [("nvidia.com/mig-3g.71gb", [mig_uuid(1, 2, 1)])]}),
        # GI 1 has one compute instance, held by one container: exclusive, as without.
        pod_resources("a", "whole", {"c": [("nvidia.com/mig-2g.35gb", [mig_uuid(1, 1, 0)])]}),
    ])
    attribution = await virtual.refresh(mig_node())
    assert attribution.owners == {(1, 1): PodRef("whole", "a", "c")}
    # No replica id: no vgpu label; the containers tell the copies apart.
    assert attribution.sharers == {(1, 2): (PodRef("left", "a", "c"), PodRef("right", "a", "c"))}
    assert (1, -1) not in attribution.sharers  # the parent GPU is nobody's


async def test_one_container_holding_both_compute_instances_is_one_copy(
    kubelet: SimKubeletHandle, socket_path: str
) -> None:
    kubelet.servicer.set_pods([
        pod_resources("a", "both", {"c": [("nvidia.com/mig-3g.71gb",
                                           [mig_uuid(1, 2, 0), mig_uuid(1, 2, 1)])]}),
        pod_resources("a", "other", {"c": [("nvidia.com/mig-3g.71gb", [mig_uuid(1, 2, 1)])]}),
    ])
    src = make_source(socket_path, virtual_gpus=True)
    try:
        attribution = await src.refresh(mig_node())
        assert attribution.sharers == {(1, 2): (PodRef("both", "a", "c"),
                                                PodRef("other", "a", "c"))}
    finally:
        await src.close()


async def test_gke_device_names(
    kubelet: SimKubeletHandle, socket_path: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "exporter.k8s.attribution")
    kubelet.servicer.set_pods([
        pod_resources("g", "whole", {"c": [(GPU, ["nvidia0"])]}),
        pod_resources("g", "mig", {"c": [(GPU, ["nvidia1/gi5"])]}),
        pod_resources("g", "share-a", {"c": [(GPU, ["nvidia1/gi1/vgpu0"])]}),
        pod_resources("g", "share-b", {"c": [(GPU, ["nvidia1/gi1/vgpu1"])]}),
    ])
    src = make_source(socket_path, gpu_id_type="device-name", virtual_gpus=True)
    try:
        attribution = await src.refresh(mig_node())
        await src.refresh(mig_node())
    finally:
        await src.close()
    assert attribution.owners == {(0, -1): PodRef("whole", "g", "c"),
                                  (1, 5): PodRef("mig", "g", "c")}
    assert attribution.sharers == {(1, 1): (PodRef("share-a", "g", "c", (("vgpu", "0"),)),
                                            PodRef("share-b", "g", "c", (("vgpu", "1"),)))}
    assert "GPU id type" not in caplog.text  # the ids are of the form the setting names


@pytest.mark.parametrize(("id_type", "device_id"), [
    ("uid", "nvidia1"),
    ("device-name", gpu_uuid(1)),
])
async def test_ids_of_the_other_form_are_matched_and_logged_once(
    kubelet: SimKubeletHandle, socket_path: str, caplog: pytest.LogCaptureFixture,
    id_type: str, device_id: str,
) -> None:
    caplog.set_level(logging.INFO, "exporter.k8s.attribution")
    kubelet.servicer.set_pods([
        pod_resources("g", "p", {"c": [(GPU, [device_id])]}),
        pod_resources("g", "q", {"c": [(GPU, [gpu_uuid(0) if id_type == "uid" else "nvidia0"])]}),
    ])
    src = make_source(socket_path, gpu_id_type=id_type)
    try:
        for _ in range(3):
            attribution = await src.refresh(plain_node(2))
    finally:
        await src.close()
    assert attribution.owners == {(0, -1): PodRef("q", "g", "c"), (1, -1): PodRef("p", "g", "c")}
    hints = [r for r in caplog.records if "GPU id type" in r.getMessage()]
    assert len(hints) == 1
    assert device_id in hints[0].getMessage()


def test_copies_render_as_distinct_series() -> None:
    inventory = plain_node(2)
    collectors = parse_collectors(
        "DCGM_FI_DEV_GPU_UTIL, gauge, Util.\nDCGM_FI_DRIVER_VERSION, label, Driver.\n", "t.csv")
    sharers = {(1, -1): (
        PodRef("alice", "nb", "nb", (("pod_uid", "u-a"), ("vgpu", "0"))),
        PodRef("bob", "nb", "nb", (("pod_uid", "u-b"), ("vgpu", "1"))),
    )}
    snapshot = Snapshot(
        inventory,
        Readings(values={(0, -1): {"DCGM_FI_DEV_GPU_UTIL": 5.0},
                         (1, -1): {"DCGM_FI_DEV_GPU_UTIL": 80.0}}),
        collectors, HostLabel("Hostname", "node-a"), Attribution(sharers=sharers))
    text = render(device_families(snapshot)).text.decode()
    lines = [line for line in text.splitlines() if line.startswith("DCGM_FI_DEV_GPU_UTIL{")]
    base = (f'gpu="1",UUID="{gpu_uuid(1)}",pci_bus_id="00000000:19:00.0",device="nvidia1",'
            'modelName="NVIDIA H100 80GB HBM3",Hostname="node-a",'
            'DCGM_FI_DRIVER_VERSION="590.48.01"')
    assert lines == [
        f'DCGM_FI_DEV_GPU_UTIL{{gpu="0",UUID="{gpu_uuid(0)}",pci_bus_id="00000000:18:00.0",'
        'device="nvidia0",modelName="NVIDIA H100 80GB HBM3",Hostname="node-a",'
        'DCGM_FI_DRIVER_VERSION="590.48.01"} 5',
        # The whole GPU's value on every copy; no unlabelled copy besides them.
        f'DCGM_FI_DEV_GPU_UTIL{{{base},container="nb",namespace="nb",pod="alice",'
        'pod_uid="u-a",vgpu="0"} 80',
        f'DCGM_FI_DEV_GPU_UTIL{{{base},container="nb",namespace="nb",pod="bob",'
        'pod_uid="u-b",vgpu="1"} 80',
    ]


def test_split_fields_show_the_device_then_each_holders_part() -> None:
    inventory = plain_node(2)
    collectors = parse_collectors(
        "DCGM_FI_DEV_FB_USED, gauge, Used.\nDCGM_FI_DEV_GPU_UTIL, gauge, Util.\n"
        "DCGM_FI_DEV_POWER_USAGE, gauge, Power.\n", "t.csv")
    sharers = {(1, -1): (PodRef("alice", "nb", "nb", (("vgpu", "0"),)),
                         PodRef("bob", "nb", "nb", (("vgpu", "1"),)))}
    # bob's framebuffer is unknown; the holders' utilisation adds up to more than the GPU's.
    split = {(1, -1): {"DCGM_FI_DEV_FB_USED": (100.0, None),
                       "DCGM_FI_DEV_GPU_UTIL": (70.0, 50.0)}}
    snapshot = Snapshot(
        inventory,
        Readings(values={key: {"DCGM_FI_DEV_FB_USED": 300.0, "DCGM_FI_DEV_GPU_UTIL": 80.0,
                               "DCGM_FI_DEV_POWER_USAGE": 200.0}
                         for key in ((0, -1), (1, -1))}),
        collectors, HostLabel("Hostname", "node-a"),
        Attribution(sharers=sharers, split=split))
    text = render(device_families(snapshot)).text.decode()

    def lines(name: str) -> list[tuple[str, str]]:
        """(the pod, or the GPU of a series without one; the value as written), in order."""
        out = []
        for line in text.splitlines():
            if line.startswith(name + "{"):
                labels = dict(re.findall(r'(\w+)="([^"]*)"', line))
                out.append((labels.get("pod", "gpu" + labels["gpu"]), line.rsplit(" ", 1)[1]))
        return out

    assert lines("DCGM_FI_DEV_FB_USED") == [("gpu0", "300"), ("gpu1", "300"), ("alice", "100")]
    # Scaled together to the GPU's 80 %.
    assert lines("DCGM_FI_DEV_GPU_UTIL") == [("gpu0", "80"), ("gpu1", "80"),
                                             ("alice", "46.666667"), ("bob", "33.333333")]
    # A field the holders do not split: the GPU's value on each copy, no unlabelled one.
    assert lines("DCGM_FI_DEV_POWER_USAGE") == [("gpu0", "200"), ("alice", "200"),
                                                ("bob", "200")]


def test_split_fields_with_hpc_jobs_keep_each_holders_part_per_job() -> None:
    """Every label set of a holder (one per HPC job on the GPU) carries that holder's part."""
    collectors = parse_collectors("DCGM_FI_DEV_FB_USED, gauge, Used.\n", "t.csv")
    sharers = {(1, -1): (PodRef("alice", "nb", "nb", (("vgpu", "0"),)),
                         PodRef("bob", "nb", "nb", (("vgpu", "1"),)))}
    snapshot = Snapshot(
        plain_node(2), Readings(values={(1, -1): {"DCGM_FI_DEV_FB_USED": 300.0}}),
        collectors, HostLabel("Hostname", "node-a"),
        Attribution(sharers=sharers, split={(1, -1): {"DCGM_FI_DEV_FB_USED": (100.0, 50.0)}}))
    (family,) = device_families(snapshot, jobs={(1, -1): ("j1", "j2")})
    got = sorted((dict(s.labels).get("pod", ""), dict(s.labels)["hpc_job"], s.value)
                 for s in family.samples)
    assert got == [("", "j1", 300.0), ("", "j2", 300.0), ("alice", "j1", 100.0),
                   ("alice", "j2", 100.0), ("bob", "j1", 50.0), ("bob", "j2", 50.0)]

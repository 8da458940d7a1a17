"""Per-container use of shared GPUs: NVML process list + /proc/<pid>/cgroup + the pod watch.

No GPU runs here, so NVML's process calls come from a small stand-in with pynvml's names and
shapes; the cgroup files, the kubelet (gRPC) and the API server (HTTP) are real.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from exporter.k8s.config import KubernetesConfig
from exporter.k8s.processes import container_of_pid
from exporter.k8s.simkubelet import SimKubeletHandle, pod_resources
from exporter.k8s.source import KubeletSource
from exporter.series import Labels

from .k8s_fake_apiserver import FakeApiServer, pod
from .k8s_helpers import gpu_uuid, plain_node

UID_A = "0f8e7d6c-1111-4222-8333-944455556666"
UID_B = "1a2b3c4d-aaaa-4bbb-8ccc-dddddddddddd"
CID_A = "a" * 64
CID_B = "b" * 64
GIB = 1024**3

V2_SYSTEMD = ("0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod"
              + UID_A.replace("-", "_") + ".slice/cri-containerd-" + CID_A + ".scope\n")
V1_CGROUPFS = ("12:memory:/kubepods/besteffort/pod" + UID_B + "/" + CID_B + "\n"
               "11:cpu,cpuacct:/kubepods/besteffort/pod" + UID_B + "/" + CID_B + "\n")
CRIO = ("0::/kubepods.slice/kubepods-pod" + UID_B.replace("-", "_")
        + ".slice/crio-" + CID_B + ".scope\n")
HOST = "0::/system.slice/sshd.service\n"


def write_proc(root: Path, pid: int, cgroup: str) -> None:
    (root / str(pid)).mkdir(parents=True)
    (root / str(pid) / "cgroup").write_text(cgroup)


def test_cgroup_paths(tmp_path: Path) -> None:
    for pid, text in ((1, V2_SYSTEMD), (2, V1_CGROUPFS), (3, CRIO), (4, HOST)):
        write_proc(tmp_path, pid, text)
    assert container_of_pid(1, tmp_path) == (UID_A, CID_A)
    assert container_of_pid(2, tmp_path) == (UID_B, CID_B)
    assert container_of_pid(3, tmp_path) == (UID_B, CID_B)
    assert container_of_pid(4, tmp_path) is None
    assert container_of_pid(5, tmp_path) is None  # not visible (no hostPID)


class NVMLError(Exception):
    """Shaped like pynvml's errors: the class name and `.value`."""

    def __init__(self, value: int) -> None:
        super().__init__(value)
        self.value = value


@dataclass
class Proc:
    pid: int
    usedGpuMemory: int | None
    gpuInstanceId: int = 0xFFFFFFFF
    computeInstanceId: int = 0xFFFFFFFF


@dataclass
class UtilSample:
    pid: int
    timeStamp: int
    smUtil: int


@dataclass
class Memory:
    used: int


class ProcessNvml:
    """NVML's process calls for a node whose GPU 1 is time-sliced."""

    def __init__(self) -> None:
        self.procs: dict[str, list[Proc]] = {}
        self.samples: dict[str, list[UtilSample]] = {}
        self.used: dict[str, int] = {}
        self.asked: list[str] = []

    def nvmlDeviceGetHandleByUUID(self, uuid: str) -> str:
        self.asked.append(uuid)
        return uuid

    def nvmlDeviceGetComputeRunningProcesses(self, handle: str) -> list[Proc]:
        return self.procs.get(handle, [])

    def nvmlDeviceGetProcessUtilization(self, handle: str, since: int) -> list[UtilSample]:
        fresh = [s for s in self.samples.get(handle, []) if s.timeStamp > since]
        if not fresh:
            raise NVMLError(6)  # NOT_FOUND: nothing since `since`
        return fresh

    def nvmlDeviceGetMemoryInfo(self, handle: str) -> Memory:
        return Memory(self.used[handle])


@pytest.fixture
def api() -> Iterator[FakeApiServer]:
    server = FakeApiServer().start()
    try:
        yield server
    finally:
        server.stop()


def running(namespace: str, name: str, uid: str, container: str, cid: str) -> dict[str, object]:
    obj = pod(namespace, name, uid, {"team": namespace})
    obj["status"] = {"containerStatuses": [
        {"name": container, "containerID": f"containerd://{cid}"}]}
    return obj


def wait_until(predicate: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.02)


@pytest.fixture
def node(
    api: FakeApiServer, kubelet: SimKubeletHandle, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> tuple[ProcessNvml, Path]:
    monkeypatch.setenv("KUBECONFIG", api.write_kubeconfig(tmp_path / "kubeconfig"))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    api.state.pods = [running("ml", "nb-a", UID_A, "notebook", CID_A),
                      running("rs", "nb-b", UID_B, "notebook", CID_B)]
    shared, exclusive = gpu_uuid(1), gpu_uuid(0)
    kubelet.servicer.set_pods([
        pod_resources("ml", "nb-a", {"notebook": [("nvidia.com/gpu", [f"{shared}::0"])]}),
        pod_resources("rs", "nb-b", {"notebook": [("nvidia.com/gpu", [f"{shared}::1"])]}),
        pod_resources("ml", "trainer", {"main": [("nvidia.com/gpu", [exclusive])]}),
    ])
    proc_root = tmp_path / "proc"
    write_proc(proc_root, 101, V2_SYSTEMD)
    write_proc(proc_root, 202, V1_CGROUPFS)
    write_proc(proc_root, 303, HOST)
    lib = ProcessNvml()
    lib.procs[shared] = [Proc(101, 4 * GIB), Proc(202, 2 * GIB), Proc(303, 1 * GIB)]
    lib.used[shared] = 6 * GIB  # less than the processes claim: per-pod sums are scaled
    lib.samples[shared] = [UtilSample(101, 10, 30), UtilSample(101, 20, 50),
                           UtilSample(202, 20, 20)]
    lib.procs[exclusive] = [Proc(999, GIB)]
    lib.used[exclusive] = GIB
    return lib, proc_root


def by_pod(source: KubeletSource, name: str) -> dict[str, tuple[Labels, float]]:
    (fam,) = [f for f in source.families() if f.name == name]
    return {dict(s.labels)["pod"]: (s.labels, s.value) for s in fam.samples}


async def test_per_container_use_of_a_time_sliced_gpu(
    node: tuple[ProcessNvml, Path], socket_path: str
) -> None:
    lib, proc_root = node
    config = KubernetesConfig(enabled=True, pod_resources_socket=socket_path,
                              node_name="node-a", process_attribution=True)
    source = KubeletSource(config, nvml_lib=lib, proc_root=str(proc_root))
    try:
        await source.refresh(plain_node(2))
        assert await source.wait_metadata(30)
        metadata = source._metadata
        assert metadata is not None
        wait_until(lambda: metadata.container_of(UID_B, CID_B) is not None)
        await source.refresh(plain_node(2))
        memory = by_pod(source, "gpu_exporter_pod_gpu_memory_used_bytes")
        sm = by_pod(source, "gpu_exporter_pod_gpu_sm_utilization_ratio")
        families = {f.name: f for f in source.families()}
    finally:
        await source.close()
    assert set(memory) == {"nb-a", "nb-b"}
    assert memory["nb-a"][1] == pytest.approx(4 * GIB * 6 / 7)
    assert memory["nb-b"][1] == pytest.approx(2 * GIB * 6 / 7)
    assert sum(v for _, v in memory.values()) <= 6 * GIB
    assert dict(memory["nb-a"][0]) == {"gpu": "1", "UUID": gpu_uuid(1), "pod": "nb-a",
                                       "namespace": "ml", "container": "notebook"}
    # The first poll consumed the samples: the second saw none, i.e. no SM activity.
    assert sm == {"nb-a": (memory["nb-a"][0], 0.0), "nb-b": (memory["nb-b"][0], 0.0)}
    assert families["gpu_exporter_unattributed_gpu_processes"].samples[0].value == 1
    assert gpu_uuid(0) not in lib.asked  # exclusive GPUs are labelled already; not sampled


async def test_sm_utilisation_from_process_samples(
    node: tuple[ProcessNvml, Path], socket_path: str
) -> None:
    lib, proc_root = node
    config = KubernetesConfig(enabled=True, pod_resources_socket=socket_path,
                              node_name="node-a", process_attribution=True)
    source = KubeletSource(config, nvml_lib=lib, proc_root=str(proc_root))
    try:
        await source.refresh(plain_node(2))
        assert await source.wait_metadata(30)
        metadata = source._metadata
        assert metadata is not None
        wait_until(lambda: metadata.container_of(UID_B, CID_B) is not None)
        lib.samples[gpu_uuid(1)] += [UtilSample(101, 30, 40), UtilSample(101, 40, 60),
                                     UtilSample(202, 40, 10)]
        await source.refresh(plain_node(2))
        sm = by_pod(source, "gpu_exporter_pod_gpu_sm_utilization_ratio")
    finally:
        await source.close()
    assert sm["nb-a"][1] == pytest.approx(0.5)  # mean of 40 and 60 %
    assert sm["nb-b"][1] == pytest.approx(0.1)


async def test_pod_scope_sees_only_its_own_processes(
    node: tuple[ProcessNvml, Path], socket_path: str
) -> None:
    lib, proc_root = node
    config = KubernetesConfig(enabled=True, pod_resources_socket=socket_path, scope="pod",
                              pod_name="nb-a", pod_namespace="ml", process_attribution=True)
    source = KubeletSource(config, nvml_lib=lib, proc_root=str(proc_root))
    try:
        await source.refresh(plain_node(2))
        assert await source.wait_metadata(30)
        metadata = source._metadata
        assert metadata is not None
        wait_until(lambda: metadata.container_of(UID_A, CID_A) is not None)
        await source.refresh(plain_node(2))
        families = source.families()
    finally:
        await source.close()
    dumped = repr(families)
    assert "nb-b" not in dumped and '"rs"' not in dumped and "'rs'" not in dumped
    assert "gpu_exporter_unattributed_gpu_processes" not in dumped
    memory = {dict(s.labels)["pod"] for f in families
              if f.name == "gpu_exporter_pod_gpu_memory_used_bytes" for s in f.samples}
    assert memory == {"nb-a"}

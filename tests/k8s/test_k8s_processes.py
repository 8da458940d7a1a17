"""Per-container use of shared GPUs: NVML process list + /proc/<pid>/cgroup + the pod watch.

Every part is real: the attribution source runs over the device layer's process reads on a
poll thread, over the unmodified pynvml on the simulated `libnvidia-ml.so.1` (tests/nvmlsim),
in a child interpreter because one process holds only one NVML library for life; the cgroup
files, the kubelet (gRPC) and the API server (HTTP) run here and the child reaches them by
path, socket and kubeconfig. The simulated clock is manual, so which utilisation samples each
poll sees is fixed by the test, not by scheduling.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from exporter.k8s.process_use import container_of_pid
from exporter.simulated.kubelet import SimKubeletHandle, pod_resources
from tests.nvmlsim.harness import run_child, write_scenario
from tests.support.apiserver import FakeApiServer, pod

from .k8s_helpers import gpu_uuid, mig_uuid

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

MEMORY = "gpu_exporter_pod_gpu_memory_used_bytes"
SM = "gpu_exporter_pod_gpu_sm_utilization_ratio"
UNATTRIBUTED = "gpu_exporter_unattributed_gpu_processes"

# GPU 1 is time-sliced between nb-a (pid 101) and nb-b (pid 202), with a host process (303)
# beside them; GPU 0 belongs to one trainer. The processes claim 7 GiB on GPU 1 but the
# device reports 6 GiB used (NVML's per-process figures are not exact), so per-pod sums
# must be scaled down. Utilisation samples are timed: none is due at t=0, the first batch
# by t=2, the second by t=4.
SCENARIO: dict[str, Any] = {
    "clock": "manual",
    "devices": [
        {"uuid": gpu_uuid(0), "memory_used_mib": 1024,
         "processes": [{"pid": 999, "used_mib": 1024, "sm_util": 90}]},
        {"uuid": gpu_uuid(1), "memory_used_mib": 6 * 1024,
         "processes": [
             {"pid": 101, "used_mib": 4 * 1024, "samples": [
                 {"at_s": 1, "sm_util": 30}, {"at_s": 2, "sm_util": 50},
                 {"at_s": 3, "sm_util": 40}, {"at_s": 4, "sm_util": 60}]},
             {"pid": 202, "used_mib": 2 * 1024, "samples": [
                 {"at_s": 2, "sm_util": 20}, {"at_s": 4, "sm_util": 10}]},
             {"pid": 303, "used_mib": 1024, "samples": [{"at_s": 2, "sm_util": 5}]},
         ]},
    ],
}

# GPU 1 in MIG mode instead: GPU instance 2 is split into two compute instances, one for each
# notebook, so the instance is shared; GPU instances 1 and 5 are held by nobody. NVML has no
# per-process utilisation under MIG, so only framebuffer can be attributed, and it is scaled
# within the GPU instance's own used memory (3 GiB against 6.5 GiB claimed).
MIG_SCENARIO: dict[str, Any] = {
    "clock": "manual",
    "devices": [
        SCENARIO["devices"][0],
        {"uuid": gpu_uuid(1), "mig": [
            {"gi": 1, "profile": "2g.35gb", "compute_instances": [
                {"index": 0, "ci": 0, "uuid": mig_uuid(1, 1, 0)}]},
            {"gi": 2, "profile": "3g.71gb", "memory_used_mib": 3 * 1024, "compute_instances": [
                {"index": 1, "ci": 0, "profile": "1c.3g.71gb", "uuid": mig_uuid(1, 2, 0)},
                {"index": 2, "ci": 1, "profile": "2c.3g.71gb", "uuid": mig_uuid(1, 2, 1)}]},
            {"gi": 5, "profile": "1g.18gb", "compute_instances": [
                {"index": 3, "ci": 0, "uuid": mig_uuid(1, 5, 0)}]}],
         "processes": [
             {"pid": 101, "used_mib": 4 * 1024, "gi": 2, "ci": 0},
             {"pid": 202, "used_mib": 2 * 1024, "gi": 2, "ci": 1},
             {"pid": 303, "used_mib": 512, "gi": 2, "ci": 0},
             {"pid": 404, "used_mib": 1024, "gi": 5, "ci": 0}]},
    ],
}

# GPU 1 shared through MPS instead: nb-a's process is an MPS client, which drivers list only
# in the MPS process list; nb-b's appears in both lists, and counts once.
MPS_SCENARIO: dict[str, Any] = {
    "clock": "manual",
    "devices": [
        SCENARIO["devices"][0],
        {**SCENARIO["devices"][1], "processes": [
            {**SCENARIO["devices"][1]["processes"][0], "mps": 1},
            *SCENARIO["devices"][1]["processes"][1:],
            {"pid": 202, "used_mib": 2 * 1024, "mps": 1}]},
    ],
}

# In the child: the source with process reads over pynvml on a poll thread, one poll to start
# the pod watch, a bounded wait until the watch knows the pods, then one poll per simulated
# time, each poll's families kept.
CHILD = """
import asyncio, json, threading, time
from exporter.devices.process_reads import ProcessReader
from exporter.k8s.config import KubernetesConfig
from exporter.k8s.source import KubeletSource
from exporter.sampling.worker import DaemonExecutor
from tests.k8s.k8s_helpers import mig_node, plain_node

params = json.loads({params!r})
pynvml.nvmlInit()
poll_worker = DaemonExecutor("poll")
reader = ProcessReader(pynvml)
read_on = set()
unwatched_read = reader.read

def read(entities):  # notes the thread each NVML read runs on
    read_on.add(threading.current_thread().name)
    return unwatched_read(entities)

reader.read = read
process_reads = reader.on_thread(poll_worker)

async def main():
    inventory = mig_node() if params["mig"] else plain_node(2)
    source = KubeletSource(KubernetesConfig(**params["config"]), process_reads=process_reads,
                           proc_root=params["proc_root"])
    try:
        await source.refresh(inventory)
        assert await source.wait_metadata(30), "pod watch not set up"
        metadata = source._metadata
        deadline = time.monotonic() + 30
        while not all(metadata.container_of(uid, cid) for uid, cid in params["known"]):
            assert time.monotonic() < deadline, "pod watch never listed the pods"
            await asyncio.sleep(0.02)
        sim.reset_call_counts()
        polls = []
        for t in params["times"]:
            sim.set_time(t)
            await source.refresh(inventory)
            polls.append({{f.name: [[dict(s.labels), s.value] for s in f.samples]
                          for f in source.families()}})
        out["polls"] = polls
        out["process_lists"] = [
            sim.call_count("nvmlDeviceGetComputeRunningProcesses_v3", gpu=g) for g in (0, 1)]
        out["mps_lists"] = [
            sim.call_count("nvmlDeviceGetMPSComputeRunningProcesses_v3", gpu=g) for g in (0, 1)]
        out["read_on"] = sorted(read_on)
    finally:
        await source.close()
        poll_worker.shutdown()

asyncio.run(main())
"""

Poll = dict[str, list[tuple[dict[str, str], float]]]


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


def running(namespace: str, name: str, uid: str, container: str, cid: str) -> dict[str, object]:
    obj = pod(namespace, name, uid, {"team": namespace})
    obj["status"] = {"containerStatuses": [
        {"name": container, "containerID": f"containerd://{cid}"}]}
    return obj


class Node:
    """The kubelet, API server and /proc of a node whose GPU 1 is time-sliced; `run` drives
    the attribution source over the simulated NVML in a child interpreter."""

    def __init__(self, lib_dir: Path, api: FakeApiServer, kubelet: SimKubeletHandle,
                 socket_path: str, tmp: Path) -> None:
        self.lib_dir, self.kubelet, self.socket_path, self.tmp = lib_dir, kubelet, socket_path, tmp
        self.kubeconfig = api.write_kubeconfig(tmp / "kubeconfig")
        self.proc_root = tmp / "proc"
        write_proc(self.proc_root, 101, V2_SYSTEMD)
        write_proc(self.proc_root, 202, V1_CGROUPFS)
        write_proc(self.proc_root, 303, HOST)

    def run(self, config: dict[str, Any], times: list[float], known: list[tuple[str, str]],
            mig: bool = False, scenario: dict[str, Any] | None = None
            ) -> tuple[list[Poll], list[int]]:
        params = {"config": {"enabled": True, "pod_resources_socket": self.socket_path,
                             "process_attribution": True, **config},
                  "proc_root": str(self.proc_root), "times": times, "known": known, "mig": mig}
        result = run_child(
            self.lib_dir, CHILD.format(params=json.dumps(params)),
            scenario_file=write_scenario(
                self.tmp, scenario or (MIG_SCENARIO if mig else SCENARIO)),
            env={"KUBECONFIG": self.kubeconfig},
            timeout=120)
        polls = [{name: [(labels, value) for labels, value in rows]
                  for name, rows in poll.items()} for poll in result["polls"]]
        # every per-process NVML read ran on the poll thread, none on a thread of its own
        assert result["read_on"] == ["poll"]
        self.mps_lists = result["mps_lists"]
        return polls, result["process_lists"]


@pytest.fixture
def node(nvmlsim_lib: Path, api: FakeApiServer, kubelet: SimKubeletHandle, socket_path: str,
         tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Node:
    # The child inherits this environment: in-cluster settings would beat the kubeconfig.
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    api.state.pods = [running("ml", "nb-a", UID_A, "notebook", CID_A),
                      running("rs", "nb-b", UID_B, "notebook", CID_B)]
    shared, exclusive = gpu_uuid(1), gpu_uuid(0)
    kubelet.servicer.set_pods([
        pod_resources("ml", "nb-a", {"notebook": [("nvidia.com/gpu", [f"{shared}::0"])]}),
        pod_resources("rs", "nb-b", {"notebook": [("nvidia.com/gpu", [f"{shared}::1"])]}),
        pod_resources("ml", "trainer", {"main": [("nvidia.com/gpu", [exclusive])]}),
    ])
    return Node(nvmlsim_lib, api, kubelet, socket_path, tmp_path)


def by_pod(poll: Poll, name: str) -> dict[str, tuple[dict[str, str], float]]:
    return {labels["pod"]: (labels, value) for labels, value in poll[name]}


def test_per_container_use_of_a_time_sliced_gpu(node: Node) -> None:
    (poll,), process_lists = node.run({"node_name": "node-a"}, [2.0],
                                      [(UID_A, CID_A), (UID_B, CID_B)])
    memory, sm = by_pod(poll, MEMORY), by_pod(poll, SM)
    assert set(memory) == {"nb-a", "nb-b"}
    assert memory["nb-a"][1] == pytest.approx(4 * GIB * 6 / 7)
    assert memory["nb-b"][1] == pytest.approx(2 * GIB * 6 / 7)
    assert sum(v for _, v in memory.values()) <= 6 * GIB
    assert memory["nb-a"][0] == {"gpu": "1", "UUID": gpu_uuid(1), "pod": "nb-a",
                                 "namespace": "ml", "container": "notebook"}
    assert {pod: labels for pod, (labels, _) in sm.items()} == {
        pod: labels for pod, (labels, _) in memory.items()}
    assert {pod: v for pod, (_, v) in sm.items()} == pytest.approx(
        {"nb-a": 0.4, "nb-b": 0.2})  # nb-a: mean of 30 and 50 %
    assert poll[UNATTRIBUTED] == [({}, 1.0)]  # the host process, pid 303
    # Exclusive GPUs are labelled already: their processes are never listed.
    assert process_lists[0] == 0
    assert process_lists[1] > 0


def test_sm_utilisation_from_process_samples_since_the_last_poll(node: Node) -> None:
    polls, _ = node.run({"node_name": "node-a"}, [2.0, 2.0, 4.0],
                        [(UID_A, CID_A), (UID_B, CID_B)])
    first, idle, later = (by_pod(p, SM) for p in polls)
    assert {pod: v for pod, (_, v) in first.items()} == pytest.approx({"nb-a": 0.4, "nb-b": 0.2})
    # No sample since the previous poll means no SM activity, not the last value again.
    assert {pod: v for pod, (_, v) in idle.items()} == {"nb-a": 0.0, "nb-b": 0.0}
    assert {pod: v for pod, (_, v) in later.items()} == pytest.approx(
        {"nb-a": 0.5, "nb-b": 0.1})  # nb-a: mean of 40 and 60 %
    # Framebuffer is a level, not a rate: the same in every poll.
    assert by_pod(polls[0], MEMORY) == by_pod(polls[1], MEMORY) == by_pod(polls[2], MEMORY)


def test_pod_scope_sees_only_its_own_processes(node: Node) -> None:
    (poll,), _ = node.run({"scope": "pod", "pod_name": "nb-a", "pod_namespace": "ml"}, [2.0],
                          [(UID_A, CID_A)])
    dumped = json.dumps(poll)
    assert "nb-b" not in dumped
    assert '"rs"' not in dumped
    assert UNATTRIBUTED not in poll
    assert set(by_pod(poll, MEMORY)) == {"nb-a"}
    assert by_pod(poll, MEMORY)["nb-a"][1] == pytest.approx(4 * GIB * 6 / 7)
    assert set(by_pod(poll, SM)) == {"nb-a"}


def test_a_shared_mig_instance_gets_framebuffer_only(node: Node) -> None:
    node.kubelet.servicer.set_pods([
        pod_resources("ml", "nb-a", {"notebook": [("nvidia.com/mig-3g.71gb",
                                                   [mig_uuid(1, 2, 0)])]}),
        pod_resources("rs", "nb-b", {"notebook": [("nvidia.com/mig-3g.71gb",
                                                   [mig_uuid(1, 2, 1)])]}),
        pod_resources("ml", "trainer", {"main": [("nvidia.com/gpu", [gpu_uuid(0)])]}),
    ])
    (poll,), process_lists = node.run({"node_name": "node-a"}, [2.0],
                                      [(UID_A, CID_A), (UID_B, CID_B)], mig=True)
    memory = by_pod(poll, MEMORY)
    assert memory["nb-a"][0] == {"gpu": "1", "UUID": gpu_uuid(1), "GPU_I_ID": "2",
                                 "pod": "nb-a", "namespace": "ml", "container": "notebook"}
    scale = 3 / 6.5  # pid 404 runs in GPU instance 5: not part of instance 2's sum
    assert memory["nb-a"][1] == pytest.approx(4 * GIB * scale)
    assert memory["nb-b"][1] == pytest.approx(2 * GIB * scale)
    assert poll[SM] == []
    assert poll[UNATTRIBUTED] == [({}, 1.0)]  # pid 303, in instance 2 but not in a pod
    assert process_lists[0] == 0


NO_MPS_CALL = {"return_codes": {"nvmlDeviceGetMPSComputeRunningProcesses_v3": "FUNCTION_NOT_FOUND"}}


@pytest.mark.parametrize(("scenario", "mps_lists"), [
    # Asked on the shared GPU at every poll (pynvml makes two C calls: count, then entries).
    (MPS_SCENARIO, [0, 4]),
    ({**SCENARIO, **NO_MPS_CALL}, [0, 1]),  # a driver without it: asked once, not again
])
def test_mps_clients_count_like_compute_processes(
        node: Node, scenario: dict[str, Any], mps_lists: list[int]) -> None:
    polls, _ = node.run({"node_name": "node-a"}, [2.0, 4.0], [(UID_A, CID_A), (UID_B, CID_B)],
                        scenario=scenario)
    memory = by_pod(polls[0], MEMORY)
    assert {pod: v for pod, (_, v) in memory.items()} == pytest.approx(
        {"nb-a": 4 * GIB * 6 / 7, "nb-b": 2 * GIB * 6 / 7})
    assert {pod: v for pod, (_, v) in by_pod(polls[0], SM).items()} == pytest.approx(
        {"nb-a": 0.4, "nb-b": 0.2})
    assert polls[0][UNATTRIBUTED] == [({}, 1.0)]  # the host process, pid 303
    assert node.mps_lists == mps_lists

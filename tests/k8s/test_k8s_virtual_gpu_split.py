"""Virtual GPUs split per holder: each holder's `FB_USED` and `GPU_UTIL` from its processes.

The whole poll runs for real in a child interpreter: the NVML backend and the per-process reads
on one poll thread over the unmodified pynvml and the simulated `libnvidia-ml.so.1`
(tests/nvmlsim), the kubelet (gRPC) and the API server (HTTP) of this process, cgroup files
under a private /proc, the sampler and the exposition. The test reads the body the sampler
published, as a scrape would get it, and compares it with what the simulated library says
each process uses. The simulated clock is manual, so which utilisation samples a poll sees is
fixed by the test.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from exporter.simulated.kubelet import SimKubeletHandle, pod_resources
from tests.nvmlsim.harness import run_child, write_scenario
from tests.support.apiserver import FakeApiServer, pod

from .k8s_helpers import gpu_uuid, mig_uuid

FB_USED = "DCGM_FI_DEV_FB_USED"
GPU_UTIL = "DCGM_FI_DEV_GPU_UTIL"
POWER = "DCGM_FI_DEV_POWER_USAGE"
GPU = "nvidia.com/gpu"
A100 = {"name": "NVIDIA A100-SXM4-80GB", "memory_total_mib": 81920, "gpm_supported": False,
        "power_w": 250}
HOST_CGROUP = "0::/system.slice/containerd.service\n"


def uid(n: int) -> str:
    return f"{n:08x}-0000-4000-8000-{n:012x}"


def cid(n: int) -> str:
    return f"{n:x}".rjust(64, "c")


def cgroup(n: int) -> str:
    return (f"0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod"
            f"{uid(n).replace('-', '_')}.slice/cri-containerd-{cid(n)}.scope\n")


def proc(pid: int, mib: int, *busy: tuple[float, int], **extra: Any) -> dict[str, Any]:
    """A process with its framebuffer and utilisation samples (at, SM %)."""
    return {"pid": pid, "used_mib": mib, **extra,
            "samples": [{"at_s": at, "sm_util": sm} for at, sm in busy]}


# Four A100s time-sliced as on the `a100-timesliced` node: three replicas each.
#   GPU 0: three embedders, each running one process, beside a host process (no pod).
#   GPU 1: two embedders run processes, the third holds its replica and runs none; pid 2003's
#          cgroup cannot be read.
#   GPU 2: one container holds two replicas, another pod the third.
#   GPU 3: NVML's per-process framebuffer (7 GiB) exceeds the device's used memory (6 GiB),
#          and the processes' SM samples (50 %) exceed the device's utilisation (20 %).
SCENARIO: dict[str, Any] = {
    "clock": "manual",
    "devices": [
        {**A100, "uuid": gpu_uuid(0), "memory_used_mib": 22528, "gpu_util": 80, "processes": [
            proc(1001, 10240, (1, 30), (2, 40)), proc(1002, 6144, (2, 20)),
            proc(1003, 4096, (2, 10)), proc(1099, 1024, (2, 5))]},
        {**A100, "uuid": gpu_uuid(1), "memory_used_mib": 9216, "gpu_util": 50, "processes": [
            proc(2001, 5120, (2, 30)), proc(2002, 2048, (2, 15)), proc(2003, 1024, (2, 5))]},
        {**A100, "uuid": gpu_uuid(2), "memory_used_mib": 12288, "gpu_util": 60, "processes": [
            proc(3001, 8192, (2, 40)), proc(3002, 3072, (2, 20))]},
        {**A100, "uuid": gpu_uuid(3), "memory_used_mib": 6144, "gpu_util": 20, "processes": [
            proc(4001, 4096, (2, 30)), proc(4002, 3072, (2, 20))]},
    ],
}

# (namespace, pod, container, pod number (UID and container id), grants); pod n's processes
# run in cgroup(n).
PODS: list[tuple[str, str, int, list[str]]] = [
    ("emb", "emb-0", 1, [f"{gpu_uuid(0)}::0"]),
    ("emb", "emb-1", 2, [f"{gpu_uuid(0)}::1"]),
    ("emb", "emb-2", 3, [f"{gpu_uuid(0)}::2"]),
    ("emb", "emb-3", 4, [f"{gpu_uuid(1)}::0"]),
    ("emb", "emb-4", 5, [f"{gpu_uuid(1)}::1"]),
    ("emb", "emb-5", 6, [f"{gpu_uuid(1)}::2"]),
    ("nb", "greedy", 7, [f"{gpu_uuid(2)}::0", f"{gpu_uuid(2)}::1"]),
    ("emb", "emb-6", 8, [f"{gpu_uuid(2)}::2"]),
    ("emb", "emb-7", 9, [f"{gpu_uuid(3)}::0"]),
    ("emb", "emb-8", 10, [f"{gpu_uuid(3)}::1"]),
]
PROCESS_POD = {1001: 1, 1002: 2, 1003: 3, 2001: 4, 2002: 5, 3001: 7, 3002: 8, 4001: 9,
               4002: 10}

# GPU 1 in MIG mode: GPU instance 2 is split into two compute instances, one per notebook;
# NVML lists the processes on the parent with their GPU instance. GPU 0 stays whole and
# time-sliced as above.
MIG_SCENARIO: dict[str, Any] = {
    "clock": "manual",
    "devices": [
        SCENARIO["devices"][0],
        {"uuid": gpu_uuid(1), "mig": [
            {"gi": 2, "profile": "3g.71gb", "memory_used_mib": 8192, "compute_instances": [
                {"index": 0, "ci": 0, "profile": "1c.3g.71gb", "uuid": mig_uuid(1, 2, 0)},
                {"index": 1, "ci": 1, "profile": "2c.3g.71gb", "uuid": mig_uuid(1, 2, 1)}]},
            {"gi": 5, "profile": "1g.18gb", "compute_instances": [
                {"index": 2, "ci": 0, "uuid": mig_uuid(1, 5, 0)}]}],
         "processes": [
             {"pid": 5001, "used_mib": 4096, "gi": 2, "ci": 0},
             {"pid": 5002, "used_mib": 2048, "gi": 2, "ci": 1},
             {"pid": 5099, "used_mib": 512, "gi": 2, "ci": 0},
             {"pid": 5003, "used_mib": 1024, "gi": 5, "ci": 0}]},
    ],
}
MIG_PODS: list[tuple[str, str, int, list[str]]] = [
    *PODS[:3],
    ("nb", "nb-a", 11, [mig_uuid(1, 2, 0)]),
    ("nb", "nb-b", 12, [mig_uuid(1, 2, 1)]),
]
MIG_PROCESS_POD = {1001: 1, 1002: 2, 1003: 3, 5001: 11, 5002: 12}

COLLECTORS = (f"{FB_USED}, gauge, Framebuffer used.\n{GPU_UTIL}, gauge, Utilisation.\n"
              f"{POWER}, gauge, Power.\n")

# In the child: backend and per-process reads on one poll thread, the attribution source and
# the sampler as `serve` wires them; one poll to start the pod watch, a bounded wait until it
# names every container, then one poll per simulated time, each published body kept.
CHILD = """
import asyncio, json, threading, time
from exporter.devices.nvml import NvmlBackend
from exporter.devices.process_reads import ProcessReader
from exporter.exposition.publisher import Publisher
from exporter.fields.csv import parse_collectors
from exporter.k8s.config import KubernetesConfig
from exporter.k8s.source import KubeletSource
from exporter.sampling.sampler import Sampler
from exporter.sampling.config import SamplerSettings
from exporter.sampling.snapshot import HostLabel
from exporter.sampling.worker import DaemonExecutor

params = json.loads({params!r})
collectors = parse_collectors(params["collectors"], "collectors.csv")
poll_worker = DaemonExecutor("poll")
backend = NvmlBackend(pynvml, collectors.specs)
backend.start()
reader = ProcessReader(pynvml)
read_on = set()
unwatched_read = reader.read

def read(entities):  # notes the thread each NVML read runs on
    read_on.add(threading.current_thread().name)
    return unwatched_read(entities)

reader.read = read

async def main():
    source = KubeletSource(KubernetesConfig(**params["config"]),
                           process_reads=reader.on_thread(poll_worker),
                           proc_root=params["proc_root"])
    sampler = Sampler(backend, collectors,
                      SamplerSettings(interval_s=30.0, host=HostLabel("Hostname", "node-a")),
                      Publisher("nvml"), source, poll_worker=poll_worker)
    try:
        await sampler.poll_once()
        if params["known"]:
            assert await source.wait_metadata(30), "pod watch not set up"
            deadline = time.monotonic() + 30
            while not all(source._metadata.container_of(u, c) for u, c in params["known"]):
                assert time.monotonic() < deadline, "pod watch never listed the pods"
                await asyncio.sleep(0.02)
        sim.reset_call_counts()
        bodies = []
        for t in params["times"]:
            sim.set_time(t)
            await sampler.poll_once()
            bodies.append(sampler.current.text.decode())
        out["bodies"] = bodies
        out["process_lists"] = sum(
            sim.call_count("nvmlDeviceGetComputeRunningProcesses_v3", gpu=g)
            for g in range(params["gpus"]))
        out["read_on"] = sorted(read_on)
    finally:
        await sampler.close()

asyncio.run(main())
"""

Series = dict[tuple[int, int, str], float]
"""(gpu, GPU_I_ID or -1, holder: "pod/vgpu", or "" for the device's own series) -> value."""


def parse(body: str, name: str) -> Series:
    out: Series = {}
    for family in text_string_to_metric_families(body):
        for s in family.samples:
            if s.name != name:
                continue
            holder = f"{s.labels['pod']}/{s.labels.get('vgpu', '')}" if "pod" in s.labels else ""
            key = (int(s.labels["gpu"]), int(s.labels.get("GPU_I_ID", -1)), holder)
            assert key not in out, f"two {name} series for {key}"
            out[key] = s.value
    return out


def on(series: Series, gpu: int, gi: int = -1) -> dict[str, float]:
    return {holder: v for (g, i, holder), v in series.items() if (g, i) == (gpu, gi)}


def running(namespace: str, name: str, n: int) -> dict[str, Any]:
    obj = pod(namespace, name, uid(n), {})
    obj["status"] = {"containerStatuses": [
        {"name": "server", "containerID": f"containerd://{cid(n)}"}]}
    return obj


class Node:
    """The kubelet, API server and /proc of the node; `run` polls it in a child."""

    def __init__(self, lib_dir: Path, api: FakeApiServer, kubelet: SimKubeletHandle,
                 socket_path: str, tmp: Path) -> None:
        self.lib_dir, self.api, self.kubelet = lib_dir, api, kubelet
        self.socket_path, self.tmp = socket_path, tmp
        self.kubeconfig = api.write_kubeconfig(tmp / "kubeconfig")
        self.proc_root = tmp / "proc"

    def place(self, pods: list[tuple[str, str, int, list[str]]], process_pod: dict[int, int],
              *, unnamed: tuple[str, ...] = (), host_pids: bool = True) -> None:
        """The kubelet hands out the grants; the API server lists every pod but `unnamed`;
        each process's cgroup names its pod's container. `host_pids=False`: /proc shows none
        of the processes (an exporter without `hostPID: true`)."""
        self.kubelet.servicer.set_pods([
            pod_resources(ns, name, {"server": [(GPU if "::" in ids[0] else
                                                 "nvidia.com/mig-3g.71gb", ids)]})
            for ns, name, _, ids in pods])
        self.api.state.pods = [running(ns, name, n) for ns, name, n, _ in pods
                               if name not in unnamed]
        self.known = [(uid(n), cid(n)) for _, name, n, _ in pods if name not in unnamed]
        self.proc_root.mkdir(exist_ok=True)
        if not host_pids:
            return
        for pid, n in process_pod.items():
            (self.proc_root / str(pid)).mkdir(parents=True, exist_ok=True)
            (self.proc_root / str(pid) / "cgroup").write_text(cgroup(n))
        for pid in (1099, 5099):  # host processes
            (self.proc_root / str(pid)).mkdir(parents=True, exist_ok=True)
            (self.proc_root / str(pid) / "cgroup").write_text(HOST_CGROUP)
        # pid 2003: its cgroup file cannot be read (a directory where the file should be)
        (self.proc_root / "2003" / "cgroup").mkdir(parents=True, exist_ok=True)

    def run(self, scenario: dict[str, Any], times: list[float], *, virtual_gpus: bool = True
            ) -> tuple[list[str], int]:
        """(the body published after each poll, how often the process lists were read)."""
        params = {"config": {"enabled": True, "pod_resources_socket": self.socket_path,
                             "virtual_gpus": virtual_gpus, "node_name": "node-a"},
                  "proc_root": str(self.proc_root), "times": times,
                  "known": self.known if virtual_gpus else [], "collectors": COLLECTORS,
                  "gpus": len(scenario["devices"])}
        result = run_child(self.lib_dir, CHILD.format(params=json.dumps(params)),
                           scenario_file=write_scenario(self.tmp, scenario),
                           env={"KUBECONFIG": self.kubeconfig}, timeout=120)
        if virtual_gpus:
            # every NVML read of the processes ran on the poll thread, none elsewhere
            assert result["read_on"] == ["poll"]
        self.stderr: str = result["_stderr"]
        return result["bodies"], result["process_lists"]


@pytest.fixture
def node(nvmlsim_lib: Path, api: FakeApiServer, kubelet: SimKubeletHandle, socket_path: str,
         tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Node:
    # The child inherits this environment: in-cluster settings would beat the kubeconfig.
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    return Node(nvmlsim_lib, api, kubelet, socket_path, tmp_path)


def truth_mib(scenario: dict[str, Any], process_pod: dict[int, int], pods: list[Any]
              ) -> dict[str, int]:
    """Each pod's framebuffer as the simulated library lists its processes (MiB)."""
    name_of = {n: name for _, name, n, _ in pods}
    out: dict[str, int] = {}
    for device in scenario["devices"]:
        for p in device.get("processes", []):
            if p["pid"] in process_pod:
                pod_name = name_of.get(process_pod[p["pid"]])
                if pod_name is not None:
                    out[pod_name] = out.get(pod_name, 0) + p["used_mib"]
    return out


def test_time_sliced_holders_get_their_own_framebuffer_and_utilisation(node: Node) -> None:
    node.place(PODS, PROCESS_POD)
    (body,), _ = node.run(SCENARIO, [2.0])
    fb, util, power = parse(body, FB_USED), parse(body, GPU_UTIL), parse(body, POWER)
    truth = truth_mib(SCENARIO, PROCESS_POD, PODS)

    # GPU 0: each embedder's framebuffer is its process's, to the MiB; the host process's
    # gigabyte is in the device's figure only.
    assert on(fb, 0) == {"": 22528, "emb-0/0": truth["emb-0"], "emb-1/1": truth["emb-1"],
                         "emb-2/2": truth["emb-2"]}
    assert (truth["emb-0"], truth["emb-1"], truth["emb-2"]) == (10240, 6144, 4096)
    # Utilisation: each process's samples since the previous poll, averaged.
    assert on(util, 0) == {"": 80, "emb-0/0": 35, "emb-1/1": 20, "emb-2/2": 10}

    # GPU 1: the holder running no process reads 0; the unreadable cgroup's process is
    # nobody's.
    assert on(fb, 1) == {"": 9216, "emb-3/0": 5120, "emb-4/1": 2048, "emb-5/2": 0}
    assert on(util, 1) == {"": 50, "emb-3/0": 30, "emb-4/1": 15, "emb-5/2": 0}

    # GPU 2: one container on two replicas splits its use evenly between its two copies.
    assert on(fb, 2) == {"": 12288, "greedy/0": 4096, "greedy/1": 4096, "emb-6/2": 3072}
    assert on(util, 2) == {"": 60, "greedy/0": 20, "greedy/1": 20, "emb-6/2": 20}

    # GPU 3: scaled within the device's own figures, in proportion.
    assert on(fb, 3)[""] == 6144
    assert on(fb, 3)["emb-7/0"] == 4096 * 6144 // 7168
    assert on(fb, 3)["emb-8/1"] == 3072 * 6144 // 7168
    assert on(util, 3) == pytest.approx({"": 20, "emb-7/0": 12, "emb-8/1": 8})

    for gpu in range(4):
        for series in (fb, util):
            holders = {h: v for h, v in on(series, gpu).items() if h}
            assert sum(holders.values()) <= on(series, gpu)[""]
    # Every other field keeps the device's value on each copy, with no unlabelled copy.
    assert on(power, 0) == {"emb-0/0": 250, "emb-1/1": 250, "emb-2/2": 250}


def test_a_shared_mig_instance_splits_its_framebuffer(node: Node) -> None:
    node.place(MIG_PODS, MIG_PROCESS_POD)
    (body,), _ = node.run(MIG_SCENARIO, [2.0])
    fb, util = parse(body, FB_USED), parse(body, GPU_UTIL)
    truth = truth_mib(MIG_SCENARIO, MIG_PROCESS_POD, MIG_PODS)
    # The instance's own used memory, then each notebook's processes; pid 5099 runs in the
    # instance outside any pod, pid 5003 in another instance.
    assert on(fb, 1, 2) == {"": 8192, "nb-a/": truth["nb-a"], "nb-b/": truth["nb-b"]}
    assert (truth["nb-a"], truth["nb-b"]) == (4096, 2048)
    # No GPU_UTIL exists for a MIG instance: none is made up for its holders.
    assert not any(i >= 0 for _, i, _ in util)
    assert on(util, 0) == {"": 80, "emb-0/0": 35, "emb-1/1": 20, "emb-2/2": 10}


def test_unavailable_process_utilisation_leaves_gpu_util_out(node: Node) -> None:
    node.place(PODS, PROCESS_POD)
    scenario = {**SCENARIO, "return_codes": {"nvmlDeviceGetProcessUtilization": "NOT_SUPPORTED"}}
    (body,), _ = node.run(scenario, [2.0])
    fb, util = parse(body, FB_USED), parse(body, GPU_UTIL)
    # The device's own utilisation stays; no holder gets a number it cannot know.
    assert {gpu: on(util, gpu) for gpu in range(4)} == {0: {"": 80}, 1: {"": 50}, 2: {"": 60},
                                                        3: {"": 20}}
    assert on(fb, 0) == {"": 22528, "emb-0/0": 10240, "emb-1/1": 6144, "emb-2/2": 4096}


def test_a_process_in_a_pod_the_watch_does_not_name_withholds_its_gpus_split(
        node: Node) -> None:
    """emb-1's process runs, but the API server does not list its pod yet: on GPU 0 any holder
    could be using that memory, so none gets a figure; the other GPUs are unaffected."""
    node.place(PODS, PROCESS_POD, unnamed=("emb-1",))
    (body,), _ = node.run(SCENARIO, [2.0])
    fb, util = parse(body, FB_USED), parse(body, GPU_UTIL)
    assert on(fb, 0) == {"": 22528}
    assert on(util, 0) == {"": 80}
    assert on(fb, 1) == {"": 9216, "emb-3/0": 5120, "emb-4/1": 2048, "emb-5/2": 0}


def test_samples_count_since_the_previous_poll(node: Node) -> None:
    node.place(PODS, PROCESS_POD)
    bodies, _ = node.run(SCENARIO, [1.0, 2.0, 2.0])
    first, second, idle = (on(parse(b, GPU_UTIL), 0) for b in bodies)
    assert first == {"": 80, "emb-0/0": 30, "emb-1/1": 0, "emb-2/2": 0}
    assert second == {"": 80, "emb-0/0": 40, "emb-1/1": 20, "emb-2/2": 10}
    # No sample since the previous poll: idle, not the last figure again.
    assert idle == {"": 80, "emb-0/0": 0, "emb-1/1": 0, "emb-2/2": 0}


def test_without_virtual_gpus_no_process_is_read(node: Node) -> None:
    node.place(PODS, PROCESS_POD)
    (body,), process_lists = node.run(SCENARIO, [2.0], virtual_gpus=False)
    assert process_lists == 0
    # Shared GPUs keep one unlabelled series each, with the device's value.
    assert {gpu: on(parse(body, FB_USED), gpu) for gpu in range(4)} == {
        0: {"": 22528}, 1: {"": 9216}, 2: {"": 12288}, 3: {"": 6144}}


def test_without_host_pids_no_holder_gets_a_figure(node: Node) -> None:
    """NVML reports host PIDs: an exporter outside the host's PID namespace sees none of them
    in /proc, and cannot tell which holder uses what. Holders are left out (not read as 0),
    and the cause is logged."""
    node.place(PODS, PROCESS_POD, host_pids=False)
    (body,), _ = node.run(SCENARIO, [2.0])
    fb, util = parse(body, FB_USED), parse(body, GPU_UTIL)
    assert {gpu: on(fb, gpu) for gpu in range(4)} == {
        0: {"": 22528}, 1: {"": 9216}, 2: {"": 12288}, 3: {"": 6144}}
    assert {gpu: on(util, gpu) for gpu in range(4)} == {
        0: {"": 80}, 1: {"": 50}, 2: {"": 60}, 3: {"": 20}}
    assert "hostPID: true" in node.stderr

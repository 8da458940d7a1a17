"""Running processes on the simulated node's time-sliced GPUs, through pynvml's call names and
return shapes, and process attribution reading them through the device layer."""

from __future__ import annotations

from pathlib import Path

import pynvml
import pytest

from exporter.devices.enumerate import enumerate_devices
from exporter.devices.filter import ALL_DEVICES
from exporter.devices.process_reads import ProcessReader
from exporter.devices.read_plan import NVML_MEMORY_V2
from exporter.k8s.process_use import ProcessUsage
from exporter.sampling.worker import DaemonExecutor
from exporter.simulated.node import SimNvml
from exporter.simulated.node.process_table import SAMPLE_PERIOD_S

from .conftest import SimFactory, nvml_code

MIB = 1024 * 1024
NO_ID = 0xFFFFFFFF


def processes(sim: SimNvml, gpu: int) -> list[tuple[int, int | None, int, int]]:
    handle = sim.nvmlDeviceGetHandleByIndex(gpu)
    return [(p.pid, p.usedGpuMemory, p.gpuInstanceId, p.computeInstanceId)
            for p in sim.nvmlDeviceGetComputeRunningProcesses(handle)]


def used_bytes(sim: SimNvml, gpu: int) -> int:
    handle = sim.nvmlDeviceGetHandleByIndex(gpu)
    return int(sim.nvmlDeviceGetMemoryInfo(handle, version=pynvml.nvmlMemory_v2).used)


def test_each_time_sliced_gpu_runs_its_tenants(make_sim: SimFactory) -> None:
    sim, clock = make_sim("a100-timesliced")
    pids: list[int] = []
    for gpu in range(4):
        procs = processes(sim, gpu)
        assert len(procs) == 3  # one per pod the demo kubelet gives this GPU
        assert all(gi == ci == NO_ID for _, _, gi, ci in procs)  # MIG is off
        pids += [pid for pid, _, _, _ in procs]
    assert len(set(pids)) == len(pids)
    assert all(1000 <= pid < 4_194_304 for pid in pids)
    seen = set()
    for _ in range(12):  # across the memory ramps: jobs fill the framebuffer, then restart
        clock.advance(97.0)
        for gpu in range(4):
            memory = [used for _, used, _, _ in processes(sim, gpu)]
            assert all(used is not None and used > 0 and used % MIB == 0 for used in memory)
            total = sum(used for used in memory if used is not None)
            assert total <= used_bytes(sim, gpu)
            assert total > 0.95 * used_bytes(sim, gpu)  # the tenants hold nearly all of it
            seen.add(total)
    assert len(seen) > 4  # per-process memory follows the device, not a constant


def test_tenants_take_turns_by_time_slicing_not_mps(make_sim: SimFactory) -> None:
    sim, _clock = make_sim("a100-timesliced")
    handle = sim.nvmlDeviceGetHandleByIndex(0)
    assert sim.nvmlDeviceGetMPSComputeRunningProcesses_v3(handle) == []
    assert len(processes(sim, 0)) == 3


def test_same_processes_for_a_seed(make_sim: SimFactory) -> None:
    first, _ = make_sim("a100-timesliced", seed=3)
    again, _ = make_sim("a100-timesliced", seed=3)
    other, _ = make_sim("a100-timesliced", seed=4)
    assert processes(first, 2) == processes(again, 2)
    assert {p[0] for p in processes(first, 2)} != {p[0] for p in processes(other, 2)}


@pytest.mark.parametrize("profile", ["h100-8", "h200-mig", "l4-1"])
def test_other_profiles_model_no_processes(make_sim: SimFactory, profile: str) -> None:
    sim, _ = make_sim(profile)
    for gpu in range(sim.nvmlDeviceGetCount()):
        assert processes(sim, gpu) == []


def test_process_utilisation_is_refused_under_mig(make_sim: SimFactory) -> None:
    sim, _ = make_sim("h200-mig")
    parent = sim.nvmlDeviceGetHandleByIndex(0)
    mig = sim.nvmlDeviceGetMigDeviceHandleByIndex(parent, 0)
    assert nvml_code(lambda: sim.nvmlDeviceGetProcessUtilization(parent, 0)) == \
        pynvml.NVML_ERROR_NOT_SUPPORTED
    assert nvml_code(lambda: sim.nvmlDeviceGetProcessUtilization(mig, 0)) == \
        pynvml.NVML_ERROR_NOT_SUPPORTED
    assert sim.nvmlDeviceGetComputeRunningProcesses(mig) == []


def test_samples_split_the_gpus_busy_time_and_arrive_once(make_sim: SimFactory) -> None:
    sim, clock = make_sim("a100-timesliced")
    clock.advance(100.0)
    busy = None
    for gpu in range(4):
        handle = sim.nvmlDeviceGetHandleByIndex(gpu)
        if sim.nvmlDeviceGetUtilizationRates(handle).gpu >= 30:
            busy = handle
            break
    assert busy is not None, "no busy GPU in the profile at t=100 s"
    pids = {p.pid for p in sim.nvmlDeviceGetComputeRunningProcesses(busy)}
    samples = sim.nvmlDeviceGetProcessUtilization(busy, 0)
    assert samples
    assert all(isinstance(s, pynvml.c_nvmlProcessUtilizationSample_t) for s in samples)
    assert {s.pid for s in samples} == pids
    (stamp,) = {s.timeStamp for s in samples}
    # Shares of the GPU's busy time in one sampling period: together at most all of it.
    assert 0 < sum(s.smUtil for s in samples) <= 100
    # Nothing newer yet: NOT_FOUND, which pynvml raises.
    assert nvml_code(lambda: sim.nvmlDeviceGetProcessUtilization(busy, stamp)) == \
        pynvml.NVML_ERROR_NOT_FOUND
    clock.advance(SAMPLE_PERIOD_S)
    later = sim.nvmlDeviceGetProcessUtilization(busy, stamp)
    (next_stamp,) = {s.timeStamp for s in later}
    assert 0 < next_stamp - stamp <= 2 * SAMPLE_PERIOD_S * 1e6
    assert sim.calls["nvmlDeviceGetProcessUtilization"] == 3
    assert sim.calls["nvmlDeviceGetComputeRunningProcesses"] == 1


def test_an_idle_gpus_processes_have_no_samples(make_sim: SimFactory) -> None:
    sim, clock = make_sim("a100-timesliced", "idle,gpu=1,at=0s")
    clock.advance(50.0)
    handle = sim.nvmlDeviceGetHandleByIndex(1)
    assert len(sim.nvmlDeviceGetComputeRunningProcesses(handle)) == 3  # resident, not busy
    assert nvml_code(lambda: sim.nvmlDeviceGetProcessUtilization(handle, 0)) == \
        pynvml.NVML_ERROR_NOT_FOUND


def test_a_lost_gpu_answers_gpu_is_lost(make_sim: SimFactory) -> None:
    sim, clock = make_sim("a100-timesliced", "lost,gpu=2,at=10s")
    handle = sim.nvmlDeviceGetHandleByIndex(2)
    clock.advance(20.0)
    for call in (lambda: sim.nvmlDeviceGetComputeRunningProcesses(handle),
                 lambda: sim.nvmlDeviceGetMPSComputeRunningProcesses_v3(handle),
                 lambda: sim.nvmlDeviceGetProcessUtilization(handle, 0)):
        assert nvml_code(call) == pynvml.NVML_ERROR_GPU_IS_LOST


async def test_process_attribution_reads_the_simulated_processes(
    make_sim: SimFactory, tmp_path: Path
) -> None:
    """The device layer's process reads on a poll thread over the simulated node, joined to
    containers with real cgroup files for its PIDs (the PIDs do not exist on this machine, so
    the demo itself cannot join them to pods)."""
    sim, clock = make_sim("a100-timesliced")
    clock.advance(100.0)
    entities = enumerate_devices(sim, ALL_DEVICES).inventory.gpus
    gpu = entities[0]
    handle = sim.nvmlDeviceGetHandleByIndex(0)
    procs = sim.nvmlDeviceGetComputeRunningProcesses(handle)
    owners = {}
    for n, proc in enumerate(procs):
        uid = f"00000000-0000-4000-8000-00000000000{n}"
        cid = f"{n}" * 64
        (tmp_path / str(proc.pid)).mkdir()
        (tmp_path / str(proc.pid) / "cgroup").write_text(
            f"0::/kubepods.slice/kubepods-pod{uid.replace('-', '_')}.slice/"
            f"cri-containerd-{cid}.scope\n")
        owners[(uid, cid)] = ("inference", f"embedder-{n}", "server")
    expected_sm = {s.pid: s.smUtil / 100 for s in
                   sim.nvmlDeviceGetProcessUtilization(handle, 0)}
    poll_worker = DaemonExecutor("poll")
    attribution = ProcessUsage(ProcessReader(sim).on_thread(poll_worker),
                               lambda uid, cid: owners.get((uid, cid)), tmp_path)
    try:
        await attribution.refresh([gpu])
    finally:
        poll_worker.shutdown()
    usage = {u.container: u for u in attribution.usage}
    assert attribution.unattributed == 0
    assert set(usage) == set(owners.values())
    device_used = sim.nvmlDeviceGetMemoryInfo(handle, version=NVML_MEMORY_V2).used
    assert sum(u.memory_bytes or 0 for u in usage.values()) <= device_used
    for n, proc in enumerate(procs):
        u = usage[("inference", f"embedder-{n}", "server")]
        assert u.memory_bytes == proc.usedGpuMemory  # within the device's: not scaled
        assert u.sm_ratio == pytest.approx(expected_sm.get(proc.pid, 0.0))

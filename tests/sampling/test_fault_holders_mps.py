"""The holders of a RESTART_APP fault on a GPU shared through MPS: drivers list the MPS clients
only in the MPS process list, so the fault must wait for them, not only for the compute
processes. Everything is real below the test: the sampler, its fault tracker and the device
layer over the unmodified pynvml on the simulated `libnvidia-ml.so.1` (tests/nvmlsim), in a
child interpreter (one process holds one NVML library for life). The simulated clock is
manual and the XID is waited for, so no step depends on timing."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.nvmlsim.harness import run_child, write_scenario

MPS_GPU_UUID = "GPU-5e1a0001-0000-4000-8000-000000000031"

# GPU 0 runs one compute process; GPU 1 is shared through MPS by pids 101 and 202, which only
# the MPS process list names (its compute list is empty). XID 31 (RESTART_APP in NVIDIA's
# catalog) hits GPU 1 at simulated second 1.
MPS_SCENARIO: dict[str, Any] = {
    "clock": "manual",
    "devices": [
        {"processes": [{"pid": 999, "used_mib": 1024}]},
        {"uuid": MPS_GPU_UUID, "processes": [
            {"pid": 101, "used_mib": 4096, "mps": 1},
            {"pid": 202, "used_mib": 2048, "mps": 1}]},
    ],
    "xid_events": [{"gpu": 1, "xid": 31, "at_s": 1.0}],
}

# The sampler with its fault tracker over pynvml. After the first poll (the XID watcher
# registers the GPUs), the XID falls due and is waited for; then one poll per step, each
# step's gpu_exporter_gpu_fault series kept. A step may first replace GPU 1's processes.
SAMPLER_CHILD = """
import asyncio
from exporter.devices.nvml import NvmlBackend
from exporter.devices.process_reads import gpu_process_ids
from exporter.exposition.publisher import Publisher
from exporter.exposition.render import fault_families
from exporter.fields.csv import default_collectors_path, load_collectors
from exporter.sampling.config import SamplerSettings
from exporter.sampling.fault_tracker import FaultTracker
from exporter.sampling.sampler import Sampler
from exporter.sampling.snapshot import HostLabel
from tests.support.wait import wait_until

steps = json.loads({steps!r})
collectors = load_collectors(default_collectors_path())
backend = NvmlBackend(pynvml, collectors.specs, clock=sim.time, wall_clock=sim.time,
                      fault_reads=True)
backend.start()
sampler = Sampler(backend, collectors,
                  SamplerSettings(interval_s=1.0, host=HostLabel("Hostname", "n")),
                  Publisher("nvml"), wall_clock=sim.time,
                  faults=FaultTracker(gpu_process_ids(pynvml), boot_id=lambda: "boot-1"))

def fault_series():
    return [dict(s.labels) for f in fault_families(sampler.snapshot) for s in f.samples]

async def main():
    await sampler.poll_once()
    wait_until(lambda: sim.call_count("nvmlEventSetWait_v2") > 0, 10, interval=0.005,
               what="the XID watcher waiting on its event set")
    sim.set_time(2.0)
    wait_until(backend.ledger.totals, 10, what="the XID 31 event in the ledger")
    out["steps"] = []
    for step in steps:
        if step["processes"] is not None:
            sim.patch_device(1, json.dumps({{"processes": step["processes"]}}))
        sim.advance(1.0)
        await sampler.poll_once()
        out["steps"].append([step["name"], fault_series()])
    await sampler.close()

asyncio.run(main())
"""

XID_31_ON_GPU_1 = {"gpu": "1", "UUID": MPS_GPU_UUID, "source": "xid", "code": "31",
                   "name": "ROBUST_CHANNEL_FIFO_ERROR_MMU_ERR_FLT", "action": "RESTART_APP",
                   "fatal": "false", "cleared_by": "holder-exit"}


def test_a_restart_app_fault_on_an_mps_gpu_is_held_until_its_clients_exit(
        nvmlsim_lib: Path, tmp_path: Path) -> None:
    steps = [
        {"name": "the fault is seen", "processes": None},
        {"name": "both MPS clients still run", "processes": None},
        {"name": "client 101 exited, 202 still runs",
         "processes": [{"pid": 202, "used_mib": 2048, "mps": 1}]},
        {"name": "both MPS clients exited", "processes": []},
    ]
    out = run_child(nvmlsim_lib, SAMPLER_CHILD.format(steps=json.dumps(steps)),
                    scenario_file=write_scenario(tmp_path, MPS_SCENARIO))
    held = [XID_31_ON_GPU_1]
    assert out["steps"] == [
        ["the fault is seen", held],
        ["both MPS clients still run", held],
        ["client 101 exited, 202 still runs", held],
        ["both MPS clients exited", []],
    ]


# gpu_process_ids alone, reading each GPU twice: GPU 0's driver has no MPS list (its compute
# processes count, and it is not asked again); GPU 1 runs an MPS server among the compute
# processes and two clients; GPU 2's MPS list fails (unknown, not "none"); GPU 3's compute list
# fails; GPU 4 runs nothing.
READER_SCENARIO: dict[str, Any] = {
    "clock": "manual",
    "devices": [
        {"processes": [{"pid": 999}],
         "return_codes": {"nvmlDeviceGetMPSComputeRunningProcesses_v3": "NOT_SUPPORTED"}},
        {"processes": [{"pid": 50}, {"pid": 101, "mps": 1}, {"pid": 202, "mps": 1},
                       {"pid": 202}]},
        {"processes": [{"pid": 404}],
         "return_codes": {"nvmlDeviceGetMPSComputeRunningProcesses_v3": "UNKNOWN"}},
        {"processes": [{"pid": 505, "mps": 1}],
         "return_codes": {"nvmlDeviceGetComputeRunningProcesses_v3": "NO_PERMISSION"}},
        {},
    ],
}

READER_CHILD = """
from exporter.devices.process_reads import gpu_process_ids
pynvml.nvmlInit()
uuids = [pynvml.nvmlDeviceGetUUID(pynvml.nvmlDeviceGetHandleByIndex(i)) for i in range(5)]
read = gpu_process_ids(pynvml)
answers = [[read(uuid), read(uuid)] for uuid in uuids]
out["answers"] = [[None if a is None else sorted(a) for a in pair] for pair in answers]
out["mps_lists"] = [sim.call_count("nvmlDeviceGetMPSComputeRunningProcesses_v3", gpu=g)
                    for g in range(5)]
"""


def test_gpu_process_ids_lists_compute_processes_and_mps_clients(
        nvmlsim_lib: Path, tmp_path: Path) -> None:
    out = run_child(nvmlsim_lib, READER_CHILD,
                    scenario_file=write_scenario(tmp_path, READER_SCENARIO))
    assert out["answers"] == [
        [[999], [999]],  # no MPS list: the compute processes alone
        [[50, 101, 202], [50, 101, 202]],  # the server and its clients, 202 once
        [None, None],  # the MPS list failed: unknown
        [None, None],  # the compute list failed: unknown
        [[], []],  # nothing runs: none
    ]
    # pynvml makes two C calls for a list (count, then entries), one when the first fails;
    # GPU 0's driver is not asked again once it said it has no MPS list.
    assert out["mps_lists"] == [1, 4, 2, 0, 2]

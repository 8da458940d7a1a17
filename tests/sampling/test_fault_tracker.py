"""The fault matrix through the sampler over the simulated node: each fault appears at the
first poll after it happens and clears at its clearing event, not before; restored faults
outlive a restart. Simulated time is moved by hand; actions and clearing events are written
out here from NVIDIA's catalog (tests/fixtures/nvsentinel)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from exporter.devices.model import Entity, Inventory, Readings
from exporter.devices.nvml import NvmlBackend
from exporter.devices.process_reads import gpu_process_ids
from exporter.exposition.publisher import Publisher
from exporter.exposition.render import Rendered
from exporter.fields.csv import default_collectors_path, load_collectors
from exporter.fields.faults import ClearedBy, GpuFault
from exporter.sampling.config import SamplerSettings
from exporter.sampling.fault_tracker import FaultTracker
from exporter.sampling.sampler import Sampler
from exporter.sampling.snapshot import HostLabel, Snapshot
from exporter.simulated.node import SimNvml, parse_fault
from tests.support.clock import FakeClock
from tests.support.wait import wait_until


@dataclass(frozen=True)
class Seen:
    """A fault as this test states it: GPU, source, code, action, clearing event."""

    gpu: int
    source: str
    code: str
    action: str
    cleared_by: ClearedBy


def seen(faults: tuple[GpuFault, ...]) -> set[Seen]:
    return {Seen(f.gpu, f.source, f.code, f.action, f.cleared_by) for f in faults}


XID95 = Seen(0, "xid", "95", "RESET_GPU", ClearedBy.GPU_RESET)
XID79 = Seen(1, "xid", "79", "RESTART_BM", ClearedBy.REBOOT)
XID13 = Seen(1, "xid", "13", "RESTART_APP", ClearedBy.HOLDER_EXIT)
DBE = Seen(2, "health", "DCGM_FR_VOLATILE_DBE_DETECTED", "RESET_GPU", ClearedBy.GPU_RESET)
LINK_DOWN = Seen(0, "health", "DCGM_FR_NVLINK_DOWN", "NODE_REBOOT", ClearedBy.REBOOT)


class Node:
    """A simulated node, its backend and a sampler, with simulated time and the boot id in
    the test's hands."""

    def __init__(self, profile: str, *specs: str, boot_id: str = "boot-1") -> None:
        self.clock = FakeClock(0.0)
        self.boot_id = boot_id
        self.lib = SimNvml(profile, faults=[parse_fault(s) for s in specs], clock=self.clock)
        collectors = load_collectors(default_collectors_path())
        self.backend = NvmlBackend(self.lib, collectors.specs, clock=self.clock,
                                   wall_clock=self.clock, fault_reads=True)
        self.backend.start()
        tracker = FaultTracker(gpu_process_ids(self.lib), boot_id=lambda: self.boot_id)
        settings = SamplerSettings(interval_s=1.0, host=HostLabel("Hostname", "n"))
        self.sampler: Sampler[Rendered] = Sampler(self.backend, collectors, settings,
                                                  Publisher("sim"), wall_clock=self.clock,
                                                  faults=tracker)

    def xids_delivered(self, count: int) -> None:
        """Wait until the XID watcher has recorded `count` events (it runs on its own
        thread, in real time, over the simulated clock)."""
        wait_until(lambda: sum(t.total for t in self.backend.ledger.totals()) >= count,
                   what=f"{count} XID events delivered")

    async def poll_at(self, t: float) -> Snapshot:
        self.clock.now = t
        await self.sampler.poll_once()
        assert self.sampler.snapshot is not None
        return self.sampler.snapshot

    async def poll_until_cleared(self, fault: Seen, start: float, limit: float) -> float:
        """Poll each simulated second from `start` until `fault` is no longer held; return
        when it cleared."""
        t = start
        while t <= limit:
            if fault not in seen((await self.poll_at(t)).faults):
                return t
            t += 1.0
        raise AssertionError(f"{fault} still held at {limit}s")

    async def close(self) -> None:
        await self.sampler.close()


async def test_xid_95_is_held_until_the_gpu_is_reset() -> None:
    node = Node("h100-8", "xid,code=95,gpu=0,at=1s", "reset,gpu=0,at=10s")
    assert (await node.poll_at(0.0)).faults == ()  # the XID watcher registers the GPUs
    node.clock.now = 1.0
    node.xids_delivered(1)
    first = await node.poll_at(1.0)
    assert seen(first.faults) == {XID95}
    assert seen(first.fault_events) == {XID95}
    assert first.faults[0].fatal
    assert first.faults[0].boot_id == "boot-1"
    for t in (2.0, 5.0, 9.9):
        snapshot = await node.poll_at(t)
        assert seen(snapshot.faults) == {XID95}, f"cleared before the reset, at {t}s"
        assert snapshot.fault_events == (), "raised twice while held"
    lost = await node.poll_at(10.5)  # the reset has the GPU off the bus
    assert seen(lost.faults) == {XID95}, "a GPU gone is not yet a GPU reset"
    cleared = await node.poll_until_cleared(XID95, 12.5, 30.0)
    assert cleared >= 12.0
    await node.close()


async def test_xid_79_is_held_until_the_node_reboots_not_by_a_reset() -> None:
    node = Node("h100-8", "xid,code=79,gpu=1,at=1s", "reset,gpu=1,at=5s")
    await node.poll_at(0.0)  # the XID watcher registers the GPUs at the first poll
    node.clock.now = 1.0
    node.xids_delivered(1)
    assert seen((await node.poll_at(1.0)).faults) == {XID79}
    await node.poll_at(5.5)
    for t in range(8, 20):  # the GPU comes back from its reset: still held
        assert seen((await node.poll_at(float(t))).faults) == {XID79}, f"cleared at {t}s"
    assert any(g.gpu == 1 for g in node.backend.inventory.gpus), "the GPU came back"
    node.boot_id = "boot-2"
    assert (await node.poll_at(20.0)).faults == ()
    await node.close()


async def test_xid_13_is_held_until_the_processes_holding_the_gpu_exit() -> None:
    node = Node("a100-timesliced", "xid,code=13,gpu=1,at=1s", "exit,gpu=1,at=10s")
    await node.poll_at(0.0)  # the XID watcher registers the GPUs at the first poll
    node.clock.now = 1.0
    node.xids_delivered(1)
    snapshot = await node.poll_at(1.0)
    assert seen(snapshot.faults) == {XID13}
    assert not snapshot.faults[0].fatal
    assert seen((await node.poll_at(9.9)).faults) == {XID13}, "cleared while they run"
    assert (await node.poll_at(10.1)).faults == ()
    await node.close()


async def test_ignored_xids_raise_nothing() -> None:
    node = Node("h100-8", "xid,code=43,gpu=0,at=1s", "xid,code=63,gpu=1,at=1s")
    await node.poll_at(0.0)  # the XID watcher registers the GPUs at the first poll
    node.clock.now = 1.0
    node.xids_delivered(2)
    for t in (1.0, 2.0):
        snapshot = await node.poll_at(t)
        assert snapshot.faults == ()
        assert snapshot.fault_events == ()
    assert {t.xid for t in snapshot.readings.xid_totals} == {43, 63}  # they were seen
    await node.close()


async def test_a_second_xid_while_held_raises_nothing_new() -> None:
    node = Node("h100-8", "xid,code=95,gpu=0,at=1s", "xid,code=95,gpu=0,at=3s")
    await node.poll_at(0.0)
    node.clock.now = 1.0
    node.xids_delivered(1)
    first = await node.poll_at(1.0)
    node.clock.now = 3.0
    node.xids_delivered(2)
    again = await node.poll_at(3.0)
    assert again.faults == first.faults, "the fault keeps its first time"
    assert again.fault_events == ()
    await node.close()


async def test_an_xid_that_is_not_held_is_an_event_per_occurrence() -> None:
    # XID 154: NONFATAL, its free-text action read as UNEXPECTED_ERR_REPORT_ISSUE.
    node = Node("h100-8", "xid,code=154,gpu=0,at=1s", "xid,code=154,gpu=0,at=3s")
    await node.poll_at(0.0)
    node.clock.now = 1.0
    node.xids_delivered(1)
    first = await node.poll_at(1.0)
    assert first.faults == ()
    assert [(f.code, f.action, f.cleared_by) for f in first.fault_events] == \
        [("154", "UNEXPECTED_ERR_REPORT_ISSUE", ClearedBy.NEVER_HELD)]
    assert (await node.poll_at(2.0)).fault_events == ()
    node.clock.now = 3.0
    node.xids_delivered(2)
    assert [f.code for f in (await node.poll_at(3.0)).fault_events] == ["154"]
    await node.close()


async def test_a_double_bit_error_is_held_until_the_gpu_is_reset() -> None:
    node = Node("h100-8", "ecc,gpu=2,at=1s,dbe=1", "reset,gpu=2,at=10s")
    assert (await node.poll_at(0.5)).faults == ()
    first = await node.poll_at(1.0)
    assert seen(first.faults) == {DBE}
    assert seen(first.fault_events) == {DBE}
    assert seen((await node.poll_at(9.9)).faults) == {DBE}, "cleared before the reset"
    await node.poll_at(10.5)
    cleared = await node.poll_until_cleared(DBE, 12.5, 30.0)
    # The reset zeroed the volatile count: the health rule passes, nothing is raised again.
    for t in (cleared + 1.0, cleared + 2.0):
        snapshot = await node.poll_at(t)
        assert snapshot.faults == ()
        assert snapshot.fault_events == ()
    await node.close()


async def test_a_pending_retirement_raises_nothing_as_nvidia_says() -> None:
    node = Node("h100-8", "retire,gpu=0,at=1s,pending=1")
    snapshot = await node.poll_at(1.0)
    assert "DCGM_FR_PENDING_PAGE_RETIREMENTS" in snapshot.readings.health_codes[0]
    assert snapshot.faults == ()  # NVIDIA's action for it is IGNORE
    assert snapshot.fault_events == ()
    await node.close()


async def test_a_link_down_is_held_until_the_node_reboots() -> None:
    node = Node("h100-8", "nvlink-down,gpu=0,link=2,at=1s,for=3s")
    snapshot = await node.poll_at(1.0)
    assert seen(snapshot.faults) == {LINK_DOWN}
    after = await node.poll_at(6.0)
    assert "DCGM_FR_NVLINK_DOWN" not in after.readings.health_codes[0], "the link is back"
    assert seen(after.faults) == {LINK_DOWN}, "a link back up is not a reboot"
    node.boot_id = "boot-2"
    assert (await node.poll_at(7.0)).faults == ()
    await node.close()


async def _held_before_restart() -> tuple[GpuFault, ...]:
    """Faults an earlier process held: XID 95 on GPU 0, XID 79 on GPU 1, XID 13 on GPU 2."""
    node = Node("a100-timesliced", "xid,code=95,gpu=0,at=1s", "xid,code=79,gpu=1,at=1s",
                "xid,code=13,gpu=2,at=1s")
    await node.poll_at(0.0)  # the XID watcher registers the GPUs at the first poll
    node.clock.now = 1.0
    node.xids_delivered(3)
    held = (await node.poll_at(1.0)).faults
    await node.close()
    assert {(f.gpu, f.code) for f in held} == {(0, "95"), (1, "79"), (2, "13")}
    return held


async def test_restored_faults_are_held_across_a_restart() -> None:
    held = await _held_before_restart()
    node = Node("a100-timesliced", "exit,gpu=2,at=5s", "reset,gpu=0,at=10s")
    node.sampler.restore_faults(held)
    first = await node.poll_at(0.5)
    assert first.faults == held, "restored faults are held from the first poll"
    assert first.fault_events == (), "a restored fault is not a new occurrence"
    # XID 13's holders are unknown after the restart: it ends when GPU 2 runs no process.
    assert {f.code for f in (await node.poll_at(4.9)).faults} == {"95", "79", "13"}
    assert {f.code for f in (await node.poll_at(5.1)).faults} == {"95", "79"}
    # XID 95 stays held (no reset seen across the restart) until this process sees one.
    assert {f.code for f in (await node.poll_at(9.9)).faults} == {"95", "79"}
    await node.poll_at(10.5)
    t = 12.5
    while "95" in {f.code for f in (await node.poll_at(t)).faults}:
        t += 1.0
        assert t < 30.0, "XID 95 not cleared by the reset this process saw"
    assert {f.code for f in node.sampler.snapshot.faults} == {"79"}  # type: ignore[union-attr]
    await node.close()


async def test_restored_faults_from_another_boot_clear_at_once() -> None:
    held = await _held_before_restart()
    node = Node("a100-timesliced", boot_id="boot-2")
    node.sampler.restore_faults(held)
    assert (await node.poll_at(0.5)).faults == ()
    await node.close()


# --- the tracker alone, for health codes the simulated node's rules never report ---------


def _gpu0() -> Entity:
    return Entity(gpu=0, uuid="GPU-0a1b", pci_bus_id="00000000:18:00.0", device="nvidia0",
                  model="NVIDIA H200")


def _update(tracker: FaultTracker, codes: dict[int, frozenset[str]], now: float
            ) -> tuple[set[str], set[str]]:
    gpu = _gpu0()
    update = tracker.update(Readings(health_codes=codes, known={gpu.key: gpu}),
                            Inventory(gpus=(gpu,)), True, now)
    return {f.code for f in update.held}, {f.code for f in update.raised}


def test_a_check_thermals_code_is_held_until_the_health_check_passes() -> None:
    tracker = FaultTracker(boot_id=lambda: "b")
    code = "DCGM_FR_TEMP_VIOLATION"  # CHECK_THERMALS in NVIDIA's mapping
    assert _update(tracker, {0: frozenset({code})}, 1.0) == ({code}, {code})
    assert _update(tracker, {0: frozenset({code})}, 2.0) == ({code}, set())
    assert _update(tracker, {}, 3.0) == ({code}, set()), "no health reads is not a pass"
    assert _update(tracker, {0: frozenset()}, 4.0) == (set(), set())


def test_a_report_only_code_is_an_event_each_time_it_starts_failing() -> None:
    tracker = FaultTracker(boot_id=lambda: "b")
    code = "DCGM_FR_PCI_REPLAY_RATE"  # REPORT_ISSUE, no fatality: never held
    assert _update(tracker, {0: frozenset({code})}, 1.0) == (set(), {code})
    assert _update(tracker, {0: frozenset({code})}, 2.0) == (set(), set())
    assert _update(tracker, {0: frozenset()}, 3.0) == (set(), set())
    assert _update(tracker, {0: frozenset({code})}, 4.0) == (set(), {code})


@pytest.mark.parametrize("boot_id", ["", "b"])
def test_an_unreadable_boot_id_clears_nothing(boot_id: str) -> None:
    current = [boot_id]
    tracker = FaultTracker(boot_id=lambda: current[0])
    code = "DCGM_FR_NVLINK_DOWN"
    assert _update(tracker, {0: frozenset({code})}, 1.0)[0] == {code}
    current[0] = ""
    assert _update(tracker, {0: frozenset()}, 2.0)[0] == {code}

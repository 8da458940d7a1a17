"""Init/shutdown reference counting, the call counter, and concurrent use."""

from __future__ import annotations

import threading

import pynvml

from exporter.simulated.node import SimNvml
from tests.simulated.node.conftest import SimFactory, nvml_code
from tests.support.clock import FakeClock


def test_calls_before_init_are_uninitialised() -> None:
    sim = SimNvml("h100-8")
    assert nvml_code(sim.nvmlDeviceGetCount) == pynvml.NVML_ERROR_UNINITIALIZED
    assert nvml_code(sim.nvmlShutdown) == pynvml.NVML_ERROR_UNINITIALIZED
    assert nvml_code(sim.nvmlEventSetCreate) == pynvml.NVML_ERROR_UNINITIALIZED


def test_init_is_reference_counted() -> None:
    sim = SimNvml("l4-1")
    sim.nvmlInit()
    sim.nvmlInit()
    h = sim.nvmlDeviceGetHandleByIndex(0)
    sim.nvmlShutdown()
    assert sim.nvmlDeviceGetName(h) == "NVIDIA L4"
    sim.nvmlShutdown()
    assert nvml_code(lambda: sim.nvmlDeviceGetName(h)) == pynvml.NVML_ERROR_UNINITIALIZED
    sim.nvmlInit()
    assert sim.nvmlDeviceGetName(h) == "NVIDIA L4"
    sim.nvmlShutdown()


def test_calls_are_counted_per_function(make_sim: SimFactory) -> None:
    sim, _ = make_sim("h100-8")
    handles = [sim.nvmlDeviceGetHandleByIndex(i) for i in range(8)]
    for _ in range(3):
        for h in handles:
            sim.nvmlDeviceGetPowerUsage(h)
    nvml_code(lambda: sim.nvmlDeviceGetHandleByIndex(99))
    assert sim.calls["nvmlInit"] == 1
    assert sim.calls["nvmlDeviceGetHandleByIndex"] == 9  # failures count too
    assert sim.calls["nvmlDeviceGetPowerUsage"] == 24


def test_simulated_time_starts_at_construction() -> None:
    clock = FakeClock(start=5000.0)
    sim = SimNvml("l4-1", clock=clock)
    assert sim.now() == 0.0
    clock.advance(2.5)
    assert sim.now() == 2.5


def test_concurrent_polling_while_an_event_wait_blocks(make_sim: SimFactory) -> None:
    sim, clock = make_sim("h200-mig", "xid,code=79,gpu=1,at=50s")
    event_set = sim.nvmlEventSetCreate()
    for i in range(8):
        sim.nvmlDeviceRegisterEvents(sim.nvmlDeviceGetHandleByIndex(i),
                                     pynvml.nvmlEventTypeXidCriticalError, event_set)
    handles = [sim.nvmlDeviceGetHandleByIndex(i) for i in range(8)]
    errors: list[BaseException] = []
    events: list[int] = []

    def poll() -> None:
        try:
            for _ in range(200):
                for h in handles:
                    sim.nvmlDeviceGetTotalEnergyConsumption(h)
                    sim.nvmlDeviceGetMemoryInfo(h, version=pynvml.nvmlMemory_v2)
                clock.advance(0.1)
        except BaseException as exc:
            errors.append(exc)

    def watch() -> None:
        try:
            while not events:
                try:
                    events.append(int(sim.nvmlEventSetWait_v2(event_set, 100).eventData))
                except pynvml.NVMLError_Timeout:
                    if not any(t.is_alive() for t in pollers):
                        return
        except BaseException as exc:
            errors.append(exc)

    pollers = [threading.Thread(target=poll) for _ in range(3)]
    watcher = threading.Thread(target=watch)
    for t in (*pollers, watcher):
        t.start()
    for t in (*pollers, watcher):
        t.join(timeout=30.0)
        assert not t.is_alive()
    assert not errors
    assert events == [79]
    assert sim.calls["nvmlDeviceGetTotalEnergyConsumption"] == 3 * 200 * 8

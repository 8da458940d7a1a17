"""XID events: registration, delivery once at the fault's time, timeouts, blocking waits."""

from __future__ import annotations

import threading
import time
from typing import Any

import pynvml
import pytest

from exporter.simulated.node import SimNvml
from tests.simulated.node.conftest import SimFactory, nvml_code
from tests.support.wait import wait_until

XID = pynvml.nvmlEventTypeXidCriticalError
NOT_AVAILABLE = 0xFFFFFFFF


def _until_blocked(sim: SimNvml, calls_before: int) -> None:
    """Returns once another thread is inside nvmlEventSetWait_v2 (it counts the call under
    the simulation's lock and keeps that lock until it blocks)."""
    wait_until(lambda: sim.calls["nvmlEventSetWait_v2"] > calls_before, 5.0, interval=0.001,
               what="the waiter calling nvmlEventSetWait_v2")


def _register(sim: SimNvml, *indices: int) -> Any:
    event_set = sim.nvmlEventSetCreate()
    for index in indices:
        sim.nvmlDeviceRegisterEvents(sim.nvmlDeviceGetHandleByIndex(index), XID, event_set)
    return event_set


def test_xid_arrives_at_its_time_once(make_sim: SimFactory) -> None:
    sim, clock = make_sim("h100-8", "xid,code=79,gpu=2,at=10s")
    event_set = _register(sim, *range(8))
    clock.advance(9.9)
    assert nvml_code(lambda: sim.nvmlEventSetWait_v2(event_set, 0)) == pynvml.NVML_ERROR_TIMEOUT
    clock.advance(0.2)
    event = sim.nvmlEventSetWait_v2(event_set, 0)
    assert isinstance(event, pynvml.c_nvmlEventData_t)
    assert event.eventType == XID
    assert event.eventData == 79
    assert (event.gpuInstanceId, event.computeInstanceId) == (NOT_AVAILABLE, NOT_AVAILABLE)
    expected = sim.nvmlDeviceGetUUID(sim.nvmlDeviceGetHandleByIndex(2))
    assert sim.nvmlDeviceGetUUID(event.device) == expected
    assert nvml_code(lambda: sim.nvmlEventSetWait_v2(event_set, 0)) == pynvml.NVML_ERROR_TIMEOUT
    sim.nvmlEventSetFree(event_set)


def test_xid_names_its_gpu_instance(make_sim: SimFactory) -> None:
    sim, clock = make_sim("h200-mig", "xid,code=43,gpu=0,at=1s,gi=9")
    event_set = _register(sim, 0)
    clock.advance(2.0)
    event = sim.nvmlEventSetWait_v2(event_set, 0)
    assert (event.eventData, event.gpuInstanceId, event.computeInstanceId) == (
        43, 9, NOT_AVAILABLE)


def test_events_in_time_order_and_per_registered_device(make_sim: SimFactory) -> None:
    sim, clock = make_sim("h100-8", "xid,code=31,gpu=1,at=5s", "xid,code=13,gpu=0,at=3s",
                          "xid,code=48,gpu=5,at=4s")
    event_set = _register(sim, 0, 1)  # GPU 5 is not registered
    clock.advance(6.0)
    codes = [sim.nvmlEventSetWait_v2(event_set, 0).eventData for _ in range(2)]
    assert codes == [13, 31]
    assert nvml_code(lambda: sim.nvmlEventSetWait_v2(event_set, 0)) == pynvml.NVML_ERROR_TIMEOUT


def test_each_set_gets_its_own_copy(make_sim: SimFactory) -> None:
    sim, clock = make_sim("l4-1", "xid,code=79,gpu=0,at=1s")
    first, second = _register(sim, 0), _register(sim, 0)
    clock.advance(1.0)
    assert sim.nvmlEventSetWait_v2(first, 0).eventData == 79
    assert sim.nvmlEventSetWait_v2(second, 0).eventData == 79


def test_events_before_registration_are_lost(make_sim: SimFactory) -> None:
    sim, clock = make_sim("l4-1", "xid,code=79,gpu=0,at=1s", "xid,code=94,gpu=0,at=3s")
    clock.advance(2.0)
    event_set = _register(sim, 0)
    clock.advance(2.0)
    assert sim.nvmlEventSetWait_v2(event_set, 0).eventData == 94
    assert nvml_code(lambda: sim.nvmlEventSetWait_v2(event_set, 0)) == pynvml.NVML_ERROR_TIMEOUT


def test_wait_times_out_after_the_timeout(make_sim: SimFactory) -> None:
    sim, _ = make_sim("l4-1", "xid,code=79,gpu=0,at=1h")
    event_set = _register(sim, 0)
    started = time.monotonic()
    assert nvml_code(lambda: sim.nvmlEventSetWait_v2(event_set, 150)) == \
        pynvml.NVML_ERROR_TIMEOUT
    assert time.monotonic() - started >= 0.14  # it blocked instead of returning at once


def test_blocked_wait_wakes_when_the_xid_comes_due(make_sim: SimFactory) -> None:
    sim, clock = make_sim("h100-8", "xid,code=79,gpu=3,at=30s")
    event_set = _register(sim, 3)
    got: list[Any] = []
    errors: list[BaseException] = []

    def wait() -> None:
        try:
            got.append(sim.nvmlEventSetWait_v2(event_set, 10_000))
        except BaseException as exc:
            errors.append(exc)

    waiter = threading.Thread(target=wait)
    waiter.start()
    _until_blocked(sim, 0)
    # Other calls keep working while the waiter blocks.
    for _ in range(5):
        assert sim.nvmlDeviceGetPowerUsage(sim.nvmlDeviceGetHandleByIndex(0)) > 0
    clock.advance(31.0)
    waiter.join(timeout=5.0)
    assert not waiter.is_alive()
    assert not errors
    assert [e.eventData for e in got] == [79]


def test_registration_rules(make_sim: SimFactory) -> None:
    sim, _ = make_sim("h200-mig")
    event_set = sim.nvmlEventSetCreate()
    parent = sim.nvmlDeviceGetHandleByIndex(0)
    mig = sim.nvmlDeviceGetMigDeviceHandleByIndex(parent, 0)
    assert nvml_code(lambda: sim.nvmlDeviceRegisterEvents(mig, XID, event_set)) == \
        pynvml.NVML_ERROR_NOT_SUPPORTED
    assert nvml_code(lambda: sim.nvmlDeviceRegisterEvents(
        parent, pynvml.nvmlEventTypeClock, event_set)) == pynvml.NVML_ERROR_NOT_SUPPORTED
    sim.nvmlDeviceRegisterEvents(parent, XID, event_set)
    sim.nvmlEventSetFree(event_set)
    assert nvml_code(lambda: sim.nvmlEventSetWait_v2(event_set, 0)) == \
        pynvml.NVML_ERROR_INVALID_ARGUMENT


@pytest.mark.parametrize("stop", ["free", "shutdown"])
def test_blocked_wait_ends_when_the_set_or_library_goes(make_sim: SimFactory, stop: str) -> None:
    sim, _ = make_sim("l4-1")
    event_set = _register(sim, 0)
    codes: list[int] = []

    def wait() -> None:
        try:
            sim.nvmlEventSetWait_v2(event_set, 10_000)
        except pynvml.NVMLError as exc:
            codes.append(int(exc.value))

    waiter = threading.Thread(target=wait)
    waiter.start()
    _until_blocked(sim, 0)
    if stop == "free":
        sim.nvmlEventSetFree(event_set)
    else:
        sim.nvmlShutdown()
    waiter.join(timeout=5.0)
    assert not waiter.is_alive()
    expected = (pynvml.NVML_ERROR_INVALID_ARGUMENT if stop == "free"
                else pynvml.NVML_ERROR_UNINITIALIZED)
    assert codes == [expected]

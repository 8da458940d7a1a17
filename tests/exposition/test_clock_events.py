"""DCGM_EXP_CLOCK_EVENTS_COUNT: the polls within the window that found each clock event
reason active, per GPU - counted from the bitmask each poll reads, and exposed with
`clock_event` and `window_size_in_ms` like dcgm-exporter."""

from __future__ import annotations

from exporter.devices.clock_events import CLOCK_EVENTS_COUNT_FIELD, ClockEventCounter
from exporter.devices.config import DeviceSettings
from exporter.devices.model import ClockEventCount
from exporter.devices.nvml import NvmlBackend
from exporter.exposition.render import device_families, render
from exporter.fields.catalog import BY_NAME
from exporter.fields.csv import parse_collectors
from exporter.sampling.snapshot import HostLabel, Snapshot
from exporter.simulated.node import SimNvml, parse_fault


class Clock:
    def __init__(self) -> None:
        self.t = 1_700_000_000.0

    def __call__(self) -> float:
        return self.t


def test_each_reason_bit_of_each_poll_counts_once() -> None:
    clock = Clock()
    counter = ClockEventCounter(60.0, clock)
    values = {(0, -1): {CLOCK_EVENTS_COUNT_FIELD: float(0x1 | 0x20), "OTHER": 1.0},
              (1, -1): {"OTHER": 2.0}}
    counter.record(values)
    # The pseudo-field's reading is taken out; the other values stay.
    assert values == {(0, -1): {"OTHER": 1.0}, (1, -1): {"OTHER": 2.0}}
    clock.t += 15
    counter.record({(0, -1): {CLOCK_EVENTS_COUNT_FIELD: float(0x20 | 0x200)}})
    assert counter.window() == (ClockEventCount((0, -1), "gpu_idle", 1),
                                ClockEventCount((0, -1), "sw_thermal", 2))


def test_polls_leave_the_window_as_it_slides() -> None:
    clock = Clock()
    counter = ClockEventCounter(30.0, clock)
    for _ in range(4):  # at 0, 15, 30, 45 s
        counter.record({(2, -1): {CLOCK_EVENTS_COUNT_FIELD: 4.0}})
        clock.t += 15
    clock.t -= 15  # now: the last poll, 45 s; the window reaches back to 15 s
    assert counter.window() == (ClockEventCount((2, -1), "power_cap", 3),)
    clock.t += 100
    assert counter.window() == ()


def test_a_reason_free_gpu_has_no_counts() -> None:
    counter = ClockEventCounter(30.0, Clock())
    counter.record({(0, -1): {CLOCK_EVENTS_COUNT_FIELD: 0.0}})
    assert counter.window() == ()


def test_a_gpu_without_a_reading_in_the_window_counts_zero_without_a_reason() -> None:
    """As dcgm-exporter: a GPU it has no sample of in the window shows one series of 0 with
    no `clock_event`; a GPU whose samples show no reason shows none."""
    clock = Clock()
    counter = ClockEventCounter(30.0, clock)
    gpus = [(0, -1), (1, -1)]
    counter.record({(0, -1): {CLOCK_EVENTS_COUNT_FIELD: 0.0}})  # GPU 1: no bitmask read
    assert counter.window(gpus) == (ClockEventCount((1, -1), None, 0),)
    clock.t += 100  # GPU 0's poll has left the window too
    assert counter.window(gpus) == (ClockEventCount((0, -1), None, 0),
                                    ClockEventCount((1, -1), None, 0))
    assert counter.window() == ()  # GPUs not named get nothing


def test_the_backend_counts_a_thermal_slowdown_of_the_simulated_node() -> None:
    clock = Clock()
    lib = SimNvml("h100-8", seed=3, faults=[parse_fault("thermal,gpu=1,at=30s,for=60s")],
                  clock=clock)
    collectors = parse_collectors(
        "DCGM_FI_DEV_CLOCKS_EVENT_REASONS, gauge, reasons\n"
        "DCGM_EXP_CLOCK_EVENTS_COUNT, gauge, reported clock events\n", "t.csv")
    backend = NvmlBackend(lib, collectors.specs,
                          DeviceSettings(clock_events_count_window_s=45.0), clock=clock,
                          wall_clock=clock)
    backend.start()
    try:
        polls = []
        for _ in range(8):  # at 0, 15, ..., 105 s; the fault holds in [30 s, 90 s)
            polls.append(backend.poll())
            clock.t += 15
    finally:
        backend.close()
    assert BY_NAME[CLOCK_EVENTS_COUNT_FIELD].reader is BY_NAME[
        "DCGM_FI_DEV_CLOCKS_EVENT_REASONS"].reader
    for readings in polls:
        assert readings.values
        assert all(CLOCK_EVENTS_COUNT_FIELD not in v for v in readings.values.values())
        assert readings.clock_events_window_s == 45.0

    def thermal(readings_index: int) -> int:
        return sum(c.count for c in polls[readings_index].clock_events
                   if c.entity_key == (1, -1) and c.reason == "hw_thermal")

    # The window reaches back 45 s, both ends included (as the XID window): at 75 s it
    # holds the polls at 30, 45, 60 and 75 s; the poll at 90 s finds the fault over.
    assert [thermal(i) for i in range(8)] == [0, 0, 1, 2, 3, 4, 3, 2]
    assert not [c for c in polls[4].clock_events
                if c.reason == "hw_thermal" and c.entity_key != (1, -1)]
    # Every GPU answers the bitmask each poll: no GPU has the 0 series of one without samples.
    assert any(readings.clock_events for readings in polls)
    assert all(c.reason is not None for readings in polls for c in readings.clock_events)
    snapshot = Snapshot(backend.inventory, polls[4], collectors, HostLabel(None, ""))
    text = render(device_families(snapshot)).text.decode()
    assert 'device="nvidia1",modelName="NVIDIA H100 80GB HBM3",clock_event="hw_thermal",' \
           'window_size_in_ms="45000"} 3\n' in text

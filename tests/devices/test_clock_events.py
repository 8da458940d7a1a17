"""DCGM_EXP_CLOCK_EVENTS_COUNT: polls within the window that saw each clock-event reason."""

from __future__ import annotations

from exporter.devices.clock_events import ClockEventLedger
from exporter.devices.model import ClockEventCount
from exporter.devices.nvml import NvmlBackend
from exporter.devices.sim import SimNvml, parse_fault
from exporter.exposition.render import device_families, render
from exporter.fields.csv import parse_collectors
from exporter.sampling.snapshot import HostLabel, Snapshot
from tests.support.clock import FakeClock

CSV = "DCGM_EXP_CLOCK_EVENTS_COUNT, gauge, clock events in the window.\n"


def test_the_window_counts_polls_per_reason_bit_and_forgets_old_ones() -> None:
    ledger = ClockEventLedger(window_s=60.0)
    gpu = (0, -1)
    ledger.record(gpu, 0.0, 0x1)  # idle
    ledger.record(gpu, 30.0, 0x40 | 0x8)  # HW thermal slowdown (and its HW slowdown bit)
    ledger.record(gpu, 45.0, 0x40 | 0x8)
    assert ledger.counts(50.0, {gpu}) == (
        ClockEventCount(gpu, "gpu_idle", 1), ClockEventCount(gpu, "hw_slowdown", 2),
        ClockEventCount(gpu, "hw_thermal", 2))
    assert ledger.counts(70.0, {gpu}) == (
        ClockEventCount(gpu, "hw_slowdown", 2), ClockEventCount(gpu, "hw_thermal", 2))
    # Nothing within the window: one series of 0 without a reason, as dcgm-exporter shows.
    assert ledger.counts(200.0, {gpu}) == (ClockEventCount(gpu, None, 0),)
    assert ledger.counts(200.0, set()) == ()


def test_a_thermal_fault_shows_in_the_counts_of_its_gpu_only() -> None:
    clock = FakeClock(start=1_700_000_000.0)
    collectors = parse_collectors(CSV, "c.csv")
    sim = SimNvml("h100-8", seed=7, clock=clock,
                  faults=[parse_fault("thermal,gpu=1,at=0s,for=20s")])
    backend = NvmlBackend(sim, collectors.specs, clock=clock, wall_clock=clock,
                          clock_events_window_s=60.0)
    backend.start()
    try:
        for _ in range(4):  # t = 0, 10, 20, 30: the first two within the thermal fault
            readings = backend.poll()
            clock.advance(10.0)
        text = render(device_families(Snapshot(
            backend.inventory, readings, collectors, HostLabel("Hostname", "n")))).text.decode()
    finally:
        backend.close()
    lines = [line for line in text.splitlines() if line.startswith("DCGM_EXP_CLOCK_EVENTS_COUNT{")]
    thermal = [line for line in lines if 'clock_event="hw_thermal"' in line]
    assert len(thermal) == 1 and 'gpu="1"' in thermal[0]
    assert thermal[0].endswith(',clock_event="hw_thermal",window_size_in_ms="60000"} 2')
    assert {line.split('gpu="')[1].split('"')[0] for line in lines} == {str(g) for g in range(8)}
    # The bitmask is counted, never exported as a plain value.
    assert all("clock_event=" in line or line.endswith(" 0") for line in lines)

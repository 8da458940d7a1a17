"""dcgm-exporter 4.8.3's totals (DCGM_EXP_XID_ERRORS_TOTAL, DCGM_EXP_CLOCK_EVENTS_TOTAL) and the
0 series of DCGM_EXP_XID_ERRORS_COUNT, over the simulated node and the real renderer."""

from __future__ import annotations

from prometheus_client.openmetrics.parser import text_string_to_metric_families

from exporter.devices.clock_events import (
    CLOCK_EVENTS_COUNT_FIELD,
    CLOCK_EVENTS_TOTAL_FIELD,
    ClockEventCounter,
)
from exporter.devices.config import DeviceSettings
from exporter.devices.model import ClockEventTotal
from exporter.devices.nvml import NvmlBackend
from exporter.exposition.render import device_families, render
from exporter.fields.csv import parse_collectors
from exporter.sampling.snapshot import HostLabel, Snapshot
from exporter.simulated.node import SimNvml, parse_fault
from tests.support.clock import FakeClock
from tests.support.wait import wait_until

TOTALS_CSV = (
    "DCGM_EXP_CLOCK_EVENTS_TOTAL, counter, Total clock events observed since exporter start "
    "(edge-counted).\n"
    "DCGM_EXP_XID_ERRORS_COUNT,   gauge,   XID errors observed during the configured time "
    "window.\n"
    "DCGM_EXP_XID_ERRORS_TOTAL,   counter, Total XID errors observed since exporter start.\n"
)


def test_a_reason_counts_each_time_it_turns_on_after_the_first_sample() -> None:
    counter = ClockEventCounter(60.0, FakeClock())
    key = (0, -1)
    # 0x20 sw_thermal is on at the first sample: the baseline, not counted.
    for bits in (0x20, 0x20 | 0x4, 0x4, 0x20 | 0x4, 0x0, 0x1 | 0x20, 0x1 | 0x20):
        values = {key: {CLOCK_EVENTS_TOTAL_FIELD: float(bits), "OTHER": 1.0}}
        counter.record(values)
        assert values == {key: {"OTHER": 1.0}}  # taken out of the values
    assert counter.totals() == (ClockEventTotal(key, "gpu_idle", 1),
                                ClockEventTotal(key, "power_cap", 1),
                                ClockEventTotal(key, "sw_thermal", 2))


def test_the_total_and_the_window_read_the_same_bitmask_apart() -> None:
    counter = ClockEventCounter(60.0, FakeClock())
    counter.record({(1, -1): {CLOCK_EVENTS_COUNT_FIELD: 4.0}})
    counter.record({(1, -1): {CLOCK_EVENTS_COUNT_FIELD: 4.0}})
    assert counter.totals() == ()  # the total was not asked for: no baseline, no edges
    assert [c.count for c in counter.window()] == [2]


class Node:
    def __init__(self, profile: str, *faults: str) -> None:
        self.clock = FakeClock(start=1_700_000_000.0)
        self.lib = SimNvml(profile, seed=3, faults=[parse_fault(f) for f in faults],
                           clock=self.clock)
        self.collectors = parse_collectors(TOTALS_CSV, "totals.csv")
        self.backend = NvmlBackend(self.lib, self.collectors.specs,
                                   DeviceSettings(xid_count_window_s=60.0), clock=self.clock,
                                   wall_clock=self.clock)
        self.backend.start()

    def text(self) -> str:
        readings = self.backend.poll()
        snapshot = Snapshot(self.backend.inventory, readings, self.collectors,
                            HostLabel(None, ""))
        return render(device_families(snapshot)).text.decode()


def lines(text: str, name: str, gpu: int) -> list[str]:
    return [line for line in text.splitlines()
            if line.startswith(name + "{") and f'gpu="{gpu}"' in line]


def test_clock_event_totals_of_a_thermal_slowdown() -> None:
    node = Node("h100-8", "thermal,gpu=1,at=20s,for=30s", "thermal,gpu=1,at=80s,for=10s")
    try:
        first = node.text()  # at 0 s: the baseline
        node.clock.advance(30)
        during = node.text()
        node.clock.advance(30)
        after = node.text()
        node.clock.advance(25)  # at 85 s, in the second slowdown
        again = node.text()
    finally:
        node.backend.close()
    assert "DCGM_EXP_CLOCK_EVENTS_TOTAL{" not in first  # no series before an edge
    assert "# TYPE DCGM_EXP_CLOCK_EVENTS_TOTAL counter" in during
    (thermal,) = [x for x in lines(during, "DCGM_EXP_CLOCK_EVENTS_TOTAL", 1)
                  if 'clock_event="hw_thermal"' in x]
    assert thermal.endswith(',clock_event="hw_thermal"} 1')
    assert "window_size_in_ms" not in thermal
    assert next(x for x in lines(after, "DCGM_EXP_CLOCK_EVENTS_TOTAL", 1)
            if 'clock_event="hw_thermal"' in x).endswith("} 1")  # held, then ended: 1
    assert next(x for x in lines(again, "DCGM_EXP_CLOCK_EVENTS_TOTAL", 1)
            if 'clock_event="hw_thermal"' in x).endswith("} 2")
    assert not lines(again, "DCGM_EXP_CLOCK_EVENTS_TOTAL", 0)


def test_xid_totals_count_from_start_by_code_and_the_count_has_its_0_series() -> None:
    node = Node("h100-8", "xid,code=43,gpu=2,at=2s", "xid,code=43,gpu=2,at=3s",
                "xid,code=31,gpu=2,at=4s")
    try:
        before = node.text()
        wait_until(lambda: node.lib.calls["nvmlEventSetWait_v2"] > 0, what="XID watcher")
        node.clock.advance(5)
        wait_until(lambda: len(node.backend.ledger.window()) == 2, timeout=10,
                   what="three XIDs recorded")
        seen = node.text()
        node.clock.advance(120)  # the window (60 s) is past them; the totals are not
        later = node.text()
    finally:
        node.backend.close()
    assert "DCGM_EXP_XID_ERRORS_TOTAL{" not in before
    totals = lines(seen, "DCGM_EXP_XID_ERRORS_TOTAL", 2)
    assert [x.rsplit(",", 1)[1] for x in totals] == ['xid="31"} 1', 'xid="43"} 2']
    assert "# TYPE DCGM_EXP_XID_ERRORS_TOTAL counter" in seen
    assert lines(later, "DCGM_EXP_XID_ERRORS_TOTAL", 2) == totals
    assert not lines(later, "DCGM_EXP_XID_ERRORS_TOTAL", 1)
    # The windowed count: per code while in the window, one 0 without `xid` otherwise.
    assert [x.rsplit(",", 2)[1:] for x in lines(seen, "DCGM_EXP_XID_ERRORS_COUNT", 2)] == [
        ['xid="31"', 'window_size_in_ms="60000"} 1'], ['xid="43"', 'window_size_in_ms="60000"} 2']]
    (zero,) = lines(later, "DCGM_EXP_XID_ERRORS_COUNT", 2)
    assert zero.endswith('modelName="NVIDIA H100 80GB HBM3",window_size_in_ms="60000"} 0')
    assert all(len(lines(before, "DCGM_EXP_XID_ERRORS_COUNT", g)) == 1 for g in range(8))


def test_the_0_series_of_a_mig_gpu_are_its_instances() -> None:
    node = Node("h200-mig")
    try:
        text = node.text()
    finally:
        node.backend.close()
    gpu0 = lines(text, "DCGM_EXP_XID_ERRORS_COUNT", 0)  # MIG enabled, three GPU instances
    assert len(gpu0) == len([i for i in node.backend.inventory.instances if i.gpu == 0]) > 1
    assert all("GPU_I_ID=" in x and "xid=" not in x and x.endswith("} 0") for x in gpu0)
    gpu2 = lines(text, "DCGM_EXP_XID_ERRORS_COUNT", 2)
    assert len(gpu2) == 1
    assert "GPU_I_ID=" not in gpu2[0]


def test_openmetrics_keeps_the_total_names_typed_unknown() -> None:
    node = Node("h100-8", "thermal,gpu=1,at=20s")
    try:
        node.text()
        node.clock.advance(30)
        readings = node.backend.poll()
    finally:
        node.backend.close()
    snapshot = Snapshot(node.backend.inventory, readings, node.collectors, HostLabel(None, ""))
    om = render(device_families(snapshot)).openmetrics
    assert om is not None
    text = om.decode()
    # OpenMetrics wants a lowercase `_total` sample suffix on a counter; the name stays.
    assert "# TYPE DCGM_EXP_CLOCK_EVENTS_TOTAL unknown\n" in text
    assert "\nDCGM_EXP_CLOCK_EVENTS_TOTAL{" in text
    families = {f.name: f.type for f in text_string_to_metric_families(text)}  # type: ignore[no-untyped-call]
    assert families["DCGM_EXP_CLOCK_EVENTS_TOTAL"] == "unknown"


def test_the_totals_carry_on_across_a_reload() -> None:
    node = Node("h100-8", "xid,code=43,gpu=2,at=2s")
    try:
        node.text()
        wait_until(lambda: node.lib.calls["nvmlEventSetWait_v2"] > 0, what="XID watcher")
        node.clock.advance(5)
        wait_until(node.backend.ledger.totals, timeout=10, what="XID recorded")
        node.backend.set_fields(node.collectors.specs)  # what a reload of the file does
        node.clock.advance(5)
        text = node.text()
    finally:
        node.backend.close()
    (total,) = lines(text, "DCGM_EXP_XID_ERRORS_TOTAL", 2)
    assert total.endswith('xid="43"} 1')

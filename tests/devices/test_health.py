"""DCGM_EXP_GPU_HEALTH_STATUS: each of DCGM's health rules, fired by a scripted fault of the
simulated node and read back through the real backend and renderer (the rules' finer edges,
where the simulated counters move together, straight through `evaluate`)."""

from __future__ import annotations

import pytest

from exporter.devices.nvml import NvmlBackend
from exporter.exposition.render import device_families, render
from exporter.fields.csv import parse_collectors
from exporter.fields.health_rules import (
    FAIL,
    PASS,
    PREFIX,
    RULES,
    WARN,
    WATCHES,
    Facts,
    HealthIncident,
    evaluate,
    pcie_replay_limit,
)
from exporter.sampling.snapshot import HostLabel, Snapshot
from exporter.simulated.node import SimNvml, parse_fault
from tests.support.clock import FakeClock
from tests.support.wait import wait_until

HEALTH_CSV = "DCGM_EXP_GPU_HEALTH_STATUS, gauge, Current DCGM-reported GPU health status.\n"


class Node:
    """A simulated node polled every 15 simulated seconds with only the health field on."""

    def __init__(self, profile: str, *faults: str) -> None:
        self.clock = FakeClock(start=1_700_000_000.0)
        self.lib = SimNvml(profile, seed=3, faults=[parse_fault(f) for f in faults],
                           clock=self.clock)
        self.collectors = parse_collectors(HEALTH_CSV, "health.csv")
        self.backend = NvmlBackend(self.lib, self.collectors.specs, clock=self.clock,
                                   wall_clock=self.clock)
        self.backend.start()

    def polls(self, count: int) -> dict[int, tuple[HealthIncident, ...]]:
        health = {}
        for _ in range(count):
            health = self.backend.poll().health
            self.clock.advance(15)
        return health

    def close(self) -> None:
        self.backend.close()


def watch(health: dict[int, tuple[HealthIncident, ...]], gpu: int, name: str
          ) -> tuple[int, str, str, str]:
    (found,) = [i for i in health[gpu] if i.watch == name]
    return found.result, found.code, found.severity, found.category


def others_pass(health: dict[int, tuple[HealthIncident, ...]], gpu: int, name: str) -> bool:
    return all(i.result == PASS for i in health[gpu] if i.watch != name)


@pytest.mark.parametrize(("fault", "gpu", "name", "expected"), [
    ("ecc,gpu=2,at=20s,dbe=1", 2, "MEM",
     (FAIL, "DCGM_FR_VOLATILE_DBE_DETECTED", "ISOLATE", "HARDWARE_MEMORY")),
    ("retire,gpu=2,at=20s,pending=1", 2, "MEM",
     (WARN, "DCGM_FR_PENDING_PAGE_RETIREMENTS", "RESET", "HARDWARE_MEMORY")),
    ("retire,gpu=2,at=20s,pages=63", 2, "MEM",
     (FAIL, "DCGM_FR_RETIRED_PAGES_LIMIT", "ISOLATE", "HARDWARE_MEMORY")),
    ("remap,gpu=2,at=20s,failure=1", 2, "MEM",
     (FAIL, "DCGM_FR_ROW_REMAP_FAILURE", "RESET", "HARDWARE_MEMORY")),
    ("pcie-replay,gpu=2,at=20s,count=500", 2, "PCIE",
     (WARN, "DCGM_FR_PCI_REPLAY_RATE", "ISOLATE", "HARDWARE_PCIE")),
    ("inforom,gpu=2,at=20s", 2, "INFOROM",
     (WARN, "DCGM_FR_CORRUPT_INFOROM", "TRIAGE", "HARDWARE_OTHER")),
    ("nvlink-down,gpu=2,link=5,at=20s", 2, "NVLINK",
     (FAIL, "DCGM_FR_NVLINK_DOWN", "TRIAGE", "HARDWARE_NVLINK")),
    ("recovery,gpu=2,at=20s,action=2", 2, "DRIVER",
     (FAIL, "DCGM_FR_GPU_RECOVERY_REBOOT", "ISOLATE", "HARDWARE_OTHER")),
    ("recovery,gpu=2,at=20s,action=3", 2, "DRIVER",
     (WARN, "DCGM_FR_GPU_RECOVERY_DRAIN_P2P", "RESET", "HARDWARE_OTHER")),
])
def test_a_fault_fails_or_warns_its_watch_alone(fault: str, gpu: int, name: str,
                                                expected: tuple[int, str, str, str]) -> None:
    node = Node("h100-8", fault)
    try:
        before = node.polls(1)  # at 0 s: the fault is still to come
        assert watch(before, gpu, name) == (PASS, "DCGM_FR_OK", "NONE", "NONE")
        after = node.polls(3)  # ... at 30 s it holds
    finally:
        node.close()
    assert watch(after, gpu, name) == expected
    assert others_pass(after, gpu, name)
    assert all(i.result == PASS for other in after if other != gpu for i in after[other])


def test_a_thermal_slowdown_warns_thermal_and_clears_a_minute_after_it_ends() -> None:
    node = Node("h100-8", "thermal,gpu=1,at=20s,for=40s")
    try:
        during = node.polls(4)  # the last at 45 s
        assert watch(during, 1, "THERMAL") == (WARN, "DCGM_FR_CLOCK_THROTTLE_THERMAL",
                                               "MONITOR", "HARDWARE_THERMAL")
        # The violation counter stops at 60 s; from 120 s on the minute holds no growth.
        assert watch(node.polls(4), 1, "THERMAL")[0] == WARN  # the last at 105 s
        assert watch(node.polls(1), 1, "THERMAL")[:2] == (PASS, "DCGM_FR_OK")  # at 120 s
    finally:
        node.close()


def test_a_power_brake_warns_power() -> None:
    node = Node("h100-8", "power-brake,gpu=0,at=20s")
    try:
        health = node.polls(3)
    finally:
        node.close()
    assert watch(health, 0, "POWER") == (WARN, "DCGM_FR_CLOCK_THROTTLE_POWER", "MONITOR",
                                         "HARDWARE_POWER")


def test_nvlink_errors_fail_nvlink() -> None:
    node = Node("h100-8", "nvlink,gpu=3,link=2,at=20s,rate=20")
    try:
        health = node.polls(3)
    finally:
        node.close()
    # The simulated link counts replays and recoveries along with CRC errors: critical.
    assert watch(health, 3, "NVLINK") == (FAIL, "DCGM_FR_NVLINK_ERROR_CRITICAL", "ISOLATE",
                                          "HARDWARE_NVLINK")
    assert others_pass(health, 3, "NVLINK")


@pytest.mark.parametrize(("code", "name", "expected"), [
    (79, "ALL", (FAIL, "DCGM_FR_FALLEN_OFF_BUS", "ISOLATE", "HARDWARE_OTHER")),
    (95, "ALL", (FAIL, "DCGM_FR_UNCONTAINED_ERROR", "ISOLATE", "SOFTWARE_XID")),
    (94, "ALL", (WARN, "DCGM_FR_CONTAINED_ERROR", "MONITOR", "SOFTWARE_XID")),
    (48, "ALL", (FAIL, "DCGM_FR_XID_ERROR", "TRIAGE", "SOFTWARE_XID")),
    (63, "MEM", (WARN, "DCGM_FR_PENDING_PAGE_RETIREMENTS", "RESET", "HARDWARE_MEMORY")),
    (43, "MEM", (WARN, "DCGM_FR_XID_ERROR", "TRIAGE", "SOFTWARE_XID")),
    (38, "PCIE", (WARN, "DCGM_FR_XID_ERROR", "TRIAGE", "SOFTWARE_XID")),
    (74, "ALL", (FAIL, "DCGM_FR_XID_ERROR", "TRIAGE", "SOFTWARE_XID")),
    (13, None, None),  # a graphics engine exception: no watch of DCGM's looks at it
])
def test_an_xid_counts_under_its_dcgm_watch_from_then_on(
        code: int, name: str | None, expected: tuple[int, str, str, str] | None) -> None:
    node = Node("h100-8", f"xid,code={code},gpu=4,at=2s")
    try:
        node.polls(1)
        wait_until(lambda: node.lib.calls["nvmlEventSetWait_v2"] > 0, what="XID watcher")
        wait_until(node.backend.ledger.totals, timeout=10, what=f"XID {code} recorded")
        health = node.polls(1)
        later = node.polls(8)  # two minutes on: an XID is kept, as DCGM keeps it
    finally:
        node.close()
    for seen in (health, later):
        if name is None or expected is None:
            assert all(i.result == PASS for i in seen[4])
        else:
            assert watch(seen, 4, name) == expected
            assert others_pass(seen, 4, name)


def test_a_healthy_node_passes_every_watch_of_every_gpu() -> None:
    for profile in ("h100-8", "h200-mig", "l4-1", "a100-timesliced"):
        node = Node(profile)
        try:
            health = node.polls(6)
            gpus = len(node.backend.inventory.gpus)
        finally:
            node.close()
        assert sorted(health) == list(range(gpus)), profile
        for incidents in health.values():
            assert tuple(i.watch for i in incidents) == WATCHES
            assert all((i.result, i.code, i.severity, i.category) ==
                       (PASS, "DCGM_FR_OK", "NONE", "NONE") for i in incidents), profile


def test_the_health_reads_never_show_as_values() -> None:
    node = Node("h100-8")
    try:
        node.polls(1)
        readings = node.backend.poll()
    finally:
        node.close()
    assert readings.values
    assert not [k for v in readings.values.values() for k in v if k.startswith(PREFIX)]


def test_the_series_carry_dcgm_exporters_labels_per_gpu_and_watch() -> None:
    node = Node("h100-8", "ecc,gpu=0,at=1s,dbe=2")
    try:
        node.polls(2)
        readings = node.backend.poll()
        snapshot = Snapshot(node.backend.inventory, readings, node.collectors,
                            HostLabel(None, ""))
    finally:
        node.close()
    text = render(device_families(snapshot)).text.decode()
    lines = [line for line in text.splitlines() if line.startswith("DCGM_EXP_GPU_HEALTH")]
    assert len(lines) == 8 * len(WATCHES)
    assert "# TYPE DCGM_EXP_GPU_HEALTH_STATUS gauge" in text
    assert ('modelName="NVIDIA H100 80GB HBM3",health_error_category="HARDWARE_MEMORY",'
            'health_error_code="DCGM_FR_VOLATILE_DBE_DETECTED",'
            'health_error_severity="ISOLATE",health_watch="MEM"} 20') in lines[4]
    assert lines[0].endswith('health_error_category="NONE",health_error_code="DCGM_FR_OK",'
                             'health_error_severity="NONE",health_watch="PCIE"} 0')


# --- the rules' edges, straight through `evaluate` ------------------------------------------


def facts(*samples: dict[str, float], xids: frozenset[int] = frozenset(),
          mig_on: bool = False) -> Facts:
    return Facts(tuple({PREFIX + k: v for k, v in s.items()} for s in samples), xids, mig_on)


def result_of(found: tuple[HealthIncident, ...], name: str) -> tuple[int, str]:
    (incident,) = [i for i in found if i.watch == name]
    return incident.result, incident.code


def test_crc_errors_warn_below_100_per_second_and_fail_at_it() -> None:
    slow = evaluate(facts({"nvlink_crc_flit": 0}, {"nvlink_crc_flit": 5999}))
    assert result_of(slow, "NVLINK") == (WARN, "DCGM_FR_NVLINK_ERROR_THRESHOLD")
    fast = evaluate(facts({"nvlink_crc_data": 0}, {"nvlink_crc_data": 6000}))
    assert result_of(fast, "NVLINK") == (FAIL, "DCGM_FR_NVLINK_CRC_ERROR_THRESHOLD")
    still = evaluate(facts({"nvlink_crc_flit": 7}, {"nvlink_crc_flit": 7}))
    assert result_of(still, "NVLINK") == (PASS, "DCGM_FR_OK")


def test_the_pcie_replay_limit_follows_generation_and_width() -> None:
    assert pcie_replay_limit(5, 16) == 31  # ceil(1.92 x 16)
    assert pcie_replay_limit(4, 16) == 16  # ceil(0.96 x 16)
    assert pcie_replay_limit(7, 16) == 62  # later generations use the last DCGM knows
    at = {"pcie_gen": 4, "pcie_width": 16}
    assert result_of(evaluate(facts({**at, "pcie_replays": 0}, {**at, "pcie_replays": 16})),
                     "PCIE") == (PASS, "DCGM_FR_OK")
    assert result_of(evaluate(facts({**at, "pcie_replays": 0}, {**at, "pcie_replays": 17})),
                     "PCIE") == (WARN, "DCGM_FR_PCI_REPLAY_RATE")


def test_links_down_under_mig_are_not_down() -> None:
    assert result_of(evaluate(facts({"nvlink_state_3": 0}, mig_on=True)), "NVLINK")[0] == PASS
    assert result_of(evaluate(facts({"nvlink_state_3": 0})), "NVLINK")[0] == FAIL


def test_blackwell_link_recoveries() -> None:
    assert result_of(evaluate(facts({"nvlink_recovery_ok": 1})), "NVLINK") == (
        WARN, "DCGM_FR_NVLINK_ERROR_CRITICAL")
    assert result_of(evaluate(facts({"nvlink_recovery_ok": 1, "nvlink_recovery_failed": 1})),
                     "NVLINK") == (FAIL, "DCGM_FR_NVLINK_ERROR_CRITICAL")


def test_the_worst_incident_of_a_watch_wins() -> None:
    found = evaluate(facts({"retired_pending": 1, "dbe_volatile": 1}, xids=frozenset({43})))
    assert result_of(found, "MEM") == (FAIL, "DCGM_FR_VOLATILE_DBE_DETECTED")


def test_nothing_known_passes() -> None:
    found = evaluate(facts())
    # One verdict per DCGM health watch, so that the check below has something to check.
    assert sorted(i.watch for i in found) == ["ALL", "DRIVER", "INFOROM", "MCU", "MEM",
                                              "NVLINK", "PCIE", "PMU", "POWER", "SM",
                                              "THERMAL"]
    assert [i.watch for i in found if i.result != PASS] == []


def test_every_rule_names_a_watch_and_a_code_with_metadata() -> None:
    from exporter.fields.health_rules import ERROR_META

    assert {r.watch for r in RULES} <= set(WATCHES)
    assert {r.code for r in RULES} <= set(ERROR_META)
    assert not {"PMU", "MCU", "SM"} & {r.watch for r in RULES}  # none in DCGM 4.6

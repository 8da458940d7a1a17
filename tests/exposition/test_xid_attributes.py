"""`err_code` and `err_msg` on `DCGM_FI_DEV_XID_ERRORS`, as dcgm-exporter's `toMetric` writes
them: the code as a decimal string and the table's text (0: "No Error"; a code past the
table: "Unknown Error"), after every other label of the series."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from exporter.devices.model import Entity, Inventory, Readings
from exporter.devices.nvml import NvmlBackend
from exporter.exposition.render import device_families, render
from exporter.fields.csv import parse_collectors
from exporter.k8s.types import Attribution, PodRef
from exporter.sampling.snapshot import HostLabel, Snapshot
from exporter.simulated.node import SimNvml, parse_fault
from tests.support.clock import FakeClock
from tests.support.promtool import promtool_problems
from tests.support.wait import wait_until

CSV = """\
DCGM_FI_DEV_XID_ERRORS, gauge, Value of the last XID error encountered.
DCGM_EXP_XID_ERRORS_COUNT, gauge, XIDs in the window.
DCGM_FI_DEV_GPU_TEMP, gauge, temperature
"""
COLLECTORS = parse_collectors(CSV, "xid.csv")
GPU0 = Entity(0, "GPU-aaa", "00000000:83:00.0", "nvidia0", "NVIDIA H200")
GPU1 = Entity(1, "GPU-bbb", "00000000:84:00.0", "nvidia1", "NVIDIA H200")


def _xid_lines(text: str) -> dict[str, dict[str, str]]:
    """gpu -> the labels of its DCGM_FI_DEV_XID_ERRORS sample."""
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == "DCGM_FI_DEV_XID_ERRORS":
                out[s.labels["gpu"]] = dict(s.labels) | {"value": str(float(s.value))}
    return out


def test_last_xid_series_carry_code_and_message_through_the_simulated_node() -> None:
    clock = FakeClock(start=1_000_000.0)
    lib = SimNvml("h100-8", seed=3, clock=clock,
                  faults=[parse_fault("xid,code=13,gpu=2,at=2s")])
    backend = NvmlBackend(lib, COLLECTORS.specs, clock=clock, wall_clock=clock)
    backend.start()
    try:
        readings = backend.poll()
        snapshot = Snapshot(backend.inventory, readings, COLLECTORS, HostLabel("hostname", "n"))
        before = _xid_lines(render(device_families(snapshot)).text.decode())
        # No XID yet: dcgm-exporter's value 0, "No Error", on every GPU.
        assert {(v["err_code"], v["err_msg"], v["value"]) for v in before.values()} == {
            ("0", "No Error", "0.0")}
        assert len(before) == 8

        wait_until(lambda: lib.calls["nvmlEventSetWait_v2"] > 0, what="XID watcher waiting")
        clock.advance(3)
        wait_until(backend.ledger.totals, timeout=10, what="XID 13 recorded")
        readings = backend.poll()
        snapshot = Snapshot(backend.inventory, readings, COLLECTORS, HostLabel("hostname", "n"))
        text = render(device_families(snapshot)).text.decode()
        after = _xid_lines(text)
        assert (after["2"]["err_code"], after["2"]["err_msg"], after["2"]["value"]) == (
            "13", "Graphics Engine Exception", "13.0")
        assert after["0"]["err_code"] == "0"
        # Only the last-XID field has them: not the window count, not the temperature.
        for line in text.splitlines():
            if not line.startswith("DCGM_FI_DEV_XID_ERRORS{"):
                assert "err_code" not in line, line
                assert "err_msg" not in line, line
        assert not promtool_problems(text)
    finally:
        backend.close()


def test_attributes_follow_the_pod_labels_and_an_unknown_code_is_unknown_error() -> None:
    owner = PodRef("llm-0", "inference", "server", (("pod_uid", "u-1"), ("team", "ml")))
    snapshot = Snapshot(
        Inventory((GPU0, GPU1), (), "590.48.01"),
        Readings(values={(0, -1): {"DCGM_FI_DEV_XID_ERRORS": 200.0},
                         (1, -1): {"DCGM_FI_DEV_XID_ERRORS": 48.0}}),
        COLLECTORS, HostLabel("hostname", "node-a"),
        Attribution(owners={(1, -1): owner}))
    (family,) = [f for f in device_families(snapshot) if f.name == "DCGM_FI_DEV_XID_ERRORS"]
    unknown, held = family.samples
    assert unknown.labels[-2:] == (("err_code", "200"), ("err_msg", "Unknown Error"))
    assert [name for name, _ in held.labels] == [
        "gpu", "UUID", "pci_bus_id", "device", "modelName", "hostname", "container",
        "namespace", "pod", "pod_uid", "team", "err_code", "err_msg"]
    assert held.labels[-2:] == (("err_code", "48"), ("err_msg", "Double Bit ECC Error"))

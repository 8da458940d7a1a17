"""The NVML backend over the simulated node, in-process with a controlled clock."""

from __future__ import annotations

from collections.abc import Sequence

import pynvml

from exporter.devices.nvml import NvmlBackend
from exporter.exposition.render import device_families, render
from exporter.fields.catalog import CATALOG, FieldSpec
from exporter.fields.csv import default_collectors_path, load_collectors
from exporter.sampling.snapshot import HostLabel, Snapshot
from exporter.simulated.node import SimNvml, parse_fault
from tests.support.clock import FakeClock
from tests.support.wait import wait_until


def make(profile: str, *faults: str, fields: Sequence[FieldSpec] | None = None
         ) -> tuple[SimNvml, NvmlBackend, FakeClock]:
    clock = FakeClock(start=1_000_000.0)
    lib = SimNvml(profile, seed=3, faults=[parse_fault(f) for f in faults], clock=clock)
    specs = fields if fields is not None else load_collectors(default_collectors_path()).specs
    backend = NvmlBackend(lib, specs, clock=clock, wall_clock=clock)
    backend.start()
    return lib, backend, clock


def test_handles_are_fetched_once_not_per_poll() -> None:
    lib, backend, clock = make("h200-mig")
    try:
        backend.poll()
        first = dict(lib.calls)
        for _ in range(5):
            clock.advance(1)
            backend.poll()
        for fn in ("nvmlDeviceGetHandleByIndex", "nvmlDeviceGetMigDeviceHandleByIndex",
                   "nvmlDeviceGetUUID", "nvmlDeviceGetCount"):
            assert lib.calls[fn] == first.get(fn, 0), fn
        # One memory call per GPU or GPU instance per poll, not one per field.
        per_poll = (lib.calls["nvmlDeviceGetMemoryInfo"] - first["nvmlDeviceGetMemoryInfo"]) / 5
        assert per_poll == 6 + 11  # 6 whole GPUs + 11 MIG GPU instances
    finally:
        backend.close()


def test_unsupported_calls_are_not_repeated() -> None:
    lib, backend, clock = make("h200-mig")
    try:
        backend.poll()
        after_first = lib.calls["nvmlDeviceGetUtilizationRates"]
        for _ in range(3):
            clock.advance(1)
            backend.poll()
        # GPUs 0 and 1 are MIG-enabled: never asked for utilisation; 6 others once per poll.
        assert lib.calls["nvmlDeviceGetUtilizationRates"] - after_first == 3 * 6
        remapped = lib.calls["nvmlDeviceGetRemappedRows"]
        clock.advance(1)
        backend.poll()
        assert lib.calls["nvmlDeviceGetRemappedRows"] - remapped == 6  # MIG GPUs remembered
    finally:
        backend.close()


def test_values_and_unit_conversions_match_raw_nvml_answers() -> None:
    lib, backend, clock = make("h100-8", fields=CATALOG)
    try:
        backend.poll()
        clock.advance(5)
        readings = backend.poll()
        h = lib.nvmlDeviceGetHandleByIndex(2)
        values = readings.values[(2, -1)]
        mem = lib.nvmlDeviceGetMemoryInfo(h, version=0x02000028)
        assert values["DCGM_FI_DEV_FB_USED"] == mem.used // (1024 * 1024)
        assert values["DCGM_FI_DEV_FB_FREE"] == mem.free // (1024 * 1024)
        assert values["DCGM_FI_DEV_POWER_USAGE"] == lib.nvmlDeviceGetPowerUsage(h) / 1000
        assert values["DCGM_FI_DEV_POWER_MGMT_LIMIT"] == \
            lib.nvmlDeviceGetPowerManagementLimit(h) / 1000
        assert values["DCGM_FI_DEV_GPU_UTIL"] == lib.nvmlDeviceGetUtilizationRates(h).gpu
        assert values["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"] == \
            lib.nvmlDeviceGetTotalEnergyConsumption(h)
        assert 0.0 <= values["DCGM_FI_PROF_SM_ACTIVE"] <= 1.0
        assert values["DCGM_FI_PROF_PCIE_TX_BYTES"] > 1024 * 1024  # MiB/s became bytes/s
        assert "DCGM_FI_DEV_RETIRED_SBE" not in values  # NOT_SUPPORTED on Hopper: omitted
    finally:
        backend.close()


def test_gpm_yields_nothing_on_the_first_cycle() -> None:
    _, backend, clock = make("h100-8")
    try:
        first = backend.poll()
        assert not any(k.startswith("DCGM_FI_PROF_") for k in first.values[(0, -1)])
        clock.advance(1)
        second = backend.poll()
        assert "DCGM_FI_PROF_GR_ENGINE_ACTIVE" in second.values[(0, -1)]
    finally:
        backend.close()


def test_periodic_walk_keeps_gpm_series_and_learned_plans() -> None:
    lib, backend, clock = make("h200-mig")
    try:
        backend.poll()
        clock.advance(1)
        assert "DCGM_FI_PROF_SM_ACTIVE" in backend.poll().values[(2, -1)]
        remapped = lib.calls["nvmlDeviceGetRemappedRows"]
        clock.advance(61)  # past the periodic re-enumeration
        readings = backend.poll()
        assert lib.calls["nvmlDeviceGetHandleByIndex"] == 16  # walked twice
        assert "DCGM_FI_PROF_SM_ACTIVE" in readings.values[(2, -1)]
        assert "DCGM_FI_PROF_SM_ACTIVE" in readings.values[(0, 2)]
        # MIG GPUs' NOT_SUPPORTED remapped rows stay dropped: 6 calls, not 8.
        assert lib.calls["nvmlDeviceGetRemappedRows"] - remapped == 6
    finally:
        backend.close()


def test_device_filter_g_and_i() -> None:
    from exporter.devices.config import DeviceSettings
    from exporter.devices.filter import parse_device_filter

    for spec, gpus, instances in (("g", 8, 0), ("g:0,2", 2, 0), ("i", 0, 11), ("i:9", 0, 2)):
        lib = SimNvml("h200-mig", seed=3, clock=FakeClock(start=1_000_000.0))
        backend = NvmlBackend(lib, load_collectors(default_collectors_path()).specs,
                              DeviceSettings(selection=parse_device_filter(spec)))
        backend.start()
        try:
            readings = backend.poll()
            keys = [k for k, v in readings.values.items() if "DCGM_FI_DEV_GPU_TEMP" in v
                    or "DCGM_FI_DEV_FB_USED" in v]
            assert len([k for k in keys if k[1] == -1]) == gpus, spec
            assert len([k for k in keys if k[1] != -1]) == instances, spec
        finally:
            backend.close()


def test_mig_enumeration_with_sparse_slots_and_two_compute_instances() -> None:
    _, backend, _ = make("h200-mig")
    try:
        backend.poll()
        inv = backend.inventory
        gpu0 = [i for i in inv.instances if i.gpu == 0]
        assert [(i.gpu_instance_id, i.gpu_instance_profile) for i in gpu0] == [
            (2, "3g.71gb"), (3, "2g.35gb"), (9, "1g.18gb"), (10, "1g.18gb")]
        assert [m.compute_instance_id for m in gpu0[0].mig_devices] == [0, 1]
        assert len({m.uuid for m in gpu0[0].mig_devices}) == 2
        assert len([i for i in inv.instances if i.gpu == 1]) == 7
    finally:
        backend.close()


def test_xid_79_of_a_gpu_that_falls_off_the_bus_is_kept() -> None:
    lib, backend, clock = make("h100-8", "xid,code=79,gpu=1,at=2s", "lost,gpu=1,at=2s")
    try:
        backend.poll()
        # the XID watcher registers and waits before the event happens
        wait_until(lambda: lib.calls["nvmlEventSetWait_v2"] > 0, what="XID watcher waiting")
        clock.advance(3)
        wait_until(backend.ledger.totals, timeout=10, what="XID 79 recorded")
        readings = backend.poll()
        assert readings.values[(1, -1)] == {"DCGM_FI_DEV_XID_ERRORS": 79.0}
        snapshot = Snapshot(backend.inventory, readings,
                            load_collectors(default_collectors_path()), HostLabel(None, ""))
        text = render(device_families(snapshot)).text.decode()
        gpu1 = [line for line in text.splitlines() if 'gpu="1"' in line]
        # The lost GPU's readings are gone; its XID 79 stays visible, dcgm-style and ours,
        # under the same label set it had (driver label included).
        assert sorted(line.split("{")[0] for line in gpu1) == [
            "DCGM_EXP_XID_ERRORS_COUNT", "DCGM_FI_DEV_XID_ERRORS",
            "gpu_exporter_xid_errors_total", "gpu_exporter_xid_last_seen_timestamp_seconds"]
        with_xid = [line for line in gpu1 if "xid=" in line]
        assert with_xid
        assert all('DCGM_FI_DRIVER_VERSION="' in line and 'xid="79"' in line
                   for line in with_xid)
        assert any(line.startswith("DCGM_FI_DEV_XID_ERRORS{") and line.endswith(" 79")
                   for line in gpu1)
        assert backend.gpus_lost_total == 1
    finally:
        backend.close()


def test_a_gpu_back_at_the_first_walk_after_its_loss_is_read_again() -> None:
    _, backend, clock = make("h100-8", "lost,gpu=1,at=2s,for=1s")
    try:
        assert "DCGM_FI_DEV_GPU_TEMP" in backend.poll().values[(1, -1)]
        clock.advance(2.5)
        assert (1, -1) not in backend.poll().values  # lost mid-poll: dropped at once
        clock.advance(1.5)  # past the 1 s pause; the walk finds the same devices as before
        readings = backend.poll()
        assert [g.gpu for g in backend.inventory.gpus] == list(range(8))
        assert "DCGM_FI_DEV_GPU_TEMP" in readings.values[(1, -1)]
        assert backend.gpus_lost_total == 1
    finally:
        backend.close()


class FlakyWalk(SimNvml):
    """Fails the device count, as a driver in trouble can, while `failing` is set."""

    failing = False

    def nvmlDeviceGetCount(self) -> int:
        if self.failing:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_UNKNOWN)
        return super().nvmlDeviceGetCount()


def test_a_failed_walk_is_followed_by_full_readings_once_it_succeeds() -> None:
    clock = FakeClock(start=1_000_000.0)
    lib = FlakyWalk("l4-1", clock=clock)
    backend = NvmlBackend(lib, load_collectors(default_collectors_path()).specs, clock=clock)
    backend.start()
    try:
        assert "DCGM_FI_DEV_GPU_TEMP" in backend.poll().values[(0, -1)]
        lib.failing = True
        clock.advance(61)  # the periodic walk
        assert backend.poll().values == {}
        assert not backend.up
        assert backend.call_errors[("enumerate", "UNKNOWN")] == 1
        lib.failing = False
        clock.advance(1)
        readings = backend.poll()
        assert backend.up
        assert "DCGM_FI_DEV_GPU_TEMP" in readings.values[(0, -1)]
    finally:
        backend.close()

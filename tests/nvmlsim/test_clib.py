"""The unmodified pynvml over the simulated library, one child process per scenario.

Expected values come from the scenario each test writes, in the units NVML itself uses
(milliwatts, bytes, millijoules, KiB), so these tests pin what the exporter will be fed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from .harness import ChildFailed, run_child, write_scenario

MIB = 1 << 20

H200_MIG: dict[str, Any] = {
    "name": "NVIDIA H200",
    "uuid": "GPU-0b3c1f0e-1111-2222-3333-444455556666",
    "pci_bus_id": "00000000:83:00.0",
    "mig": [
        {"gi": 2, "profile": "3g.71gb", "memory_total_mib": 71424, "memory_used_mib": 22,
         "compute_instances": [
             {"index": 0, "ci": 0, "profile": "1c.3g.71gb", "uuid": "MIG-aaaa0000"},
             {"index": 1, "ci": 1, "profile": "2c.3g.71gb", "uuid": "MIG-aaaa0001"}]},
        {"gi": 9, "profile": "1g.18gb", "memory_total_mib": 16384, "memory_used_mib": 9,
         "compute_instances": [{"index": 5, "ci": 0, "uuid": "MIG-aaaa0005"}]},
    ],
}


def scenario_child(lib: Path, tmp_path: Path, scenario: dict[str, Any] | str, code: str,
                   **kwargs: Any) -> dict[str, Any]:
    return run_child(lib, code, scenario_file=write_scenario(tmp_path, scenario), **kwargs)


def test_values_and_units_as_nvml_reports_them(nvmlsim_lib: Path, tmp_path: Path) -> None:
    scenario = {
        "driver_version": "570.124.06",
        "devices": [{
            "name": "NVIDIA H100 80GB HBM3",
            "uuid": "GPU-12345678-abcd-ef01-2345-6789abcdef01",
            "pci_bus_id": "00000000:9B:00.0",
            "sm_clock_mhz": 1755, "mem_clock_mhz": 2619,
            "temperature_c": 61, "memory_temperature_c": 73,
            "power_w": 312.345, "power_limit_w": 700,
            "energy_mj": 123456789, "pcie_replay": 4,
            "gpu_util": 87, "memory_util": 41, "encoder_util": 3, "decoder_util": 9,
            "memory_total_bytes": 85520809984, "memory_reserved_bytes": 560988160,
            "memory_used_bytes": 1234567891,
            "ecc_sbe_volatile": 11, "ecc_dbe_volatile": 2, "ecc_sbe_aggregate": 30,
            "ecc_dbe_aggregate": 5,
            "remapped_rows_correctable": 6, "remapped_rows_uncorrectable": 1,
            "remap_pending": 1, "remap_failure": 0,
            "retired_pages_sbe": 7, "retired_pages_dbe": 8, "retired_pages_pending": 1,
            "violation_power_ns": 1000, "violation_thermal_ns": 2000,
            "nvlink_tx_kib": 5000, "nvlink_rx_kib": 7000, "nvlink_links": 18,
            "clock_event_reasons": 0x24,
        }, {"power_mw": 99999}],
    }
    r = scenario_child(nvmlsim_lib, tmp_path, scenario, """
        pynvml.nvmlInit()
        h = pynvml.nvmlDeviceGetHandleByIndex(0)
        mem = pynvml.nvmlDeviceGetMemoryInfo(h, version=pynvml.nvmlMemory_v2)
        mem1 = pynvml.nvmlDeviceGetMemoryInfo(h)
        util = pynvml.nvmlDeviceGetUtilizationRates(h)
        fv = pynvml.nvmlDeviceGetFieldValues(h, [82, 3, 4, 29, 30, 31, 74, 75,
                                                 (138, 0xFFFFFFFF), (139, 0xFFFFFFFF), 4242])
        out.update(
            count=pynvml.nvmlDeviceGetCount(),
            driver=pynvml.nvmlSystemGetDriverVersion(),
            name=pynvml.nvmlDeviceGetName(h), uuid=pynvml.nvmlDeviceGetUUID(h),
            bus_id=pynvml.nvmlDeviceGetPciInfo(h).busId,
            bus=pynvml.nvmlDeviceGetPciInfo(h).bus,
            sm=pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM),
            memclk=pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_MEM),
            temp=pynvml.nvmlDeviceGetTemperature(h, pynvml.NVML_TEMPERATURE_GPU),
            power=pynvml.nvmlDeviceGetPowerUsage(h),
            power1=pynvml.nvmlDeviceGetPowerUsage(pynvml.nvmlDeviceGetHandleByIndex(1)),
            limit=pynvml.nvmlDeviceGetPowerManagementLimit(h),
            energy=pynvml.nvmlDeviceGetTotalEnergyConsumption(h),
            replay=pynvml.nvmlDeviceGetPcieReplayCounter(h),
            util=[util.gpu, util.memory],
            enc=pynvml.nvmlDeviceGetEncoderUtilization(h)[0],
            dec=pynvml.nvmlDeviceGetDecoderUtilization(h)[0],
            mem=[mem.total, mem.reserved, mem.used, mem.free],
            mem1=[mem1.total, mem1.used, mem1.free],
            remap=list(pynvml.nvmlDeviceGetRemappedRows(h)),
            reasons=pynvml.nvmlDeviceGetCurrentClocksEventReasons(h),
            ecc=[pynvml.nvmlDeviceGetTotalEccErrors(h, t, c) for t in (0, 1) for c in (0, 1)],
            fields=[[v.fieldId, v.nvmlReturn, v.valueType,
                     v.value.uiVal if v.valueType == 1 else v.value.ullVal] for v in fv],
        )
    """)
    assert r["count"] == 2
    assert r["driver"] == "570.124.06"
    assert r["name"] == "NVIDIA H100 80GB HBM3"
    assert r["uuid"] == "GPU-12345678-abcd-ef01-2345-6789abcdef01"
    assert r["bus_id"] == "00000000:9B:00.0"
    assert r["bus"] == 0x9B
    assert (r["sm"], r["memclk"], r["temp"]) == (1755, 2619, 61)
    assert r["power"] == 312345
    assert r["power1"] == 99999
    assert r["limit"] == 700000
    assert r["energy"] >= 123456789  # mJ, grows with the real clock
    assert r["replay"] == 4
    assert r["util"] == [87, 41]
    assert (r["enc"], r["dec"]) == (3, 9)
    total, reserved, used = 85520809984, 560988160, 1234567891
    assert r["mem"] == [total, reserved, used, total - reserved - used]
    assert r["mem1"] == [total, used + reserved, total - reserved - used]  # v1 folds reserved
    assert r["remap"] == [6, 1, 1, 0]
    assert r["reasons"] == 0x24
    assert r["ecc"] == [11, 30, 2, 5]
    ull, uint = 3, 1
    assert r["fields"] == [
        [82, 0, uint, 73], [3, 0, ull, 11], [4, 0, ull, 2], [29, 0, ull, 7], [30, 0, ull, 8],
        [31, 0, ull, 1], [74, 0, ull, 1000], [75, 0, ull, 2000], [138, 0, ull, 5000],
        [139, 0, ull, 7000], [4242, 3, 0, 0],
    ]


def test_counters_integrate_over_the_manual_clock(nvmlsim_lib: Path, tmp_path: Path) -> None:
    scenario = {"clock": "manual", "devices": [{
        "power_w": 200, "energy_mj": 1000, "nvlink_tx_kib": 0, "nvlink_rx_kib": 0,
        "nvlink_tx_kib_per_s": 1024, "nvlink_rx_kib_per_s": 512}]}
    r = scenario_child(nvmlsim_lib, tmp_path, scenario, """
        pynvml.nvmlInit()
        h = pynvml.nvmlDeviceGetHandleByIndex(0)
        def read():
            fv = pynvml.nvmlDeviceGetFieldValues(h, [(138, 0xFFFFFFFF), (139, 0xFFFFFFFF)])
            return [pynvml.nvmlDeviceGetTotalEnergyConsumption(h), fv[0].value.ullVal,
                    fv[1].value.ullVal]
        out["t0"] = read()
        sim.advance(10)
        out["t10"] = read()
        sim.set_value(0, "power_w", 100)
        sim.advance(5)
        out["t15"] = read()
        out["now"] = sim.time()
    """)
    assert r["t0"] == [1000, 0, 0]
    assert r["t10"] == [1000 + 200_000 * 10, 10240, 5120]
    assert r["t15"] == [1000 + 200_000 * 10 + 100_000 * 5, 15360, 7680]
    assert r["now"] == 15


def test_sparse_mig_enumeration(nvmlsim_lib: Path, tmp_path: Path) -> None:
    r = scenario_child(nvmlsim_lib, tmp_path, {"devices": [H200_MIG, {}]}, """
        pynvml.nvmlInit()
        h = pynvml.nvmlDeviceGetHandleByIndex(0)
        out["mode"] = pynvml.nvmlDeviceGetMigMode(h)
        out["max"] = pynvml.nvmlDeviceGetMaxMigDeviceCount(h)
        slots = {}
        for i in range(out["max"]):
            try:
                m = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(h, i)
            except pynvml.NVMLError_NotFound:
                slots[i] = None
                continue
            mem = pynvml.nvmlDeviceGetMemoryInfo(m, version=pynvml.nvmlMemory_v2)
            attrs = pynvml.nvmlDeviceGetAttributes_v2(m)
            parent = pynvml.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(m)
            slots[i] = dict(
                name=pynvml.nvmlDeviceGetName(m), uuid=pynvml.nvmlDeviceGetUUID(m),
                gi=pynvml.nvmlDeviceGetGpuInstanceId(m),
                ci=pynvml.nvmlDeviceGetComputeInstanceId(m),
                total_mib=mem.total // 2**20, used_mib=mem.used // 2**20,
                gi_slices=attrs.gpuInstanceSliceCount, ci_slices=attrs.computeInstanceSliceCount,
                mem_mb=attrs.memorySizeMB, parent=pynvml.nvmlDeviceGetUUID(parent))
            try:
                pynvml.nvmlDeviceGetPowerUsage(m)
            except pynvml.NVMLError_NotSupported:
                slots[i]["power"] = "not supported"
        out["slots"] = slots
        for call in ("nvmlDeviceGetUtilizationRates", "nvmlDeviceGetEncoderUtilization"):
            try:
                getattr(pynvml, call)(h)
                out[call] = "ok"
            except pynvml.NVMLError_NotSupported:
                out[call] = "not supported"
        h1 = pynvml.nvmlDeviceGetHandleByIndex(1)
        out["mode1"] = pynvml.nvmlDeviceGetMigMode(h1)
        try:
            pynvml.nvmlDeviceGetMigDeviceHandleByIndex(h1, 0)
        except pynvml.NVMLError_NotFound:
            out["gpu1_slot0"] = "not found"
        fv = pynvml.nvmlDeviceGetFieldValues(h, [(138, 0xFFFFFFFF)])
        out["nvlink_ret"] = fv[0].nvmlReturn
    """)
    assert r["mode"] == [1, 1]
    assert r["max"] == 7
    slots = {int(k): v for k, v in r["slots"].items()}
    assert [i for i, v in slots.items() if v is not None] == [0, 1, 5]
    assert slots[0]["name"] == "NVIDIA H200 MIG 1c.3g.71gb"
    assert slots[1]["name"] == "NVIDIA H200 MIG 2c.3g.71gb"
    assert slots[5]["name"] == "NVIDIA H200 MIG 1g.18gb"
    assert [slots[i]["uuid"] for i in (0, 1, 5)] == ["MIG-aaaa0000", "MIG-aaaa0001",
                                                      "MIG-aaaa0005"]
    assert [(slots[i]["gi"], slots[i]["ci"]) for i in (0, 1, 5)] == [(2, 0), (2, 1), (9, 0)]
    # framebuffer belongs to the GPU instance: both compute instances of GI 2 share it
    assert [slots[i]["total_mib"] for i in (0, 1, 5)] == [71424, 71424, 16384]
    assert [slots[i]["used_mib"] for i in (0, 1, 5)] == [22, 22, 9]
    assert [(slots[i]["gi_slices"], slots[i]["ci_slices"]) for i in (0, 1, 5)] == [
        (3, 1), (3, 2), (1, 1)]
    assert slots[5]["mem_mb"] == 16384
    assert {slots[i]["parent"] for i in (0, 1, 5)} == {H200_MIG["uuid"]}
    assert {slots[i]["power"] for i in (0, 1, 5)} == {"not supported"}
    assert r["nvmlDeviceGetUtilizationRates"] == "not supported"
    assert r["nvmlDeviceGetEncoderUtilization"] == "not supported"
    assert r["mode1"] == [0, 0]
    assert r["gpu1_slot0"] == "not found"
    assert r["nvlink_ret"] == 3  # NVLink queries are refused in MIG mode


def test_mig_layout_change_invalidates_old_handles(nvmlsim_lib: Path, tmp_path: Path) -> None:
    r = scenario_child(nvmlsim_lib, tmp_path, {"devices": [H200_MIG]}, """
        import json
        pynvml.nvmlInit()
        h = pynvml.nvmlDeviceGetHandleByIndex(0)
        old = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(h, 5)
        sim.patch_device(0, json.dumps({"mig": [
            {"gi": 1, "profile": "7g.141gb", "compute_instances": [{"index": 3}]}]}))
        try:
            pynvml.nvmlDeviceGetUUID(old)
        except pynvml.NVMLError_InvalidArgument:
            out["old"] = "invalid"
        found = []
        for i in range(7):
            try:
                m = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(h, i)
                found.append([i, pynvml.nvmlDeviceGetName(m), pynvml.nvmlDeviceGetGpuInstanceId(m)])
            except pynvml.NVMLError_NotFound:
                pass
        out["found"] = found
        sim.patch_device(0, '{"mig": [], "mig_mode": 0, "mig_mode_pending": 0}')
        out["mode"] = pynvml.nvmlDeviceGetMigMode(h)
        out["util"] = pynvml.nvmlDeviceGetUtilizationRates(h).gpu
    """)
    assert r["old"] == "invalid"
    assert r["found"] == [[3, "NVIDIA H200 MIG 7g.141gb", 1]]
    assert r["mode"] == [0, 0]
    assert r["util"] == 0


def test_gpm_metrics_are_time_weighted_between_samples(nvmlsim_lib: Path,
                                                       tmp_path: Path) -> None:
    scenario = {"clock": "manual", "devices": [
        {"gpm": {"1": 40, "20": 512}},
        {"gpm_supported": False},
        H200_MIG | {"mig": [dict(H200_MIG["mig"][0], gpm={"2": 25}), H200_MIG["mig"][1]]},
    ]}
    r = scenario_child(nvmlsim_lib, tmp_path, scenario, """
        pynvml.nvmlInit()
        h0, h1, h2 = (pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(3))
        out["support"] = [pynvml.nvmlGpmQueryDeviceSupport(h).isSupportedDevice
                          for h in (h0, h1, h2)]
        def metrics(a, b, ids):
            mg = pynvml.c_nvmlGpmMetricsGet_t()
            mg.version = pynvml.NVML_GPM_METRICS_GET_VERSION
            mg.numMetrics = len(ids)
            mg.sample1, mg.sample2 = a, b
            for i, mid in enumerate(ids):
                mg.metrics[i].metricId = mid
            pynvml.nvmlGpmMetricsGet(mg)
            return [[mg.metrics[i].nvmlReturn, mg.metrics[i].value] for i in range(len(ids))]
        a, b = pynvml.nvmlGpmSampleAlloc(), pynvml.nvmlGpmSampleAlloc()
        pynvml.nvmlGpmSampleGet(h0, a)
        sim.advance(1.0)
        sim.set_gpm_value(0, 1, 80)
        sim.advance(1.0)
        pynvml.nvmlGpmSampleGet(h0, b)
        out["gpu"] = metrics(a, b, [1, 20, 13])
        try:
            metrics(b, b, [1])
        except pynvml.NVMLError_InvalidArgument:
            out["same_time"] = "invalid"
        try:
            pynvml.nvmlGpmSampleGet(h1, a)
        except pynvml.NVMLError_NotSupported:
            out["unsupported_gpu"] = "not supported"
        # GPU-instance scope through the parent, compute-instance scope through a MIG handle
        pynvml.nvmlGpmMigSampleGet(h2, 2, a)
        m = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(h2, 1)
        c1, c2 = pynvml.nvmlGpmSampleAlloc(), pynvml.nvmlGpmSampleAlloc()
        pynvml.nvmlGpmSampleGet(m, c1)
        sim.advance(0.5)
        pynvml.nvmlGpmMigSampleGet(h2, 2, b)
        pynvml.nvmlGpmSampleGet(m, c2)
        out["gi"] = metrics(a, b, [2, 1])
        out["ci"] = metrics(c1, c2, [2])
        try:
            metrics(a, c2, [2])
        except pynvml.NVMLError_InvalidArgument:
            out["mixed_scopes"] = "invalid"
        for s in (a, b, c1, c2):
            pynvml.nvmlGpmSampleFree(s)
    """)
    assert r["support"] == [1, 0, 1]
    assert r["gpu"] == [[0, 60.0], [0, 512.0], [3, 0.0]]
    assert r["same_time"] == "invalid"
    assert r["unsupported_gpu"] == "not supported"
    assert r["gi"] == [[0, 25.0], [3, 0.0]]
    assert r["ci"] == [[0, 25.0]]
    assert r["mixed_scopes"] == "invalid"


def test_return_code_overrides(nvmlsim_lib: Path, tmp_path: Path) -> None:
    scenario = {"device_count": 2,
                "devices": [{"return_codes": {"nvmlDeviceGetTemperature": "NO_PERMISSION"}}]}
    r = scenario_child(nvmlsim_lib, tmp_path, scenario, """
        pynvml.nvmlInit()
        h0, h1 = pynvml.nvmlDeviceGetHandleByIndex(0), pynvml.nvmlDeviceGetHandleByIndex(1)
        def outcome(fn, *args):
            try:
                fn(*args)
                return "ok"
            except pynvml.NVMLError as e:
                return type(e).__name__
        out["temp"] = [outcome(pynvml.nvmlDeviceGetTemperature, h, 0) for h in (h0, h1)]
        sim.set_return("nvmlDeviceGetPowerUsage", "NOT_SUPPORTED", gpu=1)
        sim.set_return("nvmlDeviceGetPcieReplayCounter", "FUNCTION_NOT_FOUND")
        out["power"] = [outcome(pynvml.nvmlDeviceGetPowerUsage, h) for h in (h0, h1)]
        out["replay"] = [outcome(pynvml.nvmlDeviceGetPcieReplayCounter, h) for h in (h0, h1)]
        sim.set_return("nvmlDeviceGetPowerUsage", 0, gpu=1)
        out["power_cleared"] = outcome(pynvml.nvmlDeviceGetPowerUsage, h1)
        # a symbol the library does not export at all
        out["absent"] = outcome(pynvml.nvmlDeviceGetBoardId, h0)
        sim.set_field_return(0, 82, "NOT_SUPPORTED")
        out["field"] = pynvml.nvmlDeviceGetFieldValues(h0, [82])[0].nvmlReturn
        out["error_string"] = pynvml.nvmlErrorString(15)
    """)
    assert r["temp"] == ["NVMLError_NoPermission", "ok"]
    assert r["power"] == ["ok", "NVMLError_NotSupported"]
    assert r["replay"] == ["NVMLError_FunctionNotFound"] * 2
    assert r["power_cleared"] == "ok"
    assert r["absent"] == "NVMLError_FunctionNotFound"
    assert r["field"] == 3
    assert r["error_string"] == "GPU is lost"


def test_xid_wait_times_out_and_delivers(nvmlsim_lib: Path, tmp_path: Path) -> None:
    r = scenario_child(nvmlsim_lib, tmp_path, {"device_count": 2, "devices": [H200_MIG]}, """
        import threading
        pynvml.nvmlInit()
        h0 = pynvml.nvmlDeviceGetHandleByIndex(0)
        sim.queue_xid(0, 31)  # before anyone registered: lost, as on a real driver
        es = pynvml.nvmlEventSetCreate()
        pynvml.nvmlDeviceRegisterEvents(h0, pynvml.nvmlEventTypeXidCriticalError, es)
        try:
            pynvml.nvmlEventSetWait_v2(es, 50)
        except pynvml.NVMLError_Timeout:
            out["first"] = "timeout"
        sim.queue_xid(1, 43)  # GPU 1 is not registered on this set
        sim.queue_xid(0, 79)
        sim.queue_xid(0, 94, gi=9, ci=0)
        events = []
        for _ in range(2):
            e = pynvml.nvmlEventSetWait_v2(es, 1000)
            events.append([pynvml.nvmlDeviceGetUUID(e.device), e.eventType, e.eventData,
                           e.gpuInstanceId, e.computeInstanceId])
        out["events"] = events
        try:
            pynvml.nvmlEventSetWait_v2(es, 20)
        except pynvml.NVMLError_Timeout:
            out["drained"] = "timeout"
        # a waiter blocked in the library must not hold the lock: the main thread queues
        # an event while the waiter sleeps, and the waiter wakes with it
        got = {}
        def waiter():
            try:
                got["xid"] = pynvml.nvmlEventSetWait_v2(es, 20000).eventData
            except pynvml.NVMLError as e:
                got["error"] = str(e)
        from tests.support.wait import wait_until
        calls_before = sim.call_count("nvmlEventSetWait_v2")
        t = threading.Thread(target=waiter)
        t.start()
        wait_until(lambda: sim.call_count("nvmlEventSetWait_v2") > calls_before, 10,
                   interval=0.001, what="the waiter inside nvmlEventSetWait_v2")
        out["power_while_waiting"] = pynvml.nvmlDeviceGetPowerUsage(h0)
        sim.queue_xid(0, 48)
        t.join(10)
        out["threaded"] = got
        out["alive"] = t.is_alive()
        # scheduled on the real clock, shortly ahead
        sim.queue_xid(0, 119, at=sim.time() + 0.2)
        out["scheduled"] = pynvml.nvmlEventSetWait_v2(es, 10000).eventData
        pynvml.nvmlEventSetFree(es)
    """)
    assert r["first"] == "timeout"
    uuid = H200_MIG["uuid"]
    xid_type = 8
    assert r["events"] == [[uuid, xid_type, 79, 0xFFFFFFFF, 0xFFFFFFFF],
                           [uuid, xid_type, 94, 9, 0]]
    assert r["drained"] == "timeout"
    assert r["power_while_waiting"] > 0
    assert r["threaded"] == {"xid": 48}
    assert r["alive"] is False
    assert r["scheduled"] == 119


def test_hang_blocks_one_call_without_holding_the_library(nvmlsim_lib: Path,
                                                         tmp_path: Path) -> None:
    scenario = {"clock": "manual", "device_count": 2,
                "hang": {"function": "nvmlDeviceGetPowerUsage", "device": 0, "at_s": 10,
                         "for_s": 0.5}}
    r = scenario_child(nvmlsim_lib, tmp_path, scenario, """
        import threading, time
        pynvml.nvmlInit()
        h0, h1 = pynvml.nvmlDeviceGetHandleByIndex(0), pynvml.nvmlDeviceGetHandleByIndex(1)
        out["before_due"] = [pynvml.nvmlDeviceGetPowerUsage(h0), sim.hanging_calls()]
        sim.set_time(10)
        started = time.monotonic()
        out["after_hang"] = pynvml.nvmlDeviceGetPowerUsage(h0)   # blocks 0.5 s of wall time
        out["blocked_s"] = time.monotonic() - started
        # a long hang now; a call caught in it must leave the library free for the others
        sim.set_hang("nvmlDeviceGetPowerUsage", 60, gpu=0)
        es = pynvml.nvmlEventSetCreate()
        pynvml.nvmlDeviceRegisterEvents(h0, pynvml.nvmlEventTypeXidCriticalError, es)
        got = {}
        def stuck():
            got["power"] = pynvml.nvmlDeviceGetPowerUsage(h0)
        def waiter():
            got["xid"] = pynvml.nvmlEventSetWait_v2(es, 20000).eventData
        t = threading.Thread(target=stuck, daemon=True)
        t.start()
        from tests.support.wait import wait_until
        wait_until(lambda: sim.hanging_calls() > 0, 10, interval=0.001, what="a hanging call")
        out["hanging"] = sim.hanging_calls()
        w = threading.Thread(target=waiter, daemon=True)
        w.start()
        sim.queue_xid(0, 79)
        w.join(10)
        out["waiter_alive"] = w.is_alive()
        out["meanwhile"] = [pynvml.nvmlDeviceGetPowerUsage(h1),
                            pynvml.nvmlDeviceGetTemperature(h0, pynvml.NVML_TEMPERATURE_GPU),
                            pynvml.nvmlDeviceGetCount()]
        sim.set_value(0, "power_w", 200)   # the control side takes the lock too
        out["still_hanging"] = [sim.hanging_calls(), t.is_alive()]
        out["woken"] = sim.end_hangs()
        t.join(10)
        out["stuck_alive"] = t.is_alive()
        out["got"] = got
        out["after_end"] = [pynvml.nvmlDeviceGetPowerUsage(h0), sim.hanging_calls()]
        pynvml.nvmlEventSetFree(es)
    """)
    assert r["before_due"] == [120000, 0]
    assert r["after_hang"] == 120000
    assert r["blocked_s"] >= 0.5  # the hang's length of wall time, not simulated time
    assert r["hanging"] == 1
    assert r["waiter_alive"] is False
    assert r["got"]["xid"] == 79
    assert r["meanwhile"] == [120000, 34, 2]
    assert r["still_hanging"] == [1, True]
    assert r["woken"] == 1
    # the blocked call answers from the state after the hang: the value set meanwhile
    assert r["stuck_alive"] is False
    assert r["got"]["power"] == 200000
    assert r["after_end"] == [200000, 0]  # end_hangs also disarmed the hang


def test_gpu_lost_after_n_calls_and_recovery(nvmlsim_lib: Path, tmp_path: Path) -> None:
    r = scenario_child(nvmlsim_lib, tmp_path, {"clock": "manual", "devices": [H200_MIG, {}]}, """
        pynvml.nvmlInit()
        h0, h1 = pynvml.nvmlDeviceGetHandleByIndex(0), pynvml.nvmlDeviceGetHandleByIndex(1)
        mig = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(h0, 0)
        sim.set_gpu_lost(0, after_calls=3)
        seq = []
        for _ in range(5):
            try:
                seq.append(pynvml.nvmlDeviceGetPowerUsage(h0))
            except pynvml.NVMLError_GpuIsLost:
                seq.append("lost")
        out["seq"] = seq
        out["other"] = pynvml.nvmlDeviceGetPowerUsage(h1)
        def state(fn, *args):
            try:
                fn(*args)
                return "ok"
            except pynvml.NVMLError as e:
                return type(e).__name__
        out["mig"] = state(pynvml.nvmlDeviceGetMemoryInfo, mig)
        out["by_index"] = state(pynvml.nvmlDeviceGetHandleByIndex, 0)
        out["flag"] = sim.is_gpu_lost(0)
        sim.restore_gpu(0)
        out["restored"] = state(pynvml.nvmlDeviceGetPowerUsage, h0)
        # timed: lost from t=10 for 5 s
        sim.set_gpu_lost(1, at=10, duration=5)
        timeline = []
        for t in (9, 10, 14, 15):
            sim.set_time(t)
            timeline.append(state(pynvml.nvmlDeviceGetTemperature, h1, 0))
        out["timeline"] = timeline
    """)
    assert r["seq"][:3] == [120000] * 3
    assert r["seq"][3:] == ["lost", "lost"]
    assert r["other"] == 120000
    assert r["mig"] == "NVMLError_GpuIsLost"
    assert r["by_index"] == "NVMLError_GpuIsLost"
    assert r["flag"] is True
    assert r["restored"] == "ok"
    assert r["timeline"] == ["ok", "NVMLError_GpuIsLost", "NVMLError_GpuIsLost", "ok"]


def test_gpu_lost_from_scenario_file(nvmlsim_lib: Path, tmp_path: Path) -> None:
    scenario = {"device_count": 2, "devices": [{}, {"lost": {"after_calls": 1}}]}
    r = scenario_child(nvmlsim_lib, tmp_path, scenario, """
        pynvml.nvmlInit()
        out["handles"] = []
        for i in range(2):
            try:
                h = pynvml.nvmlDeviceGetHandleByIndex(i)
                pynvml.nvmlDeviceGetUUID(h)
                out["handles"].append("ok")
            except pynvml.NVMLError_GpuIsLost:
                out["handles"].append("lost")
    """)
    assert r["handles"] == ["ok", "lost"]


@pytest.mark.parametrize(
    ("init_failure", "expected"),
    [
        ({"code": "DRIVER_NOT_LOADED", "count": 2},
         ["NVMLError_DriverNotLoaded", "NVMLError_DriverNotLoaded", "ok", "ok"]),
        ({"code": "LIB_RM_VERSION_MISMATCH"}, ["NVMLError_LibRmVersionMismatch"] * 4),
    ],
)
def test_init_failures(nvmlsim_lib: Path, tmp_path: Path, init_failure: dict[str, Any],
                       expected: list[str]) -> None:
    r = scenario_child(nvmlsim_lib, tmp_path, {"init_failure": init_failure}, """
        attempts = []
        try:
            pynvml.nvmlDeviceGetCount()
        except pynvml.NVMLError as e:
            out["before"] = type(e).__name__
        for _ in range(4):
            try:
                pynvml.nvmlInit()
                attempts.append("ok")
            except pynvml.NVMLError as e:
                attempts.append(type(e).__name__)
        out["attempts"] = attempts
        out["refcount"] = sim.is_initialized()
    """)
    assert r["attempts"] == expected
    assert r["refcount"] == expected.count("ok")
    # pynvml has not loaded any library before its first init
    assert r["before"] == "NVMLError_Uninitialized"


def test_init_failure_until_a_simulated_time(nvmlsim_lib: Path, tmp_path: Path) -> None:
    scenario = {"clock": "manual", "init_failure": {"code": 9, "until_s": 20}}
    r = scenario_child(nvmlsim_lib, tmp_path, scenario, """
        seq = []
        for t in (0, 19.5, 20):
            sim.set_time(t)
            try:
                pynvml.nvmlInit()
                seq.append("ok")
            except pynvml.NVMLError_DriverNotLoaded:
                seq.append("down")
        out["seq"] = seq
        out["count"] = pynvml.nvmlDeviceGetCount()
    """)
    assert r["seq"] == ["down", "down", "ok"]
    assert r["count"] == 1


def test_processes_for_attribution(nvmlsim_lib: Path, tmp_path: Path) -> None:
    mig = H200_MIG | {"processes": [
        {"pid": 4101, "used_mib": 1000, "gi": 2, "ci": 1},
        {"pid": 4102, "used_mib": 200, "gi": 9, "ci": 0}]}
    plain = {"processes": [
        {"pid": 501, "used_bytes": 123456789, "sm_util": 70, "mem_util": 20},
        {"pid": 502, "used_mib": 10}]}
    r = scenario_child(nvmlsim_lib, tmp_path, {"devices": [mig, plain, {}]}, """
        pynvml.nvmlInit()
        h0, h1, h2 = (pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(3))
        rows = lambda ps: [[p.pid, p.usedGpuMemory, p.gpuInstanceId, p.computeInstanceId]
                           for p in ps]
        out["mig_parent"] = rows(pynvml.nvmlDeviceGetComputeRunningProcesses_v3(h0))
        m1 = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(h0, 1)
        out["mig_ci"] = rows(pynvml.nvmlDeviceGetComputeRunningProcesses_v3(m1))
        out["plain"] = rows(pynvml.nvmlDeviceGetComputeRunningProcesses_v3(h1))
        out["none"] = rows(pynvml.nvmlDeviceGetComputeRunningProcesses_v3(h2))
        samples = pynvml.nvmlDeviceGetProcessUtilization(h1, 0)
        out["util"] = [[s.pid, s.smUtil, s.memUtil] for s in samples]
        latest = max(s.timeStamp for s in samples)
        for h, key, ts in ((h0, "util_mig", 0), (h1, "util_seen", latest + 10**9)):
            try:
                pynvml.nvmlDeviceGetProcessUtilization(h, ts)
            except pynvml.NVMLError as e:
                out[key] = type(e).__name__
    """)
    no = 0xFFFFFFFF
    assert r["mig_parent"] == [[4101, 1000 * MIB, 2, 1], [4102, 200 * MIB, 9, 0]]
    assert r["mig_ci"] == [[4101, 1000 * MIB, 2, 1]]
    assert r["plain"] == [[501, 123456789, no, no], [502, 10 * MIB, no, no]]
    assert r["none"] == []
    assert r["util"] == [[501, 70, 20]]
    assert r["util_mig"] == "NVMLError_NotSupported"
    assert r["util_seen"] == "NVMLError_NotFound"


def test_timed_process_samples_arrive_as_the_clock_reaches_them(nvmlsim_lib: Path,
                                                                tmp_path: Path) -> None:
    scenario = {"clock": "manual", "devices": [{"processes": [
        {"pid": 11, "samples": [{"at_s": 1, "sm_util": 40}, {"at_s": 2, "sm_util": 60,
                                                             "mem_util": 5}]},
        {"pid": 12, "samples": [{"at_s": 2, "sm_util": 10}]},
        {"pid": 13, "sm_util": 99}]}]}
    r = scenario_child(nvmlsim_lib, tmp_path, scenario, """
        pynvml.nvmlInit()
        h = pynvml.nvmlDeviceGetHandleByIndex(0)
        def take(since):
            try:
                got = pynvml.nvmlDeviceGetProcessUtilization(h, since)
            except pynvml.NVMLError_NotFound:
                return since, "NotFound"
            return (max(s.timeStamp for s in got),
                    [[s.pid, s.smUtil, s.memUtil, s.timeStamp - t0] for s in got])
        t0 = pynvml.nvmlDeviceGetProcessUtilization(h, 0)[0].timeStamp  # pid 13, now
        seen, out["at0"] = take(t0)
        sim.set_time(1.5)
        seen, out["at1.5"] = take(seen)
        sim.set_time(2)
        seen, out["at2"] = take(seen)
        seen, out["again"] = take(seen)
        out["from_start"] = take(0)[1]
    """)
    assert r["at0"] == "NotFound"  # pid 13's sample was seen; the timed ones are not due
    assert r["at1.5"] == [[11, 40, 0, 1_000_000], [13, 99, 0, 1_500_000]]
    assert r["at2"] == [[11, 60, 5, 2_000_000], [12, 10, 0, 2_000_000], [13, 99, 0, 2_000_000]]
    assert r["again"] == "NotFound"
    assert r["from_start"] == [[11, 40, 0, 1_000_000], [11, 60, 5, 2_000_000],
                               [12, 10, 0, 2_000_000], [13, 99, 0, 2_000_000]]


def test_call_counts_per_function_and_gpu(nvmlsim_lib: Path, tmp_path: Path) -> None:
    r = scenario_child(nvmlsim_lib, tmp_path, {"devices": [H200_MIG, {}]}, """
        pynvml.nvmlInit()
        sim.reset_call_counts()
        h0, h1 = pynvml.nvmlDeviceGetHandleByIndex(0), pynvml.nvmlDeviceGetHandleByIndex(1)
        for _ in range(3):
            pynvml.nvmlDeviceGetPowerUsage(h1)
        m = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(h0, 5)
        pynvml.nvmlDeviceGetMemoryInfo(m, version=pynvml.nvmlMemory_v2)
        pynvml.nvmlDeviceGetCount()
        out.update(
            power1=sim.call_count("nvmlDeviceGetPowerUsage", gpu=1),
            power0=sim.call_count("nvmlDeviceGetPowerUsage", gpu=0),
            handles=sim.call_count("nvmlDeviceGetHandleByIndex_v2"),
            mem_v2_gpu0=sim.call_count("nvmlDeviceGetMemoryInfo_v2", gpu=0),
            count=sim.call_count("nvmlDeviceGetCount_v2"),
            total=sim.call_count(),
        )
    """)
    assert (r["power1"], r["power0"], r["handles"]) == (3, 0, 2)
    assert r["mem_v2_gpu0"] == 1  # a MIG handle counts for its parent GPU
    assert r["count"] == 1
    assert r["total"] == 2 + 3 + 1 + 1 + 1


def test_bad_scenario_file_names_the_place(nvmlsim_lib: Path, tmp_path: Path) -> None:
    broken = '{"devices": [\n  {"power_w": 100,\n   "powr_limit_w": 700}\n]}'
    r = scenario_child(nvmlsim_lib, tmp_path, broken, """
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as e:
            out["init"] = type(e).__name__
        try:
            sim.load_scenario('{"devices": [{"mig": [{"gi": 1, "profile": "1g.18gb", '
                              '"compute_instances": [{"index": 9}]}]}]}')
        except control.NvmlSimError as e:
            out["mig_error"] = str(e)
        try:
            sim.load_scenario('{"devices": [}')
        except control.NvmlSimError as e:
            out["syntax_error"] = str(e)
    """)
    assert r["init"] == "NVMLError_Unknown"
    stderr = r["_stderr"]
    assert "scenario.json: line 3, column 4: devices[0]" in stderr
    assert 'unknown device key "powr_limit_w"' in stderr
    assert "devices[0].mig[0].compute_instances[0]" in r["mig_error"]
    assert "line 1, column 14" in r["syntax_error"]


def test_child_failure_is_reported(nvmlsim_lib: Path) -> None:
    # the harness must surface a crashing child instead of returning partial results
    with pytest.raises(ChildFailed, match="ZeroDivisionError"):
        run_child(nvmlsim_lib, "1 / 0")


def test_malformed_scenarios_are_rejected_without_harm(nvmlsim_lib: Path) -> None:
    bad = [
        "", "{", '{"devices": [', '{"a": 1,}', '{"devices": "x"}', '{"clock": "fast"}',
        '{"devices": [{"power_w": -5}]}', '{"devices": [{"gpu_util": 1e12}]}',
        '{"devices": [{"name": "' + "x" * 200 + '"}]}', '"\\u00e9"', '{"x": "\\q"}',
        "[" * 100 + "]" * 100, '{"devices": [{"mig": [{"profile": "1g.18gb"}]}]}',
        '{"devices": [{"mig": [{"gi": 1, "profile": "1g.18gb"}, '
        '{"gi": 1, "profile": "1g.18gb"}]}]}',
        '{"device_count": 99}', '{"devices": [{"pci_bus_id": "nope"}]}',
        '{"return_codes": {"nvmlNoSuchThing": 3}}', '{"devices": [{"processes": [{"gi": 1}]}]}',
        '{"devices": [{"processes": [{"pid": 1, "sm_util": 5, "samples": []}]}]}',
        '{"devices": [{"processes": [{"pid": 1, "samples": [{"sm_util": 5}]}]}]}',
        '{"devices": [{"processes": [{"pid": 1, "samples": [{"at_s": 2}, {"at_s": 1}]}]}]}',
        '{"devices": [{"processes": [{"pid": 1, "samples": [{"at_s": 1, "sm_util": 101}]}]}]}',
        '{"xid_events": [{"gpu": 5, "xid": 79}]}', '{"init_failure": {"code": "SOMETIMES"}}',
        '{"hang": {"function": "nvmlNoSuchThing", "for_s": 1}}',
        '{"hang": {"function": "nvmlDeviceGetPowerUsage"}}',
        '{"hang": [{"function": "nvmlDeviceGetPowerUsage", "for_s": 1, "device": 3}]}',
        '{"hang": {"function": "nvmlErrorString", "for_s": 1}}', '{"hang": 5}',
        '{"hang": {"function": "nvmlDeviceGetPowerUsage", "for_s": 1, "gpu": 0}}',
    ]
    r = run_child(nvmlsim_lib, f"""
        bad = {bad!r}
        sim.load_scenario('{{"devices": [{{"name": "Survivor"}}]}}')
        errors = []
        for text in bad:
            try:
                sim.load_scenario(text)
                errors.append(None)
            except control.NvmlSimError as e:
                errors.append(str(e))
        out["errors"] = errors
        pynvml.nvmlInit()
        out["name"] = pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetHandleByIndex(0))
    """)
    assert all(e and e.startswith("scenario: line ") for e in r["errors"]), r["errors"]
    assert any("hang[0]: GPU 3 does not exist" in e for e in r["errors"]), r["errors"]
    # a rejected scenario leaves the default node, never a half-applied one
    assert r["name"] == "NVIDIA H200"


def test_concurrent_callers_share_one_consistent_state(nvmlsim_lib: Path,
                                                       tmp_path: Path) -> None:
    r = scenario_child(nvmlsim_lib, tmp_path, {"device_count": 4}, """
        import threading
        pynvml.nvmlInit()
        handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(4)]
        es = pynvml.nvmlEventSetCreate()
        for h in handles:
            pynvml.nvmlDeviceRegisterEvents(h, pynvml.nvmlEventTypeXidCriticalError, es)
        sim.reset_call_counts()
        got, stop = [], threading.Event()
        def waiter():
            while not stop.is_set():
                try:
                    got.append(pynvml.nvmlEventSetWait_v2(es, 5).eventData)
                except pynvml.NVMLError_Timeout:
                    pass
        def caller(i):
            for _ in range(2000):
                pynvml.nvmlDeviceGetPowerUsage(handles[i])
                pynvml.nvmlDeviceGetMemoryInfo(handles[i], version=pynvml.nvmlMemory_v2)
        w = threading.Thread(target=waiter)
        callers = [threading.Thread(target=caller, args=(i,)) for i in range(4)]
        w.start()
        for t in callers:
            t.start()
        for k in range(50):
            sim.queue_xid(k % 4, 1000 + k)
            sim.set_value(k % 4, "power_w", 100 + k)
        for t in callers:
            t.join(60)
        from tests.support.wait import wait_until
        wait_until(lambda: len(got) >= 50, 10, interval=0.01, what="50 XIDs delivered")
        stop.set()
        w.join(10)
        out["alive"] = [t.is_alive() for t in callers] + [w.is_alive()]
        out["power_calls"] = [sim.call_count("nvmlDeviceGetPowerUsage", gpu=i) for i in range(4)]
        out["xids"] = sorted(got)
    """)
    assert r["alive"] == [False] * 5
    assert r["power_calls"] == [2000] * 4
    assert r["xids"] == list(range(1000, 1050))

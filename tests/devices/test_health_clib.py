"""DCGM_EXP_GPU_HEALTH_STATUS read through the real pynvml from the simulated libnvidia-ml.so.1:
the health reads' ctypes paths (field values by id, the NVLink state per link, the infoROM
check in the return code, an XID event) end in the watches DCGM's rules give."""

from __future__ import annotations

from pathlib import Path

from tests.nvmlsim.harness import run_child, write_scenario

BACKEND = """
from tests.support.wait import wait_until
from exporter.devices.nvml import NvmlBackend
from exporter.fields.csv import parse_collectors
collectors = parse_collectors("DCGM_EXP_GPU_HEALTH_STATUS, gauge, health\\n", "h.csv")
backend = NvmlBackend(pynvml, collectors.specs, clock=sim.time, wall_clock=sim.time)
backend.start()
backend.poll()
# The XID watcher has registered its event set once it waits on it.
wait_until(lambda: sim.call_count("nvmlEventSetWait_v2") > 0, 10, interval=0.005,
           what="the XID watcher waiting on its event set")
sim.advance(2.0)
wait_until(backend.ledger.totals, 10, what="the XID 95 event in the ledger")
readings = backend.poll()
out["health"] = {str(gpu): {i.watch: [i.result, i.code, i.severity, i.category]
                            for i in incidents}
                 for gpu, incidents in readings.health.items()}
out["values"] = [sorted(v) for v in readings.values.values()]
backend.close()
"""

SCENARIO = {
    "clock": "manual",
    "devices": [
        {},  # healthy; its infoROM check answers NOT_SUPPORTED (no value): PASS
        {"ecc_dbe_volatile": 2,
         "calls": {"nvmlDeviceValidateInforom()": 0, "nvmlDeviceGetNvLinkState(2)": 0,
                   "nvmlDeviceGetUnrepairableMemoryFlag_v1().bUnrepairableMemory": 0},
         "fields": {"230": 2}},  # NVML_FI_DEV_GET_GPU_RECOVERY_ACTION: NODE_REBOOT
        {"retired_pages_pending": 1, "fields": {"163": 4},  # NVML_FI_DEV_NVLINK_ERROR_DL_CRC
         "calls": {"nvmlDeviceValidateInforom()": 1}},
    ],
    "xid_events": [{"gpu": 2, "xid": 95, "at_s": 1.0}],
}


def test_health_over_the_real_pynvml(nvmlsim_lib: Path, tmp_path: Path) -> None:
    out = run_child(nvmlsim_lib, BACKEND, scenario_file=write_scenario(tmp_path, SCENARIO))
    health = out["health"]
    assert sorted(health) == ["0", "1", "2"]
    ok = [0, "DCGM_FR_OK", "NONE", "NONE"]
    assert all(v == ok for v in health["0"].values())
    assert health["1"]["MEM"] == [20, "DCGM_FR_VOLATILE_DBE_DETECTED", "ISOLATE",
                                  "HARDWARE_MEMORY"]
    assert health["1"]["INFOROM"] == [10, "DCGM_FR_CORRUPT_INFOROM", "TRIAGE", "HARDWARE_OTHER"]
    assert health["1"]["NVLINK"] == [20, "DCGM_FR_NVLINK_DOWN", "TRIAGE", "HARDWARE_NVLINK"]
    assert health["1"]["DRIVER"] == [20, "DCGM_FR_GPU_RECOVERY_REBOOT", "ISOLATE",
                                     "HARDWARE_OTHER"]
    assert health["2"]["MEM"] == [10, "DCGM_FR_PENDING_PAGE_RETIREMENTS", "RESET",
                                  "HARDWARE_MEMORY"]
    assert health["2"]["NVLINK"] == [20, "DCGM_FR_NVLINK_ERROR_CRITICAL", "ISOLATE",
                                     "HARDWARE_NVLINK"]
    assert health["2"]["ALL"] == [20, "DCGM_FR_UNCONTAINED_ERROR", "ISOLATE", "SOFTWARE_XID"]
    assert health["2"]["INFOROM"] == ok
    for gpu, watches in health.items():
        failing = {"1": {"MEM", "INFOROM", "NVLINK", "DRIVER"},
                   "2": {"MEM", "NVLINK", "ALL"}}.get(gpu, set())
        assert {w for w, v in watches.items() if v != ok} == failing, gpu
    assert out["values"] == [[], [], []]  # the health reads never show as values

"""The NVML backend over the real pynvml over the simulated `libnvidia-ml.so.1`.

Backend tests run in a child process each (a process holds one NVML library for life); the
backend's clock is the simulated clock there, so GPM rates, counters and back-off pauses are
exact. The end-to-end tests start the exporter itself with `--backend nvml`, pointed at the
library by LD_LIBRARY_PATH and at a scenario by NVMLSIM_SCENARIO, and scrape it over HTTP.
Expected values are written from the scenario in NVML's units and converted by hand.
"""

from __future__ import annotations

import json
import signal
import subprocess
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.nvmlsim.harness import child_env, run_child, write_scenario
from tests.support.exporter_process import ExporterProcess
from tests.support.paths import ROOT
from tests.support.wait import wait_until

COLLECTORS = ROOT / "collectors.csv"
MIB = 1 << 20
NO_ID = 0xFFFFFFFF


# The backend in a child: `backend` over pynvml with the simulated clock, `poll()` returning
# JSON-friendly values keyed "gpu,gi".
BACKEND = """
from exporter.devices.nvml import NvmlBackend
from exporter.fields.csv import load_collectors
collectors = load_collectors({csv!r})
backend = NvmlBackend(pynvml, collectors.specs, clock=sim.time)
def poll():
    readings = backend.poll()
    return {{f"{{g}},{{i}}": v for (g, i), v in readings.values.items()}}
def inventory():
    inv = backend.inventory
    return {{
        "gpus": [[e.gpu, e.uuid, e.pci_bus_id, e.device, e.model] for e in inv.gpus],
        "instances": [[e.gpu, e.gpu_instance_id, e.gpu_instance_profile,
                       [[m.uuid, m.compute_instance_id, m.name] for m in e.mig_devices]]
                      for e in inv.instances],
        "driver": inv.driver_version,
    }}
def errors():
    return {{f"{{fn}}:{{code}}": n for (fn, code), n in backend.call_errors.items()}}
"""


def backend_child(lib: Path, tmp_path: Path, scenario: dict[str, Any], code: str,
                  csv: Path = COLLECTORS) -> dict[str, Any]:
    return run_child(lib, BACKEND.format(csv=str(csv)) + textwrap.dedent(code),
                     scenario_file=write_scenario(tmp_path, scenario))


GPM_PERCENT = {"1": 45, "2": 60, "3": 30, "5": 12.5, "10": 70, "11": 1, "12": 20, "13": 8}
GPM_MIB_S = {"20": 100, "21": 50, "60": 2048, "61": 1024}

H100 = {
    "name": "NVIDIA H100 80GB HBM3",
    "uuid": "GPU-7a1c0000-0000-4000-8000-0000000000aa",
    "pci_bus_id": "00000000:9B:00.0",
    "sm_clock_mhz": 1755, "mem_clock_mhz": 2619,
    "temperature_c": 61, "memory_temperature_c": 73,
    "power_w": 312.345, "power_limit_w": 700, "energy_mj": 5_000_000, "pcie_replay": 4,
    "gpu_util": 87, "memory_util": 41, "encoder_util": 3, "decoder_util": 9,
    "memory_total_bytes": 81559 * MIB + 123456,
    "memory_reserved_bytes": 535 * MIB + 999,
    "memory_used_bytes": 1234567891,
    "ecc_sbe_volatile": 11, "ecc_dbe_volatile": 2,
    "remapped_rows_correctable": 6, "remapped_rows_uncorrectable": 1,
    "remap_pending": 1, "remap_failure": 0,
    "nvlink_tx_kib": 5000, "nvlink_rx_kib": 7000,
    "clock_event_reasons": 0x24,
    "gpm": GPM_PERCENT | GPM_MIB_S,
    # NVLink error totals over all links: CRC flit, CRC data, replay, recovery
    "fields": {"38": 12, "45": 3, "52": 7, "59": 1},
}

H200_MIG: dict[str, Any] = {
    "name": "NVIDIA H200",
    "uuid": "GPU-0b3c1f0e-1111-2222-3333-444455556666",
    "pci_bus_id": "00000000:83:00.0",
    "power_w": 78,
    "mig": [
        {"gi": 2, "profile": "3g.71gb", "memory_total_mib": 71424, "memory_used_mib": 22,
         "gpm": {"1": 50, "2": 40},
         "compute_instances": [
             {"index": 0, "ci": 0, "profile": "1c.3g.71gb", "uuid": "MIG-aaaa0000"},
             {"index": 1, "ci": 1, "profile": "2c.3g.71gb", "uuid": "MIG-aaaa0001"}]},
        {"gi": 9, "profile": "1g.18gb", "memory_total_mib": 16384, "memory_used_mib": 9,
         "gpm": {"1": 10, "2": 5},
         "compute_instances": [{"index": 5, "ci": 0, "uuid": "MIG-aaaa0005"}]},
    ],
}


def expected_h100_values(energy_mj: float) -> dict[str, float]:
    """Every default field of collectors.csv for H100 above, in exported units."""
    total, reserved, used = (H100["memory_total_bytes"], H100["memory_reserved_bytes"],
                             H100["memory_used_bytes"])
    assert isinstance(total, int)
    assert isinstance(reserved, int)
    assert isinstance(used, int)
    return {
        "DCGM_FI_DEV_SM_CLOCK": 1755, "DCGM_FI_DEV_MEM_CLOCK": 2619,
        "DCGM_FI_DEV_MEMORY_TEMP": 73, "DCGM_FI_DEV_GPU_TEMP": 61,
        "DCGM_FI_DEV_POWER_USAGE": 312.345,  # mW -> W
        "DCGM_FI_DEV_POWER_MGMT_LIMIT": 700.0,
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": energy_mj,
        "DCGM_FI_DEV_PCIE_REPLAY_COUNTER": 4,
        "DCGM_FI_DEV_GPU_UTIL": 87, "DCGM_FI_DEV_MEM_COPY_UTIL": 41,
        "DCGM_FI_DEV_ENC_UTIL": 3, "DCGM_FI_DEV_DEC_UTIL": 9,
        "DCGM_FI_DEV_XID_ERRORS": 0,  # registered for events, none seen yet
        "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL": 11, "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": 2,
        "DCGM_FI_DEV_CLOCKS_EVENT_REASONS": 0x24,
        # bytes -> MiB, rounded down: 1234567891 B is 1177.38 MiB
        "DCGM_FI_DEV_FB_USED": 1177, "DCGM_FI_DEV_FB_RESERVED": 535,
        "DCGM_FI_DEV_FB_FREE": (total - reserved - used) // MIB,
        "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL": 5000 + 7000,
        "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL": 12,
        "DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL": 3,
        "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL": 7,
        "DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL": 1,
        "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": 1,
        "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS": 6,
        "DCGM_FI_DEV_ROW_REMAP_FAILURE": 0,
        # GPM: percent -> ratio, MiB/s -> bytes/s
        "DCGM_FI_PROF_GR_ENGINE_ACTIVE": 0.45, "DCGM_FI_PROF_SM_ACTIVE": 0.60,
        "DCGM_FI_PROF_SM_OCCUPANCY": 0.30, "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": 0.125,
        "DCGM_FI_PROF_DRAM_ACTIVE": 0.70, "DCGM_FI_PROF_PIPE_FP64_ACTIVE": 0.01,
        "DCGM_FI_PROF_PIPE_FP32_ACTIVE": 0.20, "DCGM_FI_PROF_PIPE_FP16_ACTIVE": 0.08,
        "DCGM_FI_PROF_PCIE_TX_BYTES": 100 * MIB, "DCGM_FI_PROF_PCIE_RX_BYTES": 50 * MIB,
        "DCGM_FI_PROF_NVLINK_RX_BYTES": 2048 * MIB, "DCGM_FI_PROF_NVLINK_TX_BYTES": 1024 * MIB,
    }


# ----------------------------------------------------------------------------- backend


def test_every_default_field_with_its_unit_conversion(nvmlsim_lib: Path, tmp_path: Path) -> None:
    r = backend_child(nvmlsim_lib, tmp_path, {"clock": "manual", "devices": [H100]}, """
        backend.start()
        out["first"] = poll()
        sim.advance(2.0)
        out["second"] = poll()
        out["enabled"] = sorted(f.spec.name for f in collectors.fields)
        out["inventory"] = inventory()
        backend.close()
    """)
    expected = expected_h100_values(5_000_000 + 312345 * 2.0)  # mJ after 2 s at 312.345 W
    # window counts travel separately; the driver version is a label
    series_fields = set(r["enabled"]) - {"DCGM_EXP_XID_ERRORS_COUNT", "DCGM_FI_DRIVER_VERSION"}
    assert series_fields == set(expected), "expectations must cover collectors.csv exactly"
    second = r["second"]["0,-1"]
    assert second == pytest.approx(expected)
    # GPM needs two samples: the first cycle has every other field but no DCGM_FI_PROF_*
    first = r["first"]["0,-1"]
    assert {k for k in expected if k not in first} == {
        k for k in expected if k.startswith("DCGM_FI_PROF_")}
    assert r["inventory"]["gpus"] == [[0, H100["uuid"], "00000000:9B:00.0", "nvidia0",
                                       "NVIDIA H100 80GB HBM3"]]
    assert r["inventory"]["driver"] == "590.48.01"


def test_mig_sparse_indices_and_profile_labels(nvmlsim_lib: Path, tmp_path: Path) -> None:
    r = backend_child(nvmlsim_lib, tmp_path, {"clock": "manual", "devices": [H200_MIG]}, """
        backend.start()
        poll()
        sim.advance(1.0)
        out["values"] = poll()
        out["inventory"] = inventory()
    """)
    inv = r["inventory"]
    assert inv["instances"] == [
        [0, 2, "3g.71gb", [["MIG-aaaa0000", 0, "NVIDIA H200 MIG 1c.3g.71gb"],
                           ["MIG-aaaa0001", 1, "NVIDIA H200 MIG 2c.3g.71gb"]]],
        # 16,384 MiB of framebuffer, yet the profile is 1g.18gb (taken from the name)
        [0, 9, "1g.18gb", [["MIG-aaaa0005", 0, "NVIDIA H200 MIG 1g.18gb"]]],
    ]
    values = r["values"]
    assert set(values) == {"0,-1", "0,2", "0,9"}
    parent, gi2, gi9 = values["0,-1"], values["0,2"], values["0,9"]
    # physical values on the parent only; utilisation does not exist under MIG
    assert parent["DCGM_FI_DEV_POWER_USAGE"] == 78.0
    assert "DCGM_FI_DEV_GPU_UTIL" not in parent
    assert "DCGM_FI_DEV_POWER_USAGE" not in gi2
    # framebuffer and GPM per GPU instance (two compute instances share GI 2's)
    assert (gi2["DCGM_FI_DEV_FB_USED"], gi2["DCGM_FI_DEV_FB_FREE"]) == (22, 71424 - 22)
    assert (gi9["DCGM_FI_DEV_FB_USED"], gi9["DCGM_FI_DEV_FB_FREE"]) == (9, 16384 - 9)
    assert gi2["DCGM_FI_PROF_GR_ENGINE_ACTIVE"] == pytest.approx(0.50)
    assert gi9["DCGM_FI_PROF_SM_ACTIVE"] == pytest.approx(0.05)
    assert "DCGM_FI_PROF_PIPE_FP16_ACTIVE" not in gi9  # the scenario's GI 9 lacks metric 13


def test_mig_profiles_come_from_nvmls_profile_info_through_pynvml(
        nvmlsim_lib: Path, tmp_path: Path) -> None:
    """Real pynvml over the library: one profile lookup per GPU instance at enumeration, and
    NVML's name wins over the MIG device's (as `7g.80gb` over DCGM's `7g.79gb`); the MIG
    device's name when NVML refuses it."""
    device = json.loads(json.dumps(H200_MIG))
    device["mig"][0]["profile"] = "3g.72gb"  # its compute instances keep `...3g.71gb` names
    r = backend_child(nvmlsim_lib, tmp_path, {"clock": "manual", "devices": [device]}, """
        backend.start()
        poll()
        poll()
        out["asked"] = sim.call_count("nvmlDeviceGetGpuInstanceProfileInfoByIdV")
        out["info"] = sim.call_count("nvmlGpuInstanceGetInfo")
        out["instances"] = inventory()["instances"]
    """)
    assert (r["asked"], r["info"]) == (2, 2)
    assert [(i[2], i[3][0][2]) for i in r["instances"]] == [
        ("3g.72gb", "NVIDIA H200 MIG 1c.3g.71gb"), ("1g.18gb", "NVIDIA H200 MIG 1g.18gb")]
    refused = {"clock": "manual", "devices": [device],
               "return_codes": {"nvmlDeviceGetGpuInstanceProfileInfoByIdV": "NOT_SUPPORTED"}}
    r = backend_child(nvmlsim_lib, tmp_path, refused, """
        backend.start()
        poll()
        out["profiles"] = [i[2] for i in inventory()["instances"]]
    """)
    assert r["profiles"] == ["3g.71gb", "1g.18gb"]


B200_MIG: dict[str, Any] = {
    "name": "NVIDIA B200",
    "uuid": "GPU-0b3c1f0e-2222-3333-4444-555566667777",
    "mig": [
        {"gi": 3, "profile": "1g.23gb+me", "memory_total_mib": 23040,
         "compute_instances": [{"index": 0, "uuid": "MIG-dddd0000"}]},
        {"gi": 4, "profile": "1g.23gb+me.all", "memory_total_mib": 23040,
         "compute_instances": [{"index": 1, "uuid": "MIG-dddd0001"}]},
        {"gi": 5, "profile": "2g.45gb+gfx", "memory_total_mib": 45824,
         "compute_instances": [{"index": 2, "uuid": "MIG-dddd0002"}]},
        {"gi": 6, "profile": "2g.45gb-me", "memory_total_mib": 45824,
         "compute_instances": [
             {"index": 3, "ci": 0, "profile": "1c.2g.45gb-me", "uuid": "MIG-dddd0003"},
             {"index": 4, "ci": 1, "profile": "1c.2g.45gb-me", "uuid": "MIG-dddd0004"}]},
        {"gi": 7, "profile": "1g.23gb", "memory_total_mib": 23040,
         "compute_instances": [{"index": 5, "uuid": "MIG-dddd0005"}]},
    ],
}


def test_blackwell_mig_profiles_keep_their_attributes(nvmlsim_lib: Path, tmp_path: Path) -> None:
    r = backend_child(nvmlsim_lib, tmp_path, {"clock": "manual", "devices": [B200_MIG]}, """
        backend.start()
        poll()
        out["inventory"] = inventory()
    """)
    profiles = {gi: profile for _gpu, gi, profile, _migs in r["inventory"]["instances"]}
    # `1g.23gb+me` and `1g.23gb` are different instances: one label value each.
    assert profiles == {3: "1g.23gb+me", 4: "1g.23gb+me.all", 5: "2g.45gb+gfx",
                        6: "2g.45gb-me", 7: "1g.23gb"}


def test_profiling_restricted_to_admins_is_reported(nvmlsim_lib: Path, tmp_path: Path) -> None:
    # RmProfilingAdminOnly=1: GPM support is reported, every GPM sample is refused.
    refused = {"nvmlGpmSampleGet": "NO_PERMISSION", "nvmlGpmMigSampleGet": "NO_PERMISSION"}
    scenario = {"clock": "manual", "devices": [H100, H200_MIG], "return_codes": refused}
    r = backend_child(nvmlsim_lib, tmp_path, scenario, """
        import logging
        warnings = []
        class Collect(logging.Handler):
            def emit(self, record):
                if record.levelno >= logging.WARNING:
                    warnings.append(record.getMessage())
        logging.getLogger("exporter").addHandler(Collect())
        backend.start()
        for _ in range(3):
            values = poll()
            sim.advance(1.0)
        out["values"] = values
        out["support"] = backend.poll().gpm_support
        out["warnings"] = warnings
        out["errors"] = errors()
    """)
    assert r["support"] == {"0": "no_permission", "1": "no_permission"}
    assert not [name for fields in r["values"].values() for name in fields
                if name.startswith("DCGM_FI_PROF_")]
    assert r["values"]["0,-1"]["DCGM_FI_DEV_GPU_TEMP"] == 61  # the rest is unaffected
    (warning,) = r["warnings"]  # once for the node, not once per GPU or poll
    assert "NO_PERMISSION" in warning
    assert "RmProfilingAdminOnly" in warning
    assert "NVreg_RestrictProfilingToAdminUsers=0" in warning
    # one refused attempt per GPU, then GPM is not asked again
    assert r["errors"]["nvmlGpmMetricsGet:NO_PERMISSION"] == 2


def test_reenumeration_after_a_mig_layout_change(nvmlsim_lib: Path, tmp_path: Path) -> None:
    r = backend_child(nvmlsim_lib, tmp_path, {"clock": "manual", "devices": [H200_MIG]}, """
        backend.start()
        poll()
        # slots 0, 1, 5 emptied; one 7g instance in slot 3: old MIG handles turn invalid
        sim.patch_device(0, {"mig": [{"gi": 1, "profile": "7g.141gb",
                                      "memory_used_mib": 100,
                                      "compute_instances": [{"index": 3, "uuid": "MIG-bbbb"}]}]})
        seen = []
        for _ in range(4):
            sim.advance(1.0)
            seen.append(sorted(poll()))
        out["seen"] = seen
        out["after_invalid"] = inventory()["instances"]
        # a rebuild that reuses the same slot with another GPU instance gives no error;
        # the periodic walk finds it
        sim.patch_device(0, {"mig": [{"gi": 5, "profile": "4g.71gb",
                                      "compute_instances": [{"index": 3, "uuid": "MIG-cccc"}]}]})
        sim.advance(61.0)
        poll()
        sim.advance(1.0)
        out["values"] = poll()
        out["after_reuse"] = inventory()["instances"]
    """)
    assert r["seen"][-1] == ["0,-1", "0,1"]
    assert r["after_invalid"] == [[0, 1, "7g.141gb", [["MIG-bbbb", 0, "NVIDIA H200 MIG 7g.141gb"]]]]
    assert r["after_reuse"] == [[0, 5, "4g.71gb", [["MIG-cccc", 0, "NVIDIA H200 MIG 4g.71gb"]]]]
    assert r["values"]["0,5"]["DCGM_FI_DEV_FB_USED"] == 0


def test_unsupported_values_are_omitted_and_not_asked_again(nvmlsim_lib: Path,
                                                            tmp_path: Path) -> None:
    scenario = {"clock": "manual", "device_count": 2, "devices": [
        {"gpm": {"1": 20}, "field_returns": {"82": "NOT_SUPPORTED"}},
        {"return_codes": {"nvmlDeviceGetPowerUsage": "NOT_SUPPORTED",
                          "nvmlDeviceGetPcieReplayCounter": "FUNCTION_NOT_FOUND"},
         "gpm_supported": False},
    ]}
    r = backend_child(nvmlsim_lib, tmp_path, scenario, """
        backend.start()
        poll()
        sim.advance(1.0)
        sim.reset_call_counts()
        out["values"] = poll()
        sim.advance(1.0)
        poll()
        out["calls"] = {fn: [sim.call_count(fn, gpu=g) for g in (0, 1)]
                        for fn in ("nvmlDeviceGetPowerUsage", "nvmlDeviceGetPcieReplayCounter",
                                   "nvmlGpmSampleGet")}
        out["errors"] = errors()
    """)
    gpu0, gpu1 = r["values"]["0,-1"], r["values"]["1,-1"]
    assert "DCGM_FI_DEV_MEMORY_TEMP" not in gpu0
    assert gpu0["DCGM_FI_DEV_GPU_TEMP"] == 34
    assert gpu0["DCGM_FI_PROF_GR_ENGINE_ACTIVE"] == pytest.approx(0.2)
    assert "DCGM_FI_PROF_SM_ACTIVE" not in gpu0  # metric 2 is not in this GPU's set
    assert "DCGM_FI_DEV_POWER_USAGE" not in gpu1
    assert gpu0["DCGM_FI_DEV_POWER_USAGE"] == 120.0
    assert "DCGM_FI_DEV_PCIE_REPLAY_COUNTER" not in gpu1  # FUNCTION_NOT_FOUND: as unsupported
    # without GPM, only the fields NVML measures too: engine and memory activity from the
    # utilisation samples (0 % here), NVLink bytes (no traffic); no PCIe byte counter is set
    assert {k: v for k, v in gpu1.items() if k.startswith("DCGM_FI_PROF_")} == {
        "DCGM_FI_PROF_GR_ENGINE_ACTIVE": 0.0, "DCGM_FI_PROF_DRAM_ACTIVE": 0.0,
        "DCGM_FI_PROF_NVLINK_TX_BYTES": 0.0, "DCGM_FI_PROF_NVLINK_RX_BYTES": 0.0}
    assert gpu1["DCGM_FI_DEV_GPU_TEMP"] == 34
    # remembered: the refused calls are not repeated on later cycles
    assert r["calls"]["nvmlDeviceGetPowerUsage"] == [2, 0]
    assert r["calls"]["nvmlDeviceGetPcieReplayCounter"] == [2, 0]
    assert r["calls"]["nvmlGpmSampleGet"] == [2, 0]
    assert r["errors"]["nvmlDeviceGetPowerUsage:NOT_SUPPORTED"] == 1
    assert r["errors"]["nvmlDeviceGetPcieReplayCounter:FUNCTION_NOT_FOUND"] == 1


def test_gpu_lost_mid_run_and_its_return(nvmlsim_lib: Path, tmp_path: Path) -> None:
    scenario = {"clock": "manual", "device_count": 3, "devices": [{}, {}, H200_MIG]}
    r = backend_child(nvmlsim_lib, tmp_path, scenario, """
        backend.start()
        out["before"] = sorted(poll())
        sim.set_gpu_lost(1, after_calls=5)   # dies in the middle of its next cycle
        sim.set_gpu_lost(2)                  # the MIG GPU, with its instances
        sim.advance(1.0)
        out["during"] = poll()
        out["inventory_during"] = [g[0] for g in inventory()["gpus"]]
        out["lost_total"] = backend.gpus_lost_total
        out["errors"] = errors()
        sim.advance(1.0)
        out["still"] = sorted(poll())
        sim.restore_gpu(1)
        sim.restore_gpu(2)
        after = []
        for _ in range(6):   # back-off pauses grow; bounded number of cycles
            sim.advance(2.0)
            after.append(sorted(poll()))
        out["after"] = after
    """)
    assert r["before"] == ["0,-1", "1,-1", "2,-1", "2,2", "2,9"]
    assert sorted(r["during"]) == ["0,-1"]
    assert r["during"]["0,-1"]["DCGM_FI_DEV_POWER_USAGE"] == 120.0  # others unaffected
    assert r["inventory_during"] == [0]
    assert r["lost_total"] == 2
    assert sum(n for k, n in r["errors"].items() if k.endswith(":GPU_IS_LOST")) >= 2
    assert r["still"] == ["0,-1"]
    assert r["after"][-1] == ["0,-1", "1,-1", "2,-1", "2,2", "2,9"]


def test_driver_not_loaded_at_start_then_recovery(nvmlsim_lib: Path, tmp_path: Path) -> None:
    scenario = {"clock": "manual", "init_failure": {"code": "DRIVER_NOT_LOADED", "count": 2}}
    r = backend_child(nvmlsim_lib, tmp_path, scenario, """
        backend.start()   # must not raise: a driver that is not loaded yet is retried
        out["up_at_start"] = backend.up
        out["init_error"] = backend.last_init_error
        states = []
        for _ in range(5):
            sim.advance(2.5)
            values = poll()
            states.append([backend.up, sorted(values)])
        out["states"] = states
        out["errors"] = errors()
        out["init_calls"] = sim.call_count("nvmlInitWithFlags")
    """)
    assert r["up_at_start"] is False
    assert "DRIVER_NOT_LOADED" in r["init_error"]
    assert r["states"][0] == [False, []]
    assert r["states"][-1] == [True, ["0,-1"]]
    assert r["errors"]["nvmlInit:DRIVER_NOT_LOADED"] == 2
    assert r["init_calls"] == 3  # retried with back-off, not on every cycle


def test_version_mismatch_keeps_retrying_without_raising(nvmlsim_lib: Path,
                                                         tmp_path: Path) -> None:
    scenario = {"clock": "manual", "init_failure": {"code": "LIB_RM_VERSION_MISMATCH"}}
    r = backend_child(nvmlsim_lib, tmp_path, scenario, """
        backend.start()
        for _ in range(3):
            sim.advance(40.0)
            poll()
        out["up"] = backend.up
        out["errors"] = errors()
        names = {f.name: f for f in backend.families()}
        out["nvml_up"] = [s.value for s in names["gpu_exporter_nvml_up"].samples]
    """)
    assert r["up"] is False
    assert r["errors"]["nvmlInit:LIB_RM_VERSION_MISMATCH"] == 4
    assert r["nvml_up"] == [0.0]


def test_handles_are_not_fetched_again_on_every_poll(nvmlsim_lib: Path, tmp_path: Path) -> None:
    scenario = {"clock": "manual", "device_count": 4, "devices": [H200_MIG]}
    r = backend_child(nvmlsim_lib, tmp_path, scenario, """
        backend.start()
        poll()
        sim.reset_call_counts()
        for _ in range(5):
            sim.advance(1.0)
            poll()
        out["calls"] = {fn: sim.call_count(fn) for fn in (
            "nvmlDeviceGetCount_v2", "nvmlDeviceGetHandleByIndex_v2",
            "nvmlDeviceGetMigDeviceHandleByIndex", "nvmlDeviceGetUUID",
            "nvmlDeviceGetPciInfo_v3", "nvmlGpmSampleAlloc")}
        out["power_per_gpu"] = [sim.call_count("nvmlDeviceGetPowerUsage", gpu=g)
                                for g in range(4)]
    """)
    assert r["calls"] == {"nvmlDeviceGetCount_v2": 0, "nvmlDeviceGetHandleByIndex_v2": 0,
                          "nvmlDeviceGetMigDeviceHandleByIndex": 0, "nvmlDeviceGetUUID": 0,
                          "nvmlDeviceGetPciInfo_v3": 0, "nvmlGpmSampleAlloc": 0}
    assert r["power_per_gpu"] == [5, 5, 5, 5]


def test_xid_events_reach_gpu_and_instance(nvmlsim_lib: Path, tmp_path: Path) -> None:
    scenario = {"device_count": 2, "devices": [H200_MIG]}
    r = backend_child(nvmlsim_lib, tmp_path, scenario, """
        import time
        backend.start()
        poll()   # enumerates and starts the event watcher
        sim.queue_xid(0, 79)
        sim.queue_xid(0, 94, gi=9, ci=0)
        sim.queue_xid(1, 13)
        sim.queue_xid(1, 13)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            readings = backend.poll()
            if sum(c.count for c in readings.xid_window) >= 4:
                break
            time.sleep(0.05)
        out["window"] = sorted([list(c.entity_key), c.xid, c.count]
                               for c in readings.xid_window)
        out["last"] = {f"{g},{i}": v.get("DCGM_FI_DEV_XID_ERRORS")
                       for (g, i), v in readings.values.items()}
        backend.close()
        out["after_close"] = sim.is_initialized()
    """)
    assert r["window"] == [[[0, -1], 79, 1], [[0, 9], 94, 1], [[1, -1], 13, 2]]
    assert r["last"] == {"0,-1": 79, "0,2": 0, "0,9": 94, "1,-1": 13}
    assert r["after_close"] == 0


def test_node_with_driver_but_no_gpus(nvmlsim_lib: Path, tmp_path: Path) -> None:
    r = backend_child(nvmlsim_lib, tmp_path, {"device_count": 0}, """
        backend.start()
        out["values"] = poll()
        out["up"] = backend.up
        out["gpus"] = inventory()["gpus"]
    """)
    assert r == {"values": {}, "up": True, "gpus": [], "_stderr": r["_stderr"]}


# ----------------------------------------------------------------------------- end to end


def scrape(proc: ExporterProcess) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of /metrics by (name, sorted labels)."""
    samples = {}
    for family in text_string_to_metric_families(proc.metrics()):
        for s in family.samples:
            samples[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return samples


def find(samples: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str,
         **labels: str) -> list[tuple[dict[str, str], float]]:
    return [(dict(lab), v) for (n, lab), v in samples.items()
            if n == name and all(dict(lab).get(k) == want for k, want in labels.items())]


def wait_for(proc: ExporterProcess, predicate: Callable[[Any], bool],
             timeout: float = 20.0) -> Any:
    last: list[Any] = []

    def satisfied() -> Any:
        last[:] = [scrape(proc)]
        return last[0] if predicate(last[0]) else None

    try:
        return wait_until(satisfied, timeout, interval=0.1)
    except AssertionError:
        raise AssertionError(f"condition not met within {timeout}s; last scrape:\n"
                             + "\n".join(f"{k} {v}" for k, v in sorted(last[0].items()))
                             ) from None


def start_exporter(exporter: type[ExporterProcess], lib: Path, scenario_file: Path,
                   *args: str) -> ExporterProcess:
    env = child_env(lib, scenario_file)
    proc = exporter(["--backend", "nvml", "-c", "200ms", "--no-hostname", *args], env)
    proc.wait_http()
    return proc


def test_exporter_serves_the_simulated_node(nvmlsim_lib: Path, tmp_path: Path,
                                            exporter: type[ExporterProcess]) -> None:
    scenario = {"devices": [H100, H200_MIG],
                "xid_events": [{"gpu": 1, "xid": 48, "gi": 9, "ci": 0, "at_s": 3.0}]}
    proc = start_exporter(exporter, nvmlsim_lib, write_scenario(tmp_path, scenario))
    samples = wait_for(proc, lambda s: bool(find(s, "DCGM_FI_PROF_GR_ENGINE_ACTIVE", gpu="0")))
    power = find(samples, "DCGM_FI_DEV_POWER_USAGE", gpu="0")
    assert len(power) == 1
    labels, value = power[0]
    assert value == pytest.approx(312.345)
    assert labels["UUID"] == H100["uuid"]
    assert labels["pci_bus_id"] == "00000000:9B:00.0"
    assert labels["device"] == "nvidia0"
    assert labels["modelName"] == "NVIDIA H100 80GB HBM3"
    assert labels["DCGM_FI_DRIVER_VERSION"] == "590.48.01"
    assert find(samples, "DCGM_FI_DEV_FB_USED", gpu="0")[0][1] == 1177
    assert find(samples, "DCGM_FI_PROF_GR_ENGINE_ACTIVE", gpu="0")[0][1] == pytest.approx(0.45)
    # MIG: one FB series per GPU instance, with the profile from the device name
    fb = {(lab["GPU_I_ID"], lab["GPU_I_PROFILE"]): v
          for lab, v in find(samples, "DCGM_FI_DEV_FB_USED", gpu="1") if "GPU_I_ID" in lab}
    assert fb == {("2", "3g.71gb"): 22, ("9", "1g.18gb"): 9}
    assert find(samples, "DCGM_FI_DEV_GPU_UTIL", gpu="1") == []
    assert find(samples, "gpu_exporter_nvml_up")[0][1] == 1
    # the scenario's XID 48 on GPU instance 9 arrives through the real event wait
    samples = wait_for(proc, lambda s: any(
        v == 48 for _, v in find(s, "DCGM_FI_DEV_XID_ERRORS", gpu="1", GPU_I_ID="9")))
    counts = find(samples, "DCGM_EXP_XID_ERRORS_COUNT", gpu="1", GPU_I_ID="9", xid="48")
    assert [v for _, v in counts] == [1]


def test_exporter_rides_out_driver_and_gpu_faults(nvmlsim_lib: Path, tmp_path: Path,
                                                  exporter: type[ExporterProcess]) -> None:
    scenario = {"device_count": 2,
                "init_failure": {"code": "DRIVER_NOT_LOADED", "until_s": 1.5},
                "devices": [{}, {"lost": {"at_s": 4.0, "for_s": 2.0}}]}
    proc = start_exporter(exporter, nvmlsim_lib, write_scenario(tmp_path, scenario))
    # NVML is down at start (the first nvmlInit always fails): served, not crashed
    scrape(proc)
    assert proc.proc.poll() is None
    wait_for(proc, lambda s: len(find(s, "DCGM_FI_DEV_GPU_TEMP")) == 2)
    # GPU 1 falls off at 4 s: its series go, GPU 0's stay
    lost = wait_for(proc, lambda s: not find(s, "DCGM_FI_DEV_GPU_TEMP", gpu="1"))
    assert len(find(lost, "DCGM_FI_DEV_GPU_TEMP", gpu="0")) == 1
    errors = find(lost, "gpu_exporter_nvml_errors_total")
    assert any(lab.get("code") == "GPU_IS_LOST" and v >= 1 for lab, v in errors)
    init_errors = [v for lab, v in errors
                   if lab.get("function") == "nvmlInit" and lab.get("code") == "DRIVER_NOT_LOADED"]
    assert init_errors
    assert init_errors[0] >= 1
    # back at 6 s, picked up again without a restart
    wait_for(proc, lambda s: len(find(s, "DCGM_FI_DEV_GPU_TEMP")) == 2, timeout=40)
    assert proc.proc.poll() is None


def test_a_hung_driver_call_holds_neither_scrapes_nor_exit(nvmlsim_lib: Path, tmp_path: Path,
                                                           exporter: type[ExporterProcess]
                                                           ) -> None:
    # GPU 1's power call blocks for 120 s from 2 s after nvmlInit; the lock stays free
    scenario = {"device_count": 2,
                "hang": {"function": "nvmlDeviceGetPowerUsage", "device": 1, "at_s": 2.0,
                         "for_s": 120.0}}
    proc = start_exporter(exporter, nvmlsim_lib, write_scenario(tmp_path, scenario),
                          "-c", "500ms")
    assert "every 0.5s" in proc.output()
    samples = wait_for(proc, lambda s: len(find(s, "DCGM_FI_DEV_POWER_USAGE")) == 2)
    good = sorted((lab["gpu"], v) for lab, v in find(samples, "DCGM_FI_DEV_POWER_USAGE"))
    assert good == [("0", 120.0), ("1", 120.0)]

    def stuck_polls(s: Any) -> float:
        return sum(v for lab, v in find(s, "gpu_exporter_poll_errors_total")
                   if lab.get("reason") in ("deadline", "busy"))

    # the poll is stuck in the driver: the failures are counted in the served body ...
    samples = wait_for(proc, lambda s: stuck_polls(s) > 0)
    # ... and /metrics still answers 200 (proc.metrics checks) with the last good series
    for _ in range(3):
        samples = scrape(proc)
        assert sorted((lab["gpu"], v) for lab, v in
                      find(samples, "DCGM_FI_DEV_POWER_USAGE")) == good
        assert len(find(samples, "DCGM_FI_DEV_GPU_TEMP")) == 2
    assert stuck_polls(samples) > 0
    # /ready goes stale after 3 intervals without a fresh poll
    def ready_is_stale() -> tuple[int, bytes] | None:
        status, _, body = proc.get("/ready")
        return (status, body) if status == 503 and b"stale" in body else None

    status, body = wait_until(ready_is_stale, timeout=15, interval=0.1, what="/ready stale")
    assert status == 503, body
    assert b"stale: last successful poll" in body, body
    assert b"(limit 1.5s)" in body, body
    assert proc.proc.poll() is None
    # the call is still blocked (120 s): SIGTERM must end the process anyway
    proc.proc.send_signal(signal.SIGTERM)
    try:
        proc.proc.wait(10)
    except subprocess.TimeoutExpired:
        pytest.fail("exporter did not exit within 10 s of SIGTERM while a driver call "
                    f"was stuck; its output:\n{proc.output()}")
    assert proc.proc.returncode == 0, proc.output()

"""Hand-written promtool cases: for every alert, series that must fire it and series that
must not. Expected labels are spelled out here, not computed from the generator."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

NODE = {"instance": "node-a:9400", "job": "gpu-exporter"}
GPU0 = {**NODE, "gpu": "0", "UUID": "GPU-0a1b", "pci_bus_id": "00000000:18:00.0",
        "device": "nvidia0", "modelName": "NVIDIA H200", "Hostname": "node-a"}
MIG3 = {**GPU0, "gpu": "3", "UUID": "GPU-3c4d", "device": "nvidia3",
        "pci_bus_id": "00000000:9A:00.0", "GPU_I_PROFILE": "3g.71gb", "GPU_I_ID": "2"}


def series(name: str, labels: dict[str, str]) -> str:
    inner = ", ".join(f'{k}="{v}"' for k, v in labels.items())
    return f"{name}{{{inner}}}"


@dataclass(frozen=True)
class Case:
    alert: str
    inputs: list[tuple[str, str]]
    eval_time: str
    expected: list[dict[str, str]] = field(default_factory=list)
    """Label sets of the alerts that must be firing; empty = must stay quiet."""

    def promtool_test(self) -> dict[str, Any]:
        return {
            "interval": "1m",
            "input_series": [{"series": s, "values": v} for s, v in self.inputs],
            "alert_rule_test": [{
                "eval_time": self.eval_time,
                "alertname": self.alert,
                "exp_alerts": [{"exp_labels": labels} for labels in self.expected],
            }],
        }


def _xid(code: str, gpu: dict[str, str] = GPU0) -> dict[str, str]:
    return {**gpu, "xid": code}


XID = "gpu_exporter_xid_errors_total"
ALLOC = "gpu_exporter_pod_gpu_allocation"
GR_ENGINE, UTIL = "DCGM_FI_PROF_GR_ENGINE_ACTIVE", "DCGM_FI_DEV_GPU_UTIL"
GPU1 = {**GPU0, "gpu": "1", "UUID": "GPU-1e2f", "device": "nvidia1",
        "pci_bus_id": "00000000:2A:00.0"}
SOLO = {"namespace": "ml", "pod": "train-0", "container": "main"}
POD_A = {**NODE, "gpu": "1", "UUID": "GPU-1e2f", "namespace": "lab", "pod": "nb-a",
         "container": "notebook", "resource": "nvidia.com/gpu", "replica": "0"}
POD_B = {**POD_A, "pod": "nb-b", "replica": "1"}
A100_0, A100_1 = ({**gpu, "modelName": "NVIDIA A100-SXM4-80GB"} for gpu in (GPU0, GPU1))


def _held(gpu: dict[str, str]) -> dict[str, str]:
    """The device labels GpuIdleButAllocated keeps."""
    return {"instance": gpu["instance"], "UUID": gpu["UUID"], "Hostname": gpu["Hostname"],
            "gpu": gpu["gpu"], "severity": "info"}


def _holder(p: dict[str, str]) -> dict[str, str]:
    return {"namespace": p["namespace"], "pod": p["pod"], "container": p["container"]}


FAULT = "gpu_exporter_gpu_fault"
XID95 = {**NODE, "gpu": "0", "UUID": "GPU-0a1b", "source": "xid", "code": "95",
         "name": "ROBUST_CHANNEL_UNCONTAINED_ERROR", "action": "RESET_GPU", "fatal": "true",
         "cleared_by": "gpu-reset"}
XID79 = {**XID95, "code": "79", "name": "ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS",
         "action": "RESTART_BM", "cleared_by": "reboot"}
THERMAL = {**XID95, "source": "health", "code": "DCGM_FR_TEMP_VIOLATION",
           "name": "DCGM_FR_TEMP_VIOLATION", "action": "CHECK_THERMALS", "fatal": "false",
           "cleared_by": "health-pass"}
XID13_GPU1 = {**NODE, "gpu": "1", "UUID": "GPU-1e2f", "source": "xid", "code": "13",
              "name": "ROBUST_CHANNEL_GR_EXCEPTION / ROBUST_CHANNEL_GR_ERROR_SW_NOTIFY",
              "action": "RESTART_APP", "fatal": "false", "cleared_by": "holder-exit"}
XID13_GPU0 = {**XID13_GPU1, "gpu": "0", "UUID": "GPU-0a1b"}
XID31_GPU1 = {**XID13_GPU1, "code": "31", "name": "ROBUST_CHANNEL_FIFO_ERROR_MMU_ERR_FLT"}
XID13_GPU2 = {**XID13_GPU1, "gpu": "2", "UUID": "GPU-2f"}
PAGE_NODE = {"severity": "page", "owner": "node"}
TO_WORKLOAD = {"severity": "warning", "owner": "workload"}


def _app(gpu: str, uuid: str, holder: dict[str, str] | None = None) -> dict[str, str]:
    """The labels GpuFaultApplication keeps: the GPU, and the holder's pod if known."""
    pod = {} if holder is None else {k: holder[k] for k in ("namespace", "pod", "container")}
    return {"instance": NODE["instance"], "UUID": uuid, "gpu": gpu, **pod, **TO_WORKLOAD}


CASES: list[Case] = [
    # Held faults, routed by what clears them: a reset or a reboot pages the node's owner.
    Case("GpuFaultNeedsReset", [(series(FAULT, XID95), "1x10")], "5m",
         [{**XID95, **PAGE_NODE}]),
    Case("GpuFaultNeedsReset", [(series(FAULT, XID79), "1x10"),
                                (series(FAULT, XID95), "1x3 _x12")], "10m"),
    Case("GpuFaultNeedsReboot", [(series(FAULT, XID79), "1x10")], "5m",
         [{**XID79, **PAGE_NODE}]),
    Case("GpuFaultNeedsReboot", [(series(FAULT, XID95), "1x10")], "5m"),
    Case("GpuFaultHealthCheck", [(series(FAULT, THERMAL), "1x20")], "15m",
         [{**THERMAL, "severity": "warning", "owner": "node"}]),
    Case("GpuFaultHealthCheck", [(series(FAULT, THERMAL), "1x5 _x20")], "15m"),
    # An application fault goes to each pod holding the GPU: GPU 1 time-sliced between two
    # pods (allocation rows; two codes held still make one alert per pod), GPU 0 held
    # exclusively (its series carry the pod), GPU 2 held by no known pod (no pod labels).
    Case("GpuFaultApplication",
         [(series(FAULT, XID13_GPU1), "1x10"), (series(FAULT, XID31_GPU1), "1x10"),
          (series(ALLOC, POD_A), "1x10"), (series(ALLOC, POD_B), "1x10"),
          (series(FAULT, XID13_GPU0), "1x10"),
          (series("DCGM_FI_DEV_FB_USED", {**GPU0, **SOLO}), "1000x10"),
          (series(FAULT, XID13_GPU2), "1x10")], "5m",
         [_app("1", "GPU-1e2f", POD_A), _app("1", "GPU-1e2f", POD_B),
          _app("0", "GPU-0a1b", SOLO), _app("2", "GPU-2f")]),
    # A reset fault on a held GPU is the node's, not the workload's; a cleared one is quiet.
    Case("GpuFaultApplication",
         [(series(FAULT, XID95), "1x10"), (series(ALLOC, POD_A), "1x10"),
          (series("DCGM_FI_DEV_FB_USED", {**GPU0, **SOLO}), "1000x10"),
          (series(FAULT, XID13_GPU1), "1x3 _x12")], "10m"),

    # Exporter health.
    Case("GpuExporterDown", [(series("up", NODE), "0x10")], "6m",
         [{**NODE, "severity": "warning"}]),
    Case("GpuExporterDown", [(series("up", NODE), "0 0 0 1x10"),
                             (series("up", {**NODE, "job": "node-exporter"}), "0x10")], "6m"),
    Case("GpuExporterCollectionStale",
         [(series("gpu_exporter_last_poll_success_timestamp_seconds", NODE), "0x10")], "7m",
         [{**NODE, "severity": "warning"}]),
    Case("GpuExporterCollectionStale",
         [(series("gpu_exporter_last_poll_success_timestamp_seconds", NODE), "0+60x10")], "7m"),
    Case("GpuExporterNvmlDown", [(series("gpu_exporter_nvml_up", NODE), "0x10")], "6m",
         [{**NODE, "severity": "critical"}]),
    Case("GpuExporterNvmlDown", [(series("gpu_exporter_nvml_up", NODE), "0 0 1x10")], "6m"),
    Case("GpuExporterKubeletUnreachable", [(series("gpu_exporter_kubelet_up", NODE), "0x15")],
         "12m", [{**NODE, "severity": "warning"}]),
    Case("GpuExporterKubeletUnreachable",
         [(series("gpu_exporter_kubelet_up", NODE), "0x5 1x10")], "12m"),
    # XID tiers: a first event (series born at 1) and a later one (counter grows) both fire;
    # other tiers' codes and events older than the window do not.
    Case("GpuFellOffTheBus", [(series(XID, _xid("79")), "_x4 1x10")], "6m",
         [{**_xid("79"), "severity": "critical"}]),
    Case("GpuFellOffTheBus", [(series(XID, _xid("79")), "1x20 2x10")], "25m",
         [{**_xid("79"), "severity": "critical"}]),
    Case("GpuFellOffTheBus", [(series(XID, _xid("79")), "1x30"),
                              (series(XID, _xid("13")), "_x4 1x10")], "25m"),
    Case("GpuCriticalXid", [(series(XID, _xid("48")), "_x4 1x10")], "6m",
         [{**_xid("48"), "severity": "critical"}]),
    Case("GpuCriticalXid", [(series(XID, _xid("79")), "_x4 1x10"),
                            (series(XID, _xid("43")), "_x4 1x10")], "6m"),
    Case("GpuNvlinkError", [(series(XID, _xid("74")), "0x3 1x10")], "6m",
         [{**_xid("74"), "severity": "critical"}]),
    Case("GpuNvlinkError", [(series(XID, _xid("74")), "1x30")], "25m"),
    Case("GpuContainedEccXid", [(series(XID, _xid("94", MIG3)), "_x4 1x10")], "6m",
         [{**_xid("94", MIG3), "severity": "warning"}]),
    Case("GpuContainedEccXid", [(series(XID, _xid("13", MIG3)), "_x4 1x10")], "6m"),
    Case("GpuResetRecommendedXid", [(series(XID, _xid("63")), "_x4 1x10")], "6m",
         [{**_xid("63"), "severity": "info"}]),
    Case("GpuResetRecommendedXid", [(series(XID, _xid("63")), "2x30")], "25m"),
    # A GPU disappearing.
    Case("GpuLost", [(series("gpu_exporter_devices", {**NODE, "kind": "gpu"}), "8x5 7x10")],
         "8m", [{**NODE, "severity": "critical"}]),
    # Both signals at once make one alert, not two.
    Case("GpuLost", [(series("gpu_exporter_devices", {**NODE, "kind": "gpu"}), "8x5 7x10"),
                     (series("gpu_exporter_gpu_lost_total", NODE), "0x5 1x10")],
         "8m", [{**NODE, "severity": "critical"}]),
    Case("GpuLost", [(series("gpu_exporter_gpu_lost_total", NODE), "0x3 1x10")], "6m",
         [{**NODE, "severity": "critical"}]),
    Case("GpuLost", [(series("gpu_exporter_devices", {**NODE, "kind": "gpu"}), "8x20"),
                     (series("gpu_exporter_devices", {**NODE, "kind": "mig"}), "7x5 5x15"),
                     (series("gpu_exporter_gpu_lost_total", NODE), "0x20")], "15m"),
    # Memory errors.
    Case("GpuUncorrectableEccErrors",
         [(series("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", GPU0), "0x3 2x10")], "5m",
         [{**GPU0, "severity": "critical"}]),
    Case("GpuUncorrectableEccErrors",
         [(series("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", GPU0), "3x20")], "15m"),
    Case("GpuRowRemapFailure", [(series("DCGM_FI_DEV_ROW_REMAP_FAILURE", GPU0), "0 1x10")],
         "5m", [{**GPU0, "severity": "critical"}]),
    Case("GpuRowRemapFailure", [(series("DCGM_FI_DEV_ROW_REMAP_FAILURE", GPU0), "0x10")], "5m"),
    Case("GpuRowRemapPending", [(series("DCGM_FI_DEV_ROW_REMAP_PENDING", GPU0), "1x10")], "7m",
         [{**GPU0, "severity": "warning"}]),
    Case("GpuRowRemapPending", [(series("DCGM_FI_DEV_ROW_REMAP_PENDING", GPU0), "0x10")],
         "7m"),
    # Clock event reason bits: 0x40 HW thermal, 0x80 power brake, 0x20 SW thermal, 0x1 idle.
    Case("GpuHwThermalSlowdown",
         [(series("DCGM_FI_DEV_CLOCKS_EVENT_REASONS", GPU0), "65x10")], "5m",
         [{**GPU0, "severity": "warning"}]),
    Case("GpuHwThermalSlowdown",
         [(series("DCGM_FI_DEV_CLOCKS_EVENT_REASONS", GPU0), "160x10")], "5m"),
    Case("GpuPowerBrake", [(series("DCGM_FI_DEV_CLOCKS_EVENT_REASONS", GPU0), "129x10")], "5m",
         [{**GPU0, "severity": "warning"}]),
    Case("GpuPowerBrake", [(series("DCGM_FI_DEV_CLOCKS_EVENT_REASONS", GPU0), "96x10")], "5m"),
    Case("GpuTemperatureNearLimit", [(series("DCGM_FI_DEV_GPU_TEMP", GPU0), "86x15")], "12m",
         [{**GPU0, "severity": "warning"}]),
    Case("GpuTemperatureNearLimit", [(series("DCGM_FI_DEV_GPU_TEMP", GPU0), "84x15")], "12m"),
    Case("GpuMemoryTemperatureNearLimit",
         [(series("DCGM_FI_DEV_MEMORY_TEMP", GPU0), "96x15")], "12m",
         [{**GPU0, "severity": "warning"}]),
    Case("GpuMemoryTemperatureNearLimit",
         [(series("DCGM_FI_DEV_MEMORY_TEMP", GPU0), "90x15")], "12m"),
    # NVLink error counters: a retrained link, or CRC / replay errors past 100 per 10 minutes
    # (here 50 a minute), fire; a few CRC errors and an old recovery count do not.
    Case("GpuNvlinkErrorsGrowing",
         [(series("DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL", GPU0), "0+50x20")], "15m",
         [{**GPU0, "severity": "warning"}]),
    Case("GpuNvlinkErrorsGrowing",
         [(series("DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL", GPU1), "0x5 1x10")], "12m",
         [{**GPU1, "severity": "warning"}]),
    Case("GpuNvlinkErrorsGrowing",
         [(series("DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL", GPU0), "0+5x20"),
          (series("DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL", GPU0), "0+2x20"),
          (series("DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL", GPU0), "3x20")], "15m"),
    # Capacity.
    Case("GpuFramebufferNearFull", [(series("DCGM_FI_DEV_FB_USED", MIG3), "69000x10"),
                                    (series("DCGM_FI_DEV_FB_FREE", MIG3), "2000x10")], "7m",
         [{**MIG3, "severity": "warning"}]),
    Case("GpuFramebufferNearFull", [(series("DCGM_FI_DEV_FB_USED", MIG3), "60000x10"),
                                    (series("DCGM_FI_DEV_FB_FREE", MIG3), "11000x10")], "7m"),
    Case("GpuPcieReplayErrors",
         [(series("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", GPU0), "0+20x30")], "25m",
         [{**GPU0, "severity": "warning"}]),
    Case("GpuPcieReplayErrors",
         [(series("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", GPU0), "0+5x30")], "25m"),
    # Idle held devices: GPU 0 held exclusively (its own series carry the pod), GPU 1
    # time-sliced between two pods (unlabelled series plus one allocation row per pod).
    Case("GpuIdleButAllocated",
         [(series("DCGM_FI_PROF_GR_ENGINE_ACTIVE", {**GPU0, **SOLO}), "0.01x50"),
          (series("DCGM_FI_PROF_GR_ENGINE_ACTIVE", GPU1), "0.02x50"),
          (series(ALLOC, POD_A), "1x50"), (series(ALLOC, POD_B), "1x50")], "40m",
         [{**_held(GPU0), **SOLO}, {**_held(GPU1), **_holder(POD_A)},
          {**_held(GPU1), **_holder(POD_B)}]),
    # Busy held devices, and an idle GPU nobody holds, stay quiet; so does a short dip.
    Case("GpuIdleButAllocated",
         [(series("DCGM_FI_PROF_GR_ENGINE_ACTIVE", {**GPU0, **SOLO}), "0.01x10 0.6x40"),
          (series("DCGM_FI_PROF_GR_ENGINE_ACTIVE", GPU1), "0.5x50"),
          (series("DCGM_FI_PROF_GR_ENGINE_ACTIVE", {**GPU0, "gpu": "2", "UUID": "GPU-2f"}),
           "0x50"),
          (series(ALLOC, POD_A), "1x50"), (series(ALLOC, POD_B), "1x50")], "40m"),
    # Before Hopper (no GPM): NVML utilisation, in percent, says the same.
    Case("GpuIdleButAllocated",
         [(series(UTIL, {**A100_0, **SOLO}), "1x50"), (series(UTIL, A100_1), "2x50"),
          (series(ALLOC, POD_A), "1x50"), (series(ALLOC, POD_B), "1x50")], "40m",
         [{**_held(A100_0), **SOLO}, {**_held(A100_1), **_holder(POD_A)},
          {**_held(A100_1), **_holder(POD_B)}]),
    Case("GpuIdleButAllocated",
         [(series(UTIL, {**A100_0, **SOLO}), "1x10 60x40"), (series(UTIL, A100_1), "50x50"),
          (series(ALLOC, POD_A), "1x50"), (series(ALLOC, POD_B), "1x50")], "40m"),
    # A GPU serving both is read from GPM alone: idle by GPM, busy by NVML, it fires once;
    # busy by GPM, idle by NVML, it stays quiet.
    Case("GpuIdleButAllocated",
         [(series(GR_ENGINE, {**GPU0, **SOLO}), "0.01x50"),
          (series(UTIL, {**GPU0, **SOLO}), "60x50")], "40m", [{**_held(GPU0), **SOLO}]),
    Case("GpuIdleButAllocated",
         [(series(GR_ENGINE, {**GPU0, **SOLO}), "0.6x50"),
          (series(UTIL, {**GPU0, **SOLO}), "1x50")], "40m"),
]

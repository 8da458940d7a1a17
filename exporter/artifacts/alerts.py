"""Prometheus alert rules for GPU failures that matter, and for the exporter itself.

Every rule names the fields it reads; a rule over a field the collectors CSV does not enable
is left out (it could never fire). XIDs are counted with the per-code counter
`gpu_exporter_xid_errors_total`, not the last-code gauge `DCGM_FI_DEV_XID_ERRORS`, which
stays at its last value forever.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from exporter.artifacts.dashboards.spec import HOST
from exporter.artifacts.fieldset import FieldSet
from exporter.artifacts.xid_tiers import XidTiers
from exporter.promql.measures import GR_ENGINE

NODE = "{{ or $labels.hostname $labels.Hostname }}"
"""The node under either label name: dcgm-exporter 4.8.3 and later (and this exporter by
default) write `hostname`, 4.8.2 and earlier `Hostname`; a missing one reads empty."""
GPU = f"GPU {{{{ $labels.gpu }}}} ({{{{ $labels.UUID }}}}) on {NODE}"
EXPORTER = "gpu-exporter {{ $labels.instance }}"
DEVICE = "instance, UUID, GPU_I_ID"


@dataclass(frozen=True, slots=True)
class AlertConfig:
    """The thresholds and windows the alert rules are generated with, and which XID codes page
    under which tier; `gpu-exporter generate` sets the tiers and the scrape-job pattern."""

    xid: XidTiers = field(default_factory=XidTiers)
    job_regex: str = ".*(gpu|dcgm)-exporter.*"
    """Scrape jobs whose `up` series belong to GPU exporters."""
    stale_after_s: int = 180
    fb_full_ratio: float = 0.95
    gpu_temp_c: int = 85
    memory_temp_c: int = 95
    pcie_replays_per_10m: int = 100
    nvlink_errors_per_10m: int = 100
    """CRC (flit or data) or replay errors over all links of a GPU; any recovery counts."""
    idle_ratio: float = 0.05
    idle_for: str = "30m"
    xid_window: str = "10m"


@dataclass(frozen=True, slots=True)
class Alert:
    """One alert rule as generated: its PromQL, how long it must hold before it fires, its
    severity, the text it is sent with, and the rule group it belongs to."""

    name: str
    expr: str
    for_: str
    severity: str
    summary: str
    description: str
    group: str
    owner: str | None = None
    """Who the alert goes to, as an `owner` label for Alertmanager's routes: `node` (whoever
    runs the node) or `workload` (the pod's team); None: no label."""

    def rule(self) -> dict[str, Any]:
        """Return the alert as one entry of a Prometheus rule group, with its severity (and
        owner, when set) as labels and its summary and description as annotations."""
        labels = {"severity": self.severity}
        if self.owner is not None:
            labels["owner"] = self.owner
        return {
            "alert": self.name,
            "expr": self.expr,
            "for": self.for_,
            "labels": labels,
            "annotations": {"summary": self.summary, "description": self.description},
        }


def grew(series: str, window: str) -> str:
    """Return True per series when a counter went up within `window`.

    `increase()` cannot see the first increment of a series that is born with value 1 (an
    XID code seen for the first time), so a series that was absent `window` ago and is now
    above zero counts as grown too.
    """
    return (f"increase({series}[{window}]) > 0\nor\n"
            f"({series} > 0 unless {series} offset {window})")


def _codes(codes: tuple[int, ...]) -> str:
    return "|".join(str(c) for c in codes)


def _xid(codes: tuple[int, ...], window: str) -> str:
    return grew(f'gpu_exporter_xid_errors_total{{xid=~"{_codes(codes)}"}}', window)


def _bit(value: int) -> str:
    return f"floor(DCGM_FI_DEV_CLOCKS_EVENT_REASONS / {value}) % 2 == 1"


def _exporter_alerts(c: AlertConfig) -> list[Alert]:
    g = "gpu-exporter.exporter"
    return [
        Alert("GpuExporterDown", f'up{{job=~"{c.job_regex}"}} == 0', "5m", "warning",
              f"{EXPORTER} cannot be scraped",
              "Prometheus has not scraped this GPU exporter for 5 minutes, so GPU failures on "
              "its node go unseen. Check the exporter pod's status and logs on that node, "
              "its Service/ServiceMonitor endpoints, and NetworkPolicies.", g),
        Alert("GpuExporterCollectionStale",
              f"time() - gpu_exporter_last_poll_success_timestamp_seconds > {c.stale_after_s}",
              "2m", "warning", f"{EXPORTER} serves stale GPU data",
              f"The last successful NVML poll is more than {c.stale_after_s}s old: the values "
              "on /metrics no longer move. Look at gpu_exporter_poll_errors_total{reason} and "
              "the exporter logs; a hung driver call usually needs the exporter pod "
              "restarted, a hung driver the node rebooted.", g),
        Alert("GpuExporterNvmlDown", "gpu_exporter_nvml_up == 0", "5m", "critical",
              f"{EXPORTER} cannot reach NVML",
              "NVML initialisation or polling fails (driver not loaded, driver/library "
              "version mismatch after an upgrade, or no access to /dev/nvidia*). No GPU "
              "metrics are collected. Run `nvidia-smi` on the node and `gpu-exporter "
              "doctor`; reboot the node after a driver upgrade.", g),
        Alert("GpuExporterKubeletUnreachable", "gpu_exporter_kubelet_up == 0", "10m",
              "warning", f"{EXPORTER} cannot read kubelet pod-resources",
              "Pod labels (namespace/pod/container) are missing or stale on this node's GPU "
              "metrics, so per-workload dashboards and autoscaling are wrong. Check that the "
              "pod-resources socket is mounted and the kubelet is healthy.", g),
    ]


def _xid_alerts(c: AlertConfig) -> list[Alert]:
    g = "gpu-exporter.xid"
    w = c.xid_window
    t = c.xid
    candidates = [
        (t.fell_off_bus, Alert(
            "GpuFellOffTheBus", _xid(t.fell_off_bus, w), "0m", "critical",
            f"{GPU} fell off the bus (XID {{{{ $labels.xid }}}})",
            "The GPU stopped responding on PCIe. Jobs on it are dead and it will not come "
            "back without a node reboot. Cordon and drain the node, reboot it; if it happens "
            "again, have the GPU, riser and power checked (RMA).", g)),
        (t.critical, Alert(
            "GpuCriticalXid", _xid(t.critical, w), "0m", "critical",
            f"{GPU} reported critical XID {{{{ $labels.xid }}}}",
            "An XID of the reset/reboot class (uncontained memory error, GSP or "
            "micro-controller failure). Cordon the node, drain it, reset the GPU "
            "(`nvidia-smi -r -i <gpu>`) or reboot; repeat offenders need an RMA.", g)),
        (t.nvlink, Alert(
            "GpuNvlinkError", _xid(t.nvlink, w), "0m", "critical",
            f"{GPU} reported an NVLink error (XID {{{{ $labels.xid }}}})",
            "NVLink errors break multi-GPU jobs on this node. Drain the node and reset the "
            "GPUs (or reboot); if the link keeps failing, check the NVLink bridge/baseboard "
            "and Fabric Manager logs.", g)),
        (t.contained_ecc, Alert(
            "GpuContainedEccXid", _xid(t.contained_ecc, w), "0m", "warning",
            f"{GPU} contained an ECC error (XID {{{{ $labels.xid }}}})",
            "An uncorrectable memory error was contained: only the application using that "
            "memory was killed and it can be restarted. The GPU needs a reset to remap the "
            "row: drain it and reset at the next opportunity.", g)),
        (t.pending_reset, Alert(
            "GpuResetRecommendedXid", _xid(t.pending_reset, w), "0m", "info",
            f"{GPU} asks for a reset (XID {{{{ $labels.xid }}}})",
            "A row remap or page retirement was recorded, or single-bit errors are frequent. "
            "Nothing fails yet; schedule a GPU reset (drain, `nvidia-smi -r`) at the next "
            "maintenance window.", g)),
    ]
    return [alert for codes, alert in candidates if codes]


def _health_alerts(c: AlertConfig, fields: FieldSet) -> list[Alert]:
    g = "gpu-exporter.health"
    ecc = next((n for n in ("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL")
                if n in fields.names), "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL")
    fb_ratio = "DCGM_FI_DEV_FB_USED / (DCGM_FI_DEV_FB_USED + DCGM_FI_DEV_FB_FREE)"
    return [
        Alert("GpuLost",
              "increase(gpu_exporter_gpu_lost_total[10m]) > 0\nor\n"
              "(gpu_exporter_gpu_lost_total > 0 unless gpu_exporter_gpu_lost_total offset 10m)"
              '\nor\nmax without (kind) (gpu_exporter_devices{kind="gpu"} < max_over_time('
              'gpu_exporter_devices{kind="gpu"}[6h]))',
              "1m", "critical", f"{EXPORTER} lost a GPU",
              "NVML reports a GPU as lost, or the exporter sees fewer GPUs than it did "
              "during the last 6 hours. The GPU is unusable until the node is rebooted: "
              "cordon and drain the node, reboot, and check `nvidia-smi` and dmesg (XID 79) "
              "afterwards.", g),
        Alert("GpuUncorrectableEccErrors", grew(ecc, "10m"), "0m", "critical",
              f"{GPU} had uncorrectable ECC errors",
              "Double-bit (uncorrectable) ECC errors corrupt results and kill the "
              "application. Drain the GPU and reset it so the row is remapped; if the count "
              "keeps growing or remapping fails, replace the GPU.", g),
        Alert("GpuRowRemapFailure", "DCGM_FI_DEV_ROW_REMAP_FAILURE == 1", "1m", "critical",
              f"{GPU} failed to remap a memory row",
              "The GPU ran out of spare rows: the bad memory can no longer be hidden. Take "
              "the GPU out of service (cordon and drain the node) and open an RMA.", g),
        Alert("GpuRowRemapPending", "DCGM_FI_DEV_ROW_REMAP_PENDING == 1", "5m", "warning",
              f"{GPU} has a row remap pending",
              "A memory row is waiting to be remapped, which happens at the next GPU reset. "
              "Drain the GPU and reset it (`nvidia-smi -r`) or reboot the node.", g),
        Alert("GpuHwThermalSlowdown", _bit(0x40), "2m", "warning",
              f"{GPU} is in hardware thermal slowdown",
              "The GPU halved its clocks because it is too hot: jobs run much slower. Check "
              "the node's fans, airflow, inlet temperature and cooling; clean or service the "
              "chassis.", g),
        Alert("GpuTemperatureNearLimit", f"DCGM_FI_DEV_GPU_TEMP >= {c.gpu_temp_c}", "10m",
              "warning", f"{GPU} runs at {{{{ $value }}}} C",
              f"GPU core temperature has been at or above {c.gpu_temp_c} C for 10 minutes, "
              "close to the slowdown limit. Check cooling before the GPU throttles.", g),
        Alert("GpuMemoryTemperatureNearLimit",
              f"DCGM_FI_DEV_MEMORY_TEMP >= {c.memory_temp_c}", "10m", "warning",
              f"{GPU} memory runs at {{{{ $value }}}} C",
              f"HBM temperature has been at or above {c.memory_temp_c} C for 10 minutes. "
              "Check cooling; hot HBM raises the ECC error rate.", g),
        Alert("GpuPowerBrake", _bit(0x80), "1m", "warning",
              f"{GPU} is held by the hardware power brake",
              "An external power-brake signal (from the power supply or chassis) cut the "
              "clocks. Check the node's PSUs, power capping and BMC event log.", g),
        Alert("GpuFramebufferNearFull", f"{fb_ratio} > {c.fb_full_ratio}", "5m", "warning",
              f"{GPU} {{{{ $labels.GPU_I_PROFILE }}}} framebuffer is "
              "{{ $value | humanizePercentage }} full",
              f"More than {c.fb_full_ratio:.0%} of the framebuffer is in use: the next "
              "allocation will fail with CUDA out-of-memory. Lower the batch size / KV-cache "
              "share of the workload in pod {{ $labels.namespace }}/{{ $labels.pod }}, or "
              "scale it out.", g),
        Alert("GpuPcieReplayErrors",
              f"increase(DCGM_FI_DEV_PCIE_REPLAY_COUNTER[10m]) > {c.pcie_replays_per_10m}",
              "10m", "warning", f"{GPU} keeps retrying PCIe transfers",
              f"More than {c.pcie_replays_per_10m} PCIe replays per 10 minutes, for 10 "
              "minutes: the link is degraded (riser, slot, cable or retimer). Reseat or "
              "replace the hardware at the next maintenance.", g),
    ]


NVLINK_ERROR_COUNTERS = (
    ("DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL", False),
    ("DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL", True),
    ("DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL", True),
    ("DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL", True),
)
"""The NVLink error totals and whether some are normal (CRC errors are corrected by a replay;
a recovery retrains the link)."""


FAULT = "gpu_exporter_gpu_fault"
FAULT_GPU = "GPU {{ $labels.gpu }} ({{ $labels.UUID }}) on {{ $labels.instance }}"
FAULT_WHAT = ("{{ $labels.source }} {{ $labels.code }} ({{ $labels.name }}), action "
              "{{ $labels.action }}")


def _holders(fields: FieldSet) -> str:
    """Return PromQL for the containers holding each GPU (by instance and UUID): the allocation
    rows of shared devices, and the pod labels of an exclusively held device's own series."""
    terms = ["group by (instance, UUID, namespace, pod, container) "
             "(gpu_exporter_pod_gpu_allocation)"]
    if fields.has("DCGM_FI_DEV_FB_USED"):
        terms.append('group by (instance, UUID, namespace, pod, container) '
                     '(DCGM_FI_DEV_FB_USED{pod!=""})')
    return "(\n" + "\nor\n".join(terms) + "\n)"


def _fault_alerts(fields: FieldSet) -> list[Alert]:
    """Return the alerts on held faults (docs/faults.md), routed by the fault's clearing event:
    a reset or a reboot pages the node's owner, an application fault goes to the owner of
    each pod holding the GPU. Faults that are not held (IGNORE, report-only) have no series
    and raise nothing."""
    g = "gpu-exporter.faults"
    app = f'max by (instance, UUID, gpu) ({FAULT}{{cleared_by="holder-exit"}})'
    holders = _holders(fields)
    return [
        Alert("GpuFaultNeedsReset", f'{FAULT}{{cleared_by="gpu-reset"}} == 1', "0m", "page",
              f"{FAULT_GPU} needs a reset: {FAULT_WHAT}",
              "NVIDIA's recommended action for this fault takes the GPU out of service until "
              "it is reset. Cordon the node (or taint the GPU out), drain the pods using it, "
              "reset it (`nvidia-smi -r -i <gpu>`) or reboot; the fault clears once the "
              "exporter sees the reset. Repeat offenders need field diagnostics or an RMA.",
              g, owner="node"),
        Alert("GpuFaultNeedsReboot", f'{FAULT}{{cleared_by="reboot"}} == 1', "0m", "page",
              f"{FAULT_GPU} needs the node rebooted: {FAULT_WHAT}",
              "NVIDIA's recommended action for this fault is a restart of the machine (bare "
              "metal or VM): the GPU cannot be recovered in place. Cordon and drain the node "
              "and reboot it; the fault clears with the new boot id.", g, owner="node"),
        Alert("GpuFaultHealthCheck", f'{FAULT}{{cleared_by="health-pass"}} == 1', "10m",
              "warning", f"{FAULT_GPU} fails a health check: {FAULT_WHAT}",
              "A DCGM health check whose action is to inspect the node (cooling, fabric "
              "manager configuration) has failed for 10 minutes. The fault clears by itself "
              "when the check passes again.", g, owner="node"),
        Alert("GpuFaultApplication",
              f"{holders}\n* on (instance, UUID) group_left (gpu)\n{app}\n"
              f"or\n({app} unless on (instance, UUID) {holders})",
              "0m", "warning",
              "An application fault on GPU {{ $labels.gpu }} ({{ $labels.UUID }}) held by "
              "{{ $labels.namespace }}/{{ $labels.pod }}",
              "The GPU reported an error NVIDIA attributes to the application using it "
              "(RESTART_APP): that process's GPU context is lost, the GPU itself is fine. "
              "Restart the workload in pod {{ $labels.namespace }}/{{ $labels.pod }}; the "
              "fault clears when its processes exit. gpu_exporter_gpu_fault says which XID.",
              g, owner="workload"),
    ]


def _nvlink_alert(c: AlertConfig, fields: FieldSet) -> Alert | None:
    """Return the alert on NVLink errors growing, from the counters themselves: it fires before the
    link breaks, which XID 74 (GpuNvlinkError) reports. Terms whose counter is not collected are
    left out."""
    terms = [f"increase({name}[10m]) > {c.nvlink_errors_per_10m if tolerated else 0}"
             for name, tolerated in NVLINK_ERROR_COUNTERS if fields.has(name)]
    if not terms:
        return None
    return Alert(
        "GpuNvlinkErrorsGrowing", "\nor\n".join(terms), "5m", "warning",
        f"{GPU} NVLink errors are growing",
        f"A link of this GPU retrained (recovery errors) or took more than "
        f"{c.nvlink_errors_per_10m} CRC or replay errors in 10 minutes: it is degrading, "
        "multi-GPU jobs slow down, and a link that breaks raises XID 74. Drain the node at "
        "the next opportunity and reset the GPUs; if it recurs, have the NVLink bridge, "
        "baseboard or NVSwitch tray checked. The per-link fields "
        "(DCGM_FI_DEV_NVLINK_*_ERROR_PER_LINK_TOTAL) show which link.",
        "gpu-exporter.health")


def _idle_alert(c: AlertConfig) -> Alert:
    """Return the alert on held devices doing (almost) nothing: graphics-engine activity from GPM,
    or NVML utilisation before Hopper (`exporter.promql.measures`).

    A device one container holds exclusively carries that pod's labels itself; a shared one
    is unlabelled and joined onto its `gpu_exporter_pod_gpu_allocation` rows.
    """
    keep = f"{DEVICE}, {HOST}, gpu"
    exclusive, shared = GR_ENGINE.select('{pod!=""}'), GR_ENGINE.select('{pod=""}')
    return Alert(
        "GpuIdleButAllocated",
        f"(max by ({keep}, namespace, pod, container) ({exclusive}) < {c.idle_ratio})\nor\n"
        f"((max by ({keep}) ({shared}) < {c.idle_ratio})\n"
        f"* on ({DEVICE}) group_right ({HOST}, gpu)\n"
        f"group by ({DEVICE}, namespace, pod, container) (gpu_exporter_pod_gpu_allocation))",
        c.idle_for, "info",
        f"{{{{ $labels.namespace }}}}/{{{{ $labels.pod }}}} holds an idle GPU on {NODE}",
        f"Pod {{{{ $labels.namespace }}}}/{{{{ $labels.pod }}}} (container "
        f"{{{{ $labels.container }}}}) holds GPU {{{{ $labels.gpu }}}} but used it less than "
        f"{c.idle_ratio:.0%} of the time for {c.idle_for}. Ask the owner to release it, scale "
        "the workload down, or let the autoscaler reclaim it.",
        "gpu-exporter.capacity")


def alerts(fields: FieldSet, config: AlertConfig | None = None) -> list[Alert]:
    """Return the alerts whose fields are enabled, reading only those."""
    c = config or AlertConfig()
    c.xid.check()
    candidates = [*_exporter_alerts(c), *_xid_alerts(c), *_health_alerts(c, fields),
                  *_fault_alerts(fields)]
    nvlink = _nvlink_alert(c, fields)
    if nvlink is not None:
        candidates.append(nvlink)
    candidates.append(_idle_alert(c))
    out = []
    for alert in candidates:
        expr = fields.resolve(alert.expr)
        if expr is not None:
            out.append(replace(alert, expr=expr))
    return out


def rule_groups(fields: FieldSet, config: AlertConfig | None = None) -> list[dict[str, Any]]:
    """Return the Prometheus rule groups of every alert whose fields `fields` enables, in the
    order the alerts are defined, ready to write as a rules file."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for alert in alerts(fields, config):
        groups.setdefault(alert.group, []).append(alert.rule())
    return [{"name": name, "rules": rules} for name, rules in groups.items()]


def prometheus_rule(fields: FieldSet, config: AlertConfig | None = None) -> dict[str, Any]:
    """Return the same groups as a prometheus-operator PrometheusRule object."""
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": {
            "name": "gpu-exporter",
            "labels": {"app.kubernetes.io/name": "gpu-exporter",
                       "app.kubernetes.io/component": "alerting"},
        },
        "spec": {"groups": rule_groups(fields, config)},
    }

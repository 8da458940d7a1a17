"""Every `gpu_exporter_*` family the exporter reports about itself, declared once.

Each emitter (the device backend, the kubelet source, pod enrichment, the poll loop, the
renderer) builds its families from these declarations, so a name, type, help text or label
set cannot drift between the code that emits it, `docs/metrics.md` (generated from
`REGISTRY`) and the tests that compare live scrapes with it. This module sits at the bottom
with `exporter.series`: every layer may import it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from exporter.label_registry import undeclared
from exporter.series import Family, Labels, Sample

SelfMetricType = Literal["gauge", "counter"]

POD_ENRICHMENT = ("pod_uid", "label_*", "*")
"""What pod enrichment appends after `pod`/`namespace`/`container` labels: the pod's UID,
then one `label_<key>` per pod label `--kubernetes.pod-labels` selects, or the sanitised key
itself with dcgm-exporter's pod labels (`*` ends a name prefix; a bare `*` is any name)."""
DRA_CLAIM = ("dra_*",)
"""What follows on a device claimed through DRA: dcgm-exporter's `dra_claim_name`,
`dra_claim_namespace`, `dra_driver_name`, `dra_pool_name`, `dra_device_name`, on MIG
`dra_mig_profile` and `dra_mig_device_uuid`, and on allocation rows `dra_share_id`."""


class LabelMismatch(ValueError):
    """A sample's label names differ from its family's declaration (a bug in the emitter)."""


@dataclass(frozen=True, slots=True)
class SelfMetric:
    """One self-metric family: what is exposed, and how its samples may be labelled."""

    name: str
    """As in `Family`: a counter is named without `_total` (the renderer adds it)."""
    type: SelfMetricType
    help: str
    """The HELP line, exactly as exposed."""
    labels: tuple[str, ...] = ()
    """Label names of every sample, in exposition order."""
    optional: frozenset[str] = frozenset()
    """Names in `labels` that a sample may leave out (`GPU_I_ID` off MIG)."""
    extra: tuple[str, ...] = ()
    """Names that may follow `labels` (`*` ends a prefix); none may when empty."""
    device_labels: bool = False
    """Samples start with their device's full label set, as on its DCGM_* series; `labels`
    follow it."""
    note: str = ""
    """What docs/metrics.md adds to the help text (label values, how to use it)."""

    def __post_init__(self) -> None:
        if not self.name.startswith("gpu_exporter_"):
            raise ValueError(f"{self.name}: self-metrics are named gpu_exporter_*")
        if self.type == "counter" and self.name.endswith("_total"):
            raise ValueError(f"{self.name}: counters are declared without _total")
        if len(set(self.labels)) != len(self.labels) or not self.optional <= set(self.labels):
            raise ValueError(f"{self.name}: labels repeat, or an optional one is undeclared")
        if missing := undeclared(self.labels):
            # A name the registry lacks would not be reserved against copied pod labels.
            raise ValueError(f"{self.name}: labels {missing} are not in exporter.label_registry")
        if self.device_labels and (self.optional or self.extra):
            # The device's own labels vary in number; only a fixed tail can be checked.
            raise ValueError(f"{self.name}: device labels take a fixed tail of labels")

    @property
    def exposed_name(self) -> str:
        """The name on the wire in the text format (and in PromQL)."""
        return self.name + "_total" if self.type == "counter" else self.name

    def sample(self, value: float, /, **labels: str) -> Sample:
        """Return a sample with these labels in the order given (checked by `family`)."""
        return Sample(tuple(labels.items()), value)

    def device_sample(self, device: Labels, value: float, /, **labels: str) -> Sample:
        """Return a sample on a device: its series labels, then these."""
        return Sample(device + tuple(labels.items()), value)

    def family(self, samples: Iterable[Sample]) -> Family:
        """Return the family of these samples; raise LabelMismatch if one is labelled otherwise than
        declared."""
        built = tuple(samples)
        for s in built:
            names = tuple(name for name, _ in s.labels)
            if not self._accepts(names):
                raise LabelMismatch(
                    f"{self.name}: sample labelled {list(names)}, declared {self.label_text()}")
        return Family(self.name, self.type, self.help, built)

    def single(self, value: float, /, **labels: str) -> Family:
        """Return the family of one sample."""
        return self.family((self.sample(value, **labels),))

    def _accepts(self, names: tuple[str, ...]) -> bool:
        if self.device_labels:
            return len(names) >= len(self.labels) and \
                names[len(names) - len(self.labels):] == self.labels
        position = 0
        for label in self.labels:
            if position < len(names) and names[position] == label:
                position += 1
            elif label not in self.optional:
                return False
        return all(self._is_extra(name) for name in names[position:])

    def _is_extra(self, name: str) -> bool:
        if name in self.labels:  # a declared label out of place is never an extra one
            return False
        return any(name == pattern or (pattern.endswith("*") and name.startswith(pattern[:-1]))
                   for pattern in self.extra)

    def label_text(self) -> str:
        """Return the labels as docs/metrics.md lists them: `[...]` optional, `<key>...` any
        number of names with that prefix."""
        parts = ["*device labels*"] if self.device_labels else []
        parts += [f"[`{n}`]" if n in self.optional else f"`{n}`" for n in self.labels]
        if self.extra:
            tail = ", ".join("`" + n.replace("*", "<key>`...") if n.endswith("*") else f"`{n}`"
                             for n in self.extra)
            parts.append(f"[{tail}]")
        return ", ".join(parts) or "-"


# --- the poll loop and the process -------------------------------------------------------

BUILD_INFO = SelfMetric(
    "gpu_exporter_build_info", "gauge", "Build information; always 1.",
    labels=("version", "python_version", "backend"),
    note="`backend`: nvml or sim.")
COLLECT_INTERVAL = SelfMetric(
    "gpu_exporter_collect_interval_seconds", "gauge", "Configured time between device polls.")
POLL_DURATION = SelfMetric(
    "gpu_exporter_poll_duration_seconds", "gauge",
    "Duration of the last completed poll (devices, attribution).")
LAST_POLL_SUCCESS = SelfMetric(
    "gpu_exporter_last_poll_success_timestamp_seconds", "gauge",
    "Unix time of the last poll that read the devices.")
POLL_ERRORS = SelfMetric(
    "gpu_exporter_poll_errors", "counter", "Polls that failed, by reason.",
    labels=("reason",),
    note="`reason`: deadline, busy (the previous poll is still in the driver), nvml_down, "
         "exception.")
SCRAPES = SelfMetric(
    "gpu_exporter_scrapes", "counter", "Scrapes of /metrics served (as of the last poll).")
CONFIG_RELOADS = SelfMetric(
    "gpu_exporter_config_reloads", "counter",
    "Collectors reloads (SIGHUP or file change), by result.",
    labels=("result",), note="`result`: success, failure.")
CONFIG_LAST_RELOAD_SUCCESS = SelfMetric(
    "gpu_exporter_config_last_reload_success_timestamp_seconds", "gauge",
    "Unix time of the last successful collectors reload.",
    note="Absent until the first reload.")

# --- the HTTP endpoint ---------------------------------------------------------------------

HTTP_CONNECTIONS_REFUSED = SelfMetric(
    "gpu_exporter_http_connections_refused", "counter",
    "Connections closed before a request was served, by reason.",
    labels=("reason",),
    note="`reason`: connection_limit (more open connections than the cap), header_timeout "
         "(no complete request head within the header timeout), tls_handshake (the TLS "
         "handshake failed: no or untrusted client certificate, refused TLS version, not "
         "TLS), client_san (the client certificate has none of `client_allowed_sans`), "
         "write_timeout (a response not taken by its client within the write timeout; "
         "that request was not fully served).")
WEB_CONFIG_RELOADS = SelfMetric(
    "gpu_exporter_web_config_reloads", "counter",
    "Re-reads of the web config file and the certificates, keys and CAs it names after "
    "one changed on disk, by result.",
    labels=("result",),
    note="With `--web.config.file`. `result`: success, failure (the running configuration "
         "is kept until the files change again).")

# --- devices -------------------------------------------------------------------------------

NVML_UP = SelfMetric(
    "gpu_exporter_nvml_up", "gauge", "1 when NVML is initialised and devices are enumerated.")
NVML_ERRORS = SelfMetric(
    "gpu_exporter_nvml_errors", "counter",
    "NVML calls that failed, by function and return code.",
    labels=("function", "code"),
    note="An answer of NOT_SUPPORTED counts too, once per device and call: such a call "
         "is not repeated.")
GPU_LOST = SelfMetric(
    "gpu_exporter_gpu_lost", "counter",
    "Times a GPU answered GPU_IS_LOST and was dropped until it returns.")
DEVICES = SelfMetric(
    "gpu_exporter_devices", "gauge", "Devices currently visible: GPUs and MIG GPU instances.",
    labels=("kind",), note="`kind`: gpu, mig.")
GPM_SUPPORTED = SelfMetric(
    "gpu_exporter_gpm_supported", "gauge",
    "1 when NVML GPM, the source of DCGM_FI_PROF_* fields, answers on the GPU; 0 with the "
    "reason when not.",
    labels=("gpu", "UUID", "reason"),
    note="`reason` is on every sample: empty when supported (PromQL sees no label), "
         "`unsupported` (no GPM: older than Hopper), `no_permission` (the driver restricts "
         "profiling to administrators, RmProfilingAdminOnly=1: set "
         "NVreg_RestrictProfilingToAdminUsers=0 or give the exporter SYS_ADMIN).")
XID_ERRORS = SelfMetric(
    "gpu_exporter_xid_errors", "counter", "XID events since the exporter started, by code.",
    labels=("xid",), device_labels=True,
    note="Kept for a GPU that fell off the bus; alert on `increase()` of it.")
XID_LAST_SEEN = SelfMetric(
    "gpu_exporter_xid_last_seen_timestamp_seconds", "gauge",
    "Unix time of the most recent XID event with this code.",
    labels=("xid",), device_labels=True)
GPU_FAULT = SelfMetric(
    "gpu_exporter_gpu_fault", "gauge",
    "1 for each fault held on a GPU until its clearing event, with NVIDIA's recommended "
    "action.",
    labels=("gpu", "UUID", "source", "code", "name", "action", "fatal", "cleared_by"),
    note="`source`: `xid` or `health` (a DCGM health code); `action`: NVIDIA's "
         "recommendation from its XID catalog; `cleared_by`: `holder-exit`, `gpu-reset`, "
         "`health-pass` or `reboot` (docs/faults.md).")

# --- Kubernetes ----------------------------------------------------------------------------

KUBELET_UP = SelfMetric(
    "gpu_exporter_kubelet_up", "gauge",
    "1 if the last call to the kubelet pod-resources API succeeded.")
KUBELET_LAST_REFRESH_SUCCESS = SelfMetric(
    "gpu_exporter_kubelet_last_refresh_success_timestamp_seconds", "gauge",
    "Unix time of the last successful pod-resources refresh.")
KUBELET_REFRESH_ERRORS = SelfMetric(
    "gpu_exporter_kubelet_refresh_errors", "counter",
    "Failed pod-resources refreshes, by gRPC status code (or SOCKET_ABSENT).",
    labels=("code",))
UNATTRIBUTED_DEVICES = SelfMetric(
    "gpu_exporter_unattributed_devices", "gauge",
    "Devices allocated under an accepted resource name that could not be mapped "
    "to a GPU or MIG instance (unknown_device: not in this exporter's inventory; "
    "malformed_id: the device id could not be parsed).",
    labels=("reason",))
DEVICE_ID_PARSE_ERRORS = SelfMetric(
    "gpu_exporter_device_id_parse_errors", "counter",
    "Distinct (container, device id) allocations whose device id could not be "
    "parsed; each is logged once.")
POD_GPU_ALLOCATION = SelfMetric(
    "gpu_exporter_pod_gpu_allocation", "gauge",
    "1 for each container holding a shared GPU or MIG instance (one held by several "
    "containers, through time-sliced replicas or not); join device metrics on "
    "gpu/UUID/GPU_I_ID.",
    labels=("gpu", "UUID", "GPU_I_ID", "pod", "namespace", "container", "resource", "replica"),
    optional=frozenset({"GPU_I_ID", "replica"}), extra=POD_ENRICHMENT + DRA_CLAIM,
    note="`replica`: the time-slicing replica index, when the device id carries one. "
         "`resource`: the resource name, or `gpu.nvidia.com` for a device claimed through "
         "DRA, whose row also carries the claim's `dra_*` labels (`dra_share_id` when the "
         "device is allocated under a share id).")
POD_GPU_MEMORY_USED = SelfMetric(
    "gpu_exporter_pod_gpu_memory_used_bytes", "gauge",
    "Framebuffer used by a container's processes on a shared GPU or MIG "
    "instance (from NVML's process list; summed, never above the device's).",
    labels=("gpu", "UUID", "GPU_I_ID", "pod", "namespace", "container"),
    optional=frozenset({"GPU_I_ID"}), extra=POD_ENRICHMENT,
    note="With `--kubernetes.process-attribution`.")
POD_GPU_SM_UTILIZATION = SelfMetric(
    "gpu_exporter_pod_gpu_sm_utilization_ratio", "gauge",
    "SM utilisation of a container's processes on a shared GPU (NVML process "
    "samples since the previous poll, 0-1).",
    labels=("gpu", "UUID", "GPU_I_ID", "pod", "namespace", "container"),
    optional=frozenset({"GPU_I_ID"}), extra=POD_ENRICHMENT,
    note="With `--kubernetes.process-attribution`.")
UNATTRIBUTED_GPU_PROCESSES = SelfMetric(
    "gpu_exporter_unattributed_gpu_processes", "gauge",
    "Processes on shared devices that map to no known container (no hostPID, "
    "or not in a pod).",
    note="With `--kubernetes.process-attribution`, node scope only.")
KUBERNETES_API_UP = SelfMetric(
    "gpu_exporter_kubernetes_api_up", "gauge",
    "1 while the pod watch on the API server (for pod labels) is established.",
    note="With `--kubernetes.pod-labels`, `--kubernetes-enable-pod-labels`, "
         "`--kubernetes-enable-pod-uid` or `--kubernetes.process-attribution`; with "
         "`--sim.kubelet` the simulated pods' metadata stands in for the watch and reports "
         "1.")
KUBERNETES_API_ERRORS = SelfMetric(
    "gpu_exporter_kubernetes_api_errors", "counter",
    "Failed list/watch requests to the API server.")
POD_LABELS_DROPPED = SelfMetric(
    "gpu_exporter_pod_labels_dropped", "counter",
    "Distinct pod label keys not copied onto series because their label name is another "
    "key's of the same pod (duplicate) or no label name at all (invalid); each is logged "
    "once.",
    labels=("reason",),
    note="While pod labels are copied. `reason`: duplicate (`a.b` and `a-b` both become "
         "`a_b`; the first in sort order wins), invalid (the empty key).")
POD_LABELS_RENAMED = SelfMetric(
    "gpu_exporter_pod_labels_renamed", "counter",
    "Distinct pod label keys copied under another name because theirs is one of the "
    "series' own labels: `pod_label_<name>`, then `pod_label_<name>_conflict<N>` while that "
    "is taken too (as dcgm-exporter 4.8.3); each is logged once.",
    note="While pod labels are copied. A pod label `pod`, `gpu`, `hostname`, `err_code`, "
         "`DCGM_*`, ... is renamed; `version`, `kind` or `code`, which only label-less "
         "self-metrics use, are not.")
LABEL_LIMIT_TRIMMED_SERIES = SelfMetric(
    "gpu_exporter_label_limit_trimmed_series", "gauge",
    "Series of the last poll that lost copied pod labels to stay within --label-limit.",
    note="With `--label-limit`. Copied pod labels go last-name-first; the exporter's own "
         "labels are never cut. Each cut label name is logged once.")
DRA_SLICE_WATCH_UP = SelfMetric(
    "gpu_exporter_dra_resource_slice_watch_up", "gauge",
    "1 while the watch of this node's ResourceSlices (DRA driver gpu.nvidia.com) "
    "is established.",
    note="With `KUBERNETES_ENABLE_DRA` / `--kubernetes-enable-dra`.")
DRA_SLICE_WATCH_ERRORS = SelfMetric(
    "gpu_exporter_dra_resource_slice_watch_errors", "counter",
    "Failed list/watch requests for this node's ResourceSlices.",
    note="With `KUBERNETES_ENABLE_DRA` / `--kubernetes-enable-dra`.")
DRA_UNRESOLVED_DEVICES = SelfMetric(
    "gpu_exporter_dra_unresolved_devices", "gauge",
    "Devices of driver gpu.nvidia.com claimed by containers that could not be mapped "
    "to a GPU or MIG device (no_resource_slice: no ResourceSlice seen names it; "
    "no_uuid: its slice gives no uuid).",
    labels=("reason",),
    note="With `KUBERNETES_ENABLE_DRA`. Their series stay unlabelled. `no_uuid` is a "
         "dynamic-MIG offer or a vfio device.")

NODE_FAULT_WRITES = SelfMetric(
    "gpu_exporter_node_fault_writes", "counter",
    "Writes of the node's GPU fault state to the API server, by kind (condition, event, "
    "taint) and result (success; failure: a read or write not answered or refused, "
    "retried with backoff; "
    "conflict: stale resourceVersion, read again and retried; dry_run: logged, not made; "
    "held_back: the taint kept off by the circuit breaker).",
    labels=("kind", "result"),
    note="With `--faults.node-condition`, `--faults.events` or `--faults.taint`; every "
         "kind enabled shows each of its results from the start, at 0.")
NODE_FAULT_API_UP = SelfMetric(
    "gpu_exporter_node_fault_api_up", "gauge",
    "1 while the API server answered the node fault writer's last request, 0 after a "
    "failure (until a retry succeeds).",
    note="With `--faults.node-condition`, `--faults.events` or `--faults.taint`.")

REGISTRY: tuple[SelfMetric, ...] = (
    BUILD_INFO, NVML_UP, COLLECT_INTERVAL, POLL_DURATION, LAST_POLL_SUCCESS, POLL_ERRORS,
    NVML_ERRORS, GPU_LOST, SCRAPES, CONFIG_RELOADS, CONFIG_LAST_RELOAD_SUCCESS,
    HTTP_CONNECTIONS_REFUSED, WEB_CONFIG_RELOADS, DEVICES,
    GPM_SUPPORTED, XID_ERRORS, XID_LAST_SEEN, GPU_FAULT,
    KUBELET_UP, KUBELET_LAST_REFRESH_SUCCESS, KUBELET_REFRESH_ERRORS, UNATTRIBUTED_DEVICES,
    DEVICE_ID_PARSE_ERRORS, POD_GPU_ALLOCATION, POD_GPU_MEMORY_USED, POD_GPU_SM_UTILIZATION,
    UNATTRIBUTED_GPU_PROCESSES, KUBERNETES_API_UP, KUBERNETES_API_ERRORS, POD_LABELS_DROPPED,
    POD_LABELS_RENAMED,
    LABEL_LIMIT_TRIMMED_SERIES,
    DRA_SLICE_WATCH_UP, DRA_SLICE_WATCH_ERRORS, DRA_UNRESOLVED_DEVICES,
    NODE_FAULT_WRITES, NODE_FAULT_API_UP,
)
"""Every self-metric, in the order docs/metrics.md lists them."""

EXPOSED_NAMES = frozenset(m.exposed_name for m in REGISTRY)

"""Every label name the exporter writes on a series, declared once, by family.

The writers (`exporter.exposition.labels`, the renderer, attribution, DRA, HPC jobs, the
self-metric declarations) take their names from here, and the names a copied pod label may
not take (`exporter.k8s.pod_labels`) are derived from here: a label added to a family that
can sit beside pod labels is reserved against them by being declared, and a pod label of
that name is renamed, so it can never repeat a name on a line (Prometheus would reject the
whole scrape, and with it every GPU of the node).

What is not declared here is, by construction, a copied pod label: `label_<key>` from
`--kubernetes.pod-labels`, the sanitised key itself from dcgm-exporter's pod labels, or
`pod_label_<name>[_conflict<N>]` for a key whose name was taken (dcgm-exporter 4.8.3's
renaming). The label budget (`--label-limit`) relies on that to tell what it may drop.

This module sits at the bottom with `exporter.series`: every layer may import it.
"""

from __future__ import annotations

from dataclasses import dataclass

# --- a device's own labels, dcgm-exporter's order (exposition/labels.py) -------------------
GPU = "gpu"
UUID = "UUID"
OLD_UUID = "uuid"
"""`-o` (dcgm-exporter 1.x names)."""
PCI_BUS_ID = "pci_bus_id"
DEVICE = "device"
MODEL_NAME = "modelName"
GPU_I_PROFILE = "GPU_I_PROFILE"
GPU_I_ID = "GPU_I_ID"
HOST_LABELS = ("hostname", "Hostname")
"""`--hostname-label`: dcgm-exporter 4.8.3 and later (and this exporter by default) write
`hostname`, 4.8.2 and earlier `Hostname`."""

# --- who holds the device --------------------------------------------------------------------
CONTAINER = "container"
NAMESPACE = "namespace"
POD = "pod"
OLD_CONTAINER = "container_name"
OLD_POD = "pod_name"
OLD_NAMESPACE = "pod_namespace"
POD_UID = "pod_uid"
VGPU = "vgpu"
"""The time-slicing replica of a holder with virtual GPUs."""
HPC_JOB = "hpc_job"

# --- NVLink and GPU-pair series (dcgm-exporter's link entity labels) ------------------------
NVLINK = "nvlink"
GPU_UUID = "gpu_uuid"
LINK_MODEL_NAME = "model_name"
LINK_HOSTNAME = "hostname"
LINK_STATUS = "link_status"
PEER_GPU = "peer_gpu"

# --- windowed counts -------------------------------------------------------------------------
XID = "xid"
CLOCK_EVENT = "clock_event"
WINDOW_SIZE_IN_MS = "window_size_in_ms"

# --- health watches (DCGM_EXP_GPU_HEALTH_STATUS) ---------------------------------------------
HEALTH_WATCH = "health_watch"
HEALTH_ERROR_CODE = "health_error_code"
HEALTH_ERROR_SEVERITY = "health_error_severity"
HEALTH_ERROR_CATEGORY = "health_error_category"

# --- held faults (gpu_exporter_gpu_fault) ---------------------------------------------------
FAULT_SOURCE = "source"
"""`xid` or `health`."""
FAULT_CODE = "code"
"""The XID number, or the DCGM health code."""
FAULT_NAME = "name"
FAULT_ACTION = "action"
FAULT_FATAL = "fatal"
FAULT_CLEARED_BY = "cleared_by"

# --- allocation rows and DRA claims ----------------------------------------------------------
RESOURCE = "resource"
REPLICA = "replica"
DRA_PREFIX = "dra_"
DRA_CLAIM_NAME = "dra_claim_name"
DRA_CLAIM_NAMESPACE = "dra_claim_namespace"
DRA_DRIVER_NAME = "dra_driver_name"
DRA_POOL_NAME = "dra_pool_name"
DRA_DEVICE_NAME = "dra_device_name"
DRA_MIG_PROFILE = "dra_mig_profile"
DRA_MIG_DEVICE_UUID = "dra_mig_device_uuid"
DRA_SHARE_ID = "dra_share_id"

# --- dcgm-exporter's "attributes" of the last-XID series ------------------------------------
ERR_CODE = "err_code"
"""`DCGM_FI_DEV_XID_ERRORS`: the code, as a decimal string."""
ERR_MSG = "err_msg"
"""`DCGM_FI_DEV_XID_ERRORS`: dcgm-exporter's text for the code (`exporter.fields.xid_messages`)."""

# --- names dcgm-exporter reserves against pod labels without this exporter writing them -----
GPU_CI_ID = "GPU_CI_ID"
NVSWITCH = "nvswitch"
CPU = "cpu"
CPU_SERIAL = "cpu_serial"
CPUCORE = "cpucore"

# --- how a pod label whose name is taken is renamed (dcgm-exporter 4.8.3+) ------------------
POD_LABEL_PREFIX = "pod_label_"
"""`pod` taken: the pod label `pod` becomes `pod_label_pod`."""
CONFLICT_SUFFIX = "_conflict"
"""`pod_label_pod` taken too: `pod_label_pod_conflict1`, then `_conflict2`, ..."""

# --- label-type fields, histogram buckets, Prometheus' own -----------------------------------
FIELD_PREFIX = "DCGM_"
"""A `label`-type field is named after its DCGM field (`DCGM_FI_DRIVER_VERSION`)."""
BUCKET = "le"
QUANTILE = "quantile"
PROMETHEUS_PREFIX = "__"

# --- self-metrics without device labels ------------------------------------------------------
SELF_LABELS = ("version", "python_version", "backend", "reason", "result", "function", "code",
               "kind")


@dataclass(frozen=True, slots=True)
class LabelFamily:
    """The labels one kind of series may carry besides copied pod labels."""

    name: str
    names: tuple[str, ...]
    prefixes: tuple[str, ...] = ()
    """Every name starting with one of these belongs to the family too."""
    where: str = ""
    """Which series carry them."""
    beside_pod_labels: bool = True
    """Whether a series may carry them and copied pod labels at once: only then is a pod
    label of one of these names renamed (`exporter.k8s.pod_labels`)."""


FAMILIES: tuple[LabelFamily, ...] = (
    LabelFamily("device", (GPU, UUID, OLD_UUID, PCI_BUS_ID, DEVICE, MODEL_NAME, *HOST_LABELS),
                where="every DCGM_* series of a GPU or MIG GPU instance"),
    LabelFamily("mig", (GPU_I_PROFILE, GPU_I_ID), where="series of a MIG GPU instance"),
    LabelFamily("field", (), (FIELD_PREFIX,),
                where="`label`-type fields, on every series of their entity"),
    LabelFamily("owner", (CONTAINER, NAMESPACE, POD, OLD_CONTAINER, OLD_POD, OLD_NAMESPACE,
                          POD_UID),
                where="series of a device a container holds"),
    LabelFamily("virtual-gpu", (VGPU,), where="`--kubernetes-virtual-gpus` copies"),
    LabelFamily("hpc-job", (HPC_JOB,), where="`--hpc-job-mapping-dir` copies"),
    LabelFamily("link", (NVLINK, GPU, GPU_UUID, PCI_BUS_ID, DEVICE, LINK_MODEL_NAME,
                         LINK_HOSTNAME),
                where="per-link NVLink fields"),
    LabelFamily("gpu-pair", (LINK_STATUS, PEER_GPU), where="DCGM_EXP_P2P_STATUS"),
    LabelFamily("xid-window", (XID, WINDOW_SIZE_IN_MS),
                where="DCGM_EXP_XID_ERRORS_COUNT, gpu_exporter_xid_*"),
    LabelFamily("clock-event-window", (CLOCK_EVENT, WINDOW_SIZE_IN_MS),
                where="DCGM_EXP_CLOCK_EVENTS_COUNT"),
    LabelFamily("event-total", (XID, CLOCK_EVENT),
                where="DCGM_EXP_XID_ERRORS_TOTAL, DCGM_EXP_CLOCK_EVENTS_TOTAL"),
    LabelFamily("health", (HEALTH_WATCH, HEALTH_ERROR_CODE, HEALTH_ERROR_SEVERITY,
                           HEALTH_ERROR_CATEGORY), where="DCGM_EXP_GPU_HEALTH_STATUS"),
    LabelFamily("fault", (GPU, UUID, FAULT_SOURCE, FAULT_CODE, FAULT_NAME, FAULT_ACTION,
                          FAULT_FATAL, FAULT_CLEARED_BY),
                where="gpu_exporter_gpu_fault", beside_pod_labels=False),
    LabelFamily("allocation", (RESOURCE, REPLICA), where="gpu_exporter_pod_gpu_allocation"),
    LabelFamily("dra", (DRA_CLAIM_NAME, DRA_CLAIM_NAMESPACE, DRA_DRIVER_NAME, DRA_POOL_NAME,
                        DRA_DEVICE_NAME, DRA_MIG_PROFILE, DRA_MIG_DEVICE_UUID, DRA_SHARE_ID),
                (DRA_PREFIX,), where="devices claimed through DRA"),
    LabelFamily("xid-attributes", (ERR_CODE, ERR_MSG), where="DCGM_FI_DEV_XID_ERRORS"),
    LabelFamily("dcgm-exporter-reserved", (GPU_CI_ID, NVSWITCH, CPU, CPU_SERIAL, CPUCORE),
                where="never written here; dcgm-exporter 4.8.4 reserves them against pod "
                      "labels (NVSwitch, CPU and compute-instance series)"),
    LabelFamily("histogram", (BUCKET, QUANTILE),
                where="a field a collectors file declares a histogram or summary"),
    LabelFamily("prometheus", (), (PROMETHEUS_PREFIX,), where="kept by Prometheus"),
    LabelFamily("self", SELF_LABELS, where="gpu_exporter_* self-metrics without device labels",
                beside_pod_labels=False),
)

DECLARED: frozenset[str] = frozenset(name for f in FAMILIES for name in f.names)
DECLARED_PREFIXES: tuple[str, ...] = tuple(p for f in FAMILIES for p in f.prefixes)
BESIDE_POD_LABELS: frozenset[str] = frozenset(
    name for f in FAMILIES if f.beside_pod_labels for name in f.names)
BESIDE_POD_LABELS_PREFIXES: tuple[str, ...] = tuple(
    p for f in FAMILIES if f.beside_pod_labels for p in f.prefixes)


def is_declared(name: str) -> bool:
    """Return whether the exporter itself writes (or keeps) this label name, as opposed to a
    copied pod label."""
    return name in DECLARED or name.startswith(DECLARED_PREFIXES)


def taken_from_pod_labels(name: str) -> bool:
    """Return whether a series that carries copied pod labels may also carry this name as one of
    the exporter's own labels; a pod label of that name is then renamed. Names that only
    label-less self-metrics use (`version`, `kind`, `code`, ...) stay free, as in dcgm-exporter."""
    return name in BESIDE_POD_LABELS or name.startswith(BESIDE_POD_LABELS_PREFIXES)


def undeclared(names: tuple[str, ...] | list[str]) -> list[str]:
    """Return the names in `names` that no family declares, for checks at declaration time."""
    return [name for name in names if not is_declared(name)]

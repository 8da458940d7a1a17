"""Every label name the exporter writes on a series, declared once, by family.

The writers (`exporter.exposition.labels`, the renderer, attribution, DRA, HPC jobs, the
self-metric declarations) take their names from here, and the names a copied pod label may
not take (`exporter.k8s.pod_labels`) are derived from here: a label added to a family is
reserved against pod labels by being declared, so a pod label can never repeat a name on a
line (Prometheus would reject the whole scrape, and with it every GPU of the node).

What is not declared here is, by construction, a copied pod label: `label_<key>` from
`--kubernetes.pod-labels`, or the sanitised key itself from dcgm-exporter's pod labels. The
label budget (`--label-limit`) relies on that to tell what it may drop.

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
HOST_LABELS = ("Hostname", "hostname")
"""`--hostname-label`: dcgm-exporter up to 4.8 writes `Hostname`, later `hostname`."""

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
    LabelFamily("allocation", (RESOURCE, REPLICA), where="gpu_exporter_pod_gpu_allocation"),
    LabelFamily("dra", (DRA_CLAIM_NAME, DRA_CLAIM_NAMESPACE, DRA_DRIVER_NAME, DRA_POOL_NAME,
                        DRA_DEVICE_NAME, DRA_MIG_PROFILE, DRA_MIG_DEVICE_UUID, DRA_SHARE_ID),
                (DRA_PREFIX,), where="devices claimed through DRA"),
    LabelFamily("histogram", (BUCKET, QUANTILE),
                where="a field a collectors file declares a histogram or summary"),
    LabelFamily("prometheus", (), (PROMETHEUS_PREFIX,), where="kept by Prometheus"),
    LabelFamily("self", SELF_LABELS, where="gpu_exporter_* self-metrics"),
)

DECLARED: frozenset[str] = frozenset(name for f in FAMILIES for name in f.names)
DECLARED_PREFIXES: tuple[str, ...] = tuple(p for f in FAMILIES for p in f.prefixes)


def is_declared(name: str) -> bool:
    """True for a name the exporter itself writes (or keeps), never a copied pod label's."""
    return name in DECLARED or name.startswith(DECLARED_PREFIXES)


def undeclared(names: tuple[str, ...] | list[str]) -> list[str]:
    """The names of `names` no family declares (for checks at declaration time)."""
    return [name for name in names if not is_declared(name)]

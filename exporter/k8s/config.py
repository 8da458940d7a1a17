"""Settings of the Kubernetes attribution layer (filled by the CLI from flags and env)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

DEFAULT_POD_RESOURCES_SOCKET = "/var/lib/kubelet/pod-resources/kubelet.sock"
DEFAULT_RESOURCE_NAMES = ("nvidia.com/gpu", "nvidia.com/gpu.shared")
"""Always accepted; `nvidia.com/mig-*` is accepted by prefix."""
DRA_GPU_DRIVER = "gpu.nvidia.com"
"""The DRA driver whose claimed devices are attributed (NVIDIA/k8s-dra-driver-gpu)."""
CONFIGMAP_OFF = "none"
"""dcgm-exporter's `-m/--configmap-data` value meaning: no ConfigMap."""


def parse_configmap_ref(value: str) -> tuple[str, str] | None:
    """Return the namespace and name of a `<namespace>:<name>` value (dcgm-exporter's `-m`), or
    None for "none" or an empty value.

    Raise ValueError naming the expected form otherwise."""
    value = value.strip()
    if value in ("", CONFIGMAP_OFF):
        return None
    namespace, sep, name = value.partition(":")
    if not sep or not namespace or not name or ":" in name:
        raise ValueError(f"{value!r}: expected <namespace>:<name> of a ConfigMap, or 'none'")
    return namespace, name

Scope = Literal["node", "pod"]
GpuIdType = Literal["uid", "device-name"]
"""dcgm-exporter's `--kubernetes-gpu-id-type`: which kubelet device ids name a whole GPU,
`GPU-<uuid>` (NVIDIA's device plugin) or `nvidia<N>` (GKE's)."""


@dataclass(frozen=True, slots=True)
class KubernetesConfig:
    """The settings of pod attribution and pod labels, as the flags and environment variables give
    them."""

    enabled: bool = False
    """Attribute devices to pods through the kubelet pod-resources API."""
    pod_resources_socket: str = DEFAULT_POD_RESOURCES_SOCKET
    """The kubelet's pod-resources socket; its directory is what should be mounted."""
    resource_names: tuple[str, ...] = ()
    """Extra resource names to accept besides the defaults."""
    scope: Scope = "node"
    """"node": every device on the node; "pod": only the devices of POD_NAME/POD_NAMESPACE."""
    pod_name: str | None = None
    pod_namespace: str | None = None
    node_name: str | None = None
    pod_labels: str | None = None
    """Allow-list regex of pod label keys copied onto series as `label_<key>`, with `pod_uid`
    (needs the API server)."""
    pod_label_presets: tuple[str, ...] = ()
    """Presets of `--kubernetes.pod-labels` (`dynamo`, `llm-d`, `kai`, `inference`): their
    keys are copied under the sanitised key, as dcgm-exporter's allow-list copies them (needs
    the API server; `exporter.k8s.inference_labels`)."""
    process_attribution: bool = False
    """Per-container framebuffer and SM use on shared GPUs from NVML's process list."""
    dra: bool = False
    """Attribute GPUs claimed through Dynamic Resource Allocation (driver `gpu.nvidia.com`):
    needs this node's ResourceSlices from the API server (`KUBERNETES_ENABLE_DRA`)."""
    configmap: tuple[str, str] | None = None
    """(namespace, name) of a ConfigMap whose `metrics` key is the collectors CSV, followed
    for changes; the collectors file is used while it cannot be read
    (`DCGM_EXPORTER_CONFIGMAP_DATA`)."""
    refresh_timeout_s: float = 2.0
    """Deadline of one kubelet call."""
    allocations_max_age_s: float = 120.0
    """While the kubelet cannot be reached, the last allocations keep labelling series for
    this long; after that they are dropped rather than shown stale."""
    gpu_id_type: GpuIdType = "uid"
    """The device ids the operator expects the kubelet to report for whole GPUs. Both forms
    are matched whatever this says (dcgm-exporter matches only the named one and leaves
    pods holding the other form unlabelled); an id of the other form is logged once."""
    enable_pod_labels: bool = False
    """dcgm-exporter's pod labels: every pod label (or those `pod_label_allowlist` selects)
    copied onto series under its sanitised key, without a prefix (needs the API server)."""
    enable_pod_uid: bool = False
    """dcgm-exporter's `pod_uid` label (needs the API server)."""
    pod_label_allowlist: tuple[str, ...] = ()
    """Regexes selecting the pod label keys `enable_pod_labels` copies (a key is copied when
    any of them matches anywhere in it); empty: every label."""
    virtual_gpus: bool = False
    """dcgm-exporter's `--kubernetes-virtual-gpus`: the series of a GPU shared through
    time-slicing/MPS replicas (or by several containers) are repeated once per holder, with
    its `pod`/`namespace`/`container` and `vgpu` (the replica id); `FB_USED` and `GPU_UTIL`
    carry each holder's own part, from NVML's process list (`exporter.k8s.virtual_gpus`)."""

    @property
    def wants_process_reads(self) -> bool:
        """Return whether NVML's per-process reads are needed; they then need the API-server
        watch to name the containers of the processes' pods."""
        return self.process_attribution or self.virtual_gpus

    @property
    def wants_pod_metadata(self) -> bool:
        """Return whether series need labels from the API server's pod objects."""
        return (bool(self.pod_labels) or bool(self.pod_label_presets) or self.enable_pod_labels
                or self.enable_pod_uid)

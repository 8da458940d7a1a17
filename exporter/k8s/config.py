"""Settings of the Kubernetes attribution layer (filled by the CLI from flags and env)."""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_POD_RESOURCES_SOCKET = "/var/lib/kubelet/pod-resources/kubelet.sock"
DEFAULT_RESOURCE_NAMES = ("nvidia.com/gpu", "nvidia.com/gpu.shared")
"""Always accepted; `nvidia.com/mig-*` is accepted by prefix."""
DRA_GPU_DRIVER = "gpu.nvidia.com"
"""The DRA driver whose claimed devices are attributed (NVIDIA/k8s-dra-driver-gpu)."""
CONFIGMAP_OFF = "none"
"""dcgm-exporter's `-m/--configmap-data` value meaning: no ConfigMap."""


def parse_configmap_ref(value: str) -> tuple[str, str] | None:
    """`<namespace>:<name>` (dcgm-exporter's `-m`), or None for "none" / empty.

    Raises ValueError naming the expected form otherwise.
    """
    value = value.strip()
    if value in ("", CONFIGMAP_OFF):
        return None
    namespace, sep, name = value.partition(":")
    if not sep or not namespace or not name or ":" in name:
        raise ValueError(f"{value!r}: expected <namespace>:<name> of a ConfigMap, or 'none'")
    return namespace, name


@dataclass(frozen=True, slots=True)
class KubernetesConfig:
    enabled: bool = False
    """Attribute devices to pods through the kubelet pod-resources API."""
    pod_resources_socket: str = DEFAULT_POD_RESOURCES_SOCKET
    """The kubelet's pod-resources socket; its directory is what should be mounted."""
    resource_names: tuple[str, ...] = ()
    """Extra resource names to accept besides the defaults."""
    scope: str = "node"
    """"node": every device on the node; "pod": only the devices of POD_NAME/POD_NAMESPACE."""
    pod_name: str | None = None
    pod_namespace: str | None = None
    node_name: str | None = None
    pod_labels: str | None = None
    """Allow-list regex of pod label keys copied onto series (needs the API server)."""
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

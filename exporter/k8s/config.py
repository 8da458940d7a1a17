"""Settings of the Kubernetes attribution layer (filled by the CLI from flags and env)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

DEFAULT_POD_RESOURCES_SOCKET = "/var/lib/kubelet/pod-resources/kubelet.sock"
DEFAULT_RESOURCE_NAMES = ("nvidia.com/gpu", "nvidia.com/gpu.shared")
"""Always accepted; `nvidia.com/mig-*` is accepted by prefix."""

Scope = Literal["node", "pod"]


@dataclass(frozen=True, slots=True)
class KubernetesConfig:
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
    """Allow-list regex of pod label keys copied onto series (needs the API server)."""
    process_attribution: bool = False
    """Per-container framebuffer and SM use on shared GPUs from NVML's process list."""
    refresh_timeout_s: float = 2.0
    """Deadline of one kubelet call."""
    allocations_max_age_s: float = 120.0
    """While the kubelet cannot be reached, the last allocations keep labelling series for
    this long; after that they are dropped rather than shown stale."""
    gpu_id_type: Literal["uid", "device-name"] = "uid"
    enable_pod_labels: bool = False
    enable_pod_uid: bool = False
    pod_label_allowlist: tuple[str, ...] = ()
    virtual_gpus: bool = False
    dra: bool = False
    configmap: tuple[str, str] | None = None

"""GPUs claimed through Dynamic Resource Allocation, as allocations like the device plugin's.

The kubelet lists each container's claims under `dynamic_resources`: each `DynamicResource`
has `claim_name`, `claim_namespace` and `claim_resources`, and each `ClaimResource` in those
has `driver_name`, `pool_name`, `device_name`, `share_id` and `cdi_devices`. Devices of
driver `gpu.nvidia.com` are looked up in this node's ResourceSlices
(`exporter.k8s.resourceslices`) and become `Allocation`s of their UUID, so they are
attributed exactly like device-plugin allocations: a device held by one container gets
`pod`, `namespace` and `container` on its series, and one held by several, or under a
`share_id`, gets allocation rows. dcgm-exporter's labels of a DRA-attributed series follow
(`dra_claim_name`, `dra_claim_namespace`, `dra_driver_name`, `dra_pool_name`,
`dra_device_name`, and on MIG `dra_mig_profile` and, when known, `dra_mig_device_uuid`);
allocation rows also carry `dra_share_id` when there is one. With
`--kubernetes-enable-pod-uid`, `pod_uid` comes first, as on the device-plugin path
(dcgm-exporter 4.8.4).

A device no slice names yet (the watch has not delivered it) or whose slice gives no UUID
(dynamic MIG, vfio) is counted in `gpu_exporter_dra_unresolved_devices{reason}` and labels
nothing: its series stay unlabelled rather than show a wrong pod.

The exporter's own claim. Under the GPU Operator's GPUCluster mode the exporter's pod claims
every GPU with `adminAccess: true` (to be given the devices). The driver prepares such a claim
like any other and the kubelet reports it in the pod's `dynamic_resources`, with nothing that
tells admin access apart. In node scope the exporter's own pod is therefore left out: it is
POD_NAME/POD_NAMESPACE when set, else the pod this process runs in (the ServiceAccount's
namespace and the host name, which is the pod's name unless the pod uses the host network).
Were it not left out, every GPU no workload claims would show the exporter's pod. With
`--scope pod` the own pod's claims are exactly what is shown, so nothing is left out. Other
pods' admin-access claims (another monitoring agent's) cannot be told apart from ordinary
claims: they count as holders like any claim.
"""

from __future__ import annotations

import logging
import socket
from collections import Counter
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from exporter import label_registry as names
from exporter.k8s.attribution import Allocation
from exporter.k8s.config import DRA_GPU_DRIVER, KubernetesConfig
from exporter.k8s.proto import PodResources
from exporter.k8s.resourceslices import ResourceSliceWatch, SliceDevice, SliceIndex
from exporter.selfmetrics import (
    DRA_SLICE_WATCH_ERRORS,
    DRA_SLICE_WATCH_UP,
    DRA_UNRESOLVED_DEVICES,
)
from exporter.series import Family, Labels

log = logging.getLogger(__name__)

SERVICE_ACCOUNT_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")

NO_RESOURCE_SLICE = "no_resource_slice"
"""No ResourceSlice of this node names the (pool, device) yet."""
NO_UUID = "no_uuid"
"""The slice names the device but gives no UUID (dynamic MIG offer, vfio passthrough)."""
UNRESOLVED_REASONS = (NO_RESOURCE_SLICE, NO_UUID)

_LOGGED_MEMORY = 4096


def exporter_pod(
    config: KubernetesConfig,
    *,
    namespace_file: Path = SERVICE_ACCOUNT_NAMESPACE,
    hostname: Callable[[], str] = socket.gethostname,
) -> tuple[str, str] | None:
    """Return the namespace and name of the pod this exporter runs in, as far as it can tell, or
    None when it cannot."""
    if config.pod_name and config.pod_namespace:
        return config.pod_namespace, config.pod_name
    try:
        namespace = namespace_file.read_text().strip()
    except OSError:
        return None
    name = config.pod_name or hostname()
    if name == config.node_name:
        return None  # The pod uses the host network, so the host name is the node's.
    return (namespace, name) if namespace and name else None


def claim_labels(
    claim_name: str, claim_namespace: str, pool: str, device_name: str, device: SliceDevice
) -> Labels:
    """Return the DRA labels of a series whose device was claimed: the claim, the driver, the pool,
    the device and, for a MIG device, its profile and UUID."""
    labels: Labels = (
        (names.DRA_CLAIM_NAME, claim_name),
        (names.DRA_CLAIM_NAMESPACE, claim_namespace),
        (names.DRA_DRIVER_NAME, DRA_GPU_DRIVER),
        (names.DRA_POOL_NAME, pool),
        (names.DRA_DEVICE_NAME, device_name),
    )
    if device.kind == "mig":
        labels += ((names.DRA_MIG_PROFILE, device.profile or ""),)
        # dcgm-exporter 4.8.4 writes the MIG device's UUID only when there is one.
        if device.uuid:
            labels += ((names.DRA_MIG_DEVICE_UUID, device.uuid),)
    return labels


class DraClaims:
    """Turns the kubelet's DRA claims into allocations; owns the ResourceSlice watch."""

    def __init__(
        self,
        index: SliceIndex,
        *,
        skip_pod: tuple[str, str] | None = None,
        watch: ResourceSliceWatch | None = None,
    ) -> None:
        self.index = index
        self.skip_pod = skip_pod
        """(namespace, name) whose claims are ignored: the exporter's own pod."""
        self.watch = watch
        self._unresolved: Counter[str] = Counter()
        self._logged: set[tuple[str, str, str]] = set()

    @classmethod
    def from_config(cls, config: KubernetesConfig, **watch_options: Any) -> DraClaims:
        """Return the claims' reader for these settings. This is cheap: the watch (and the import
        of `kubernetes`) starts only with `start()`."""
        skip_pod = None
        if config.scope != "pod":
            skip_pod = exporter_pod(config)
            if skip_pod is None:
                log.warning("DRA: cannot tell which pod is this exporter (set POD_NAME and "
                            "POD_NAMESPACE from the downward API): an admin-access claim of "
                            "its own would show its pod on every GPU no workload claims")
        index = SliceIndex()
        watch = None
        if config.node_name:
            watch = ResourceSliceWatch(config.node_name, index, **watch_options)
        else:
            log.error("DRA attribution needs NODE_NAME (set it from spec.nodeName) to watch "
                      "this node's ResourceSlices; DRA devices stay unattributed")
        return cls(index, skip_pod=skip_pod, watch=watch)

    def start(self) -> None:
        """Start watching this node's ResourceSlices, when DRA attribution is on."""
        if self.watch is not None:
            self.watch.start()

    def close(self) -> None:
        """Stop watching the ResourceSlices."""
        if self.watch is not None:
            self.watch.close()

    def allocations(self, pods: Iterable[PodResources]) -> list[Allocation]:
        """Return one allocation per resolved pair of container and device claimed from
        `gpu.nvidia.com`; what cannot be resolved is counted, and the count replaces the previous
        call's."""
        out: list[Allocation] = []
        unresolved: Counter[str] = Counter()
        for pod in pods:
            if (pod.namespace, pod.name) == self.skip_pod:
                continue
            for container in pod.containers:
                for claim in container.dynamic_resources:
                    for resource in claim.claim_resources:
                        if resource.driver_name != DRA_GPU_DRIVER:
                            continue
                        alloc, reason = self._resolve(pod, container.name, claim, resource)
                        if alloc is not None:
                            out.append(alloc)
                        else:
                            unresolved[reason] += 1
        self._unresolved = unresolved
        return out

    def _resolve(
        self, pod: PodResources, container: str, claim: Any, resource: Any
    ) -> tuple[Allocation | None, str]:
        pool, name = resource.pool_name, resource.device_name
        device = self.index.lookup(pool, name)
        if device is None or device.uuid is None:
            reason = NO_RESOURCE_SLICE if device is None else NO_UUID
            self._log_once(pool, name, reason)
            return None, reason
        share_id = resource.share_id if resource.HasField("share_id") else ""
        labels = claim_labels(claim.claim_name, claim.claim_namespace, pool, name, device)
        if share_id:
            labels += ((names.DRA_SHARE_ID, share_id),)
        return Allocation(pod.namespace, pod.name, container, DRA_GPU_DRIVER, device.uuid,
                          share_id=share_id, claim_labels=labels), ""

    def _log_once(self, pool: str, name: str, reason: str) -> None:
        key = (pool, name, reason)
        if key in self._logged:
            return
        if len(self._logged) >= _LOGGED_MEMORY:
            self._logged.clear()  # This bounds the memory used under endless churn.
        self._logged.add(key)
        if reason == NO_RESOURCE_SLICE:
            log.info("DRA device %s/%s is in no ResourceSlice of this node seen so far; its "
                     "series stay unattributed until one names it", pool, name)
        else:
            log.warning("DRA device %s/%s has no uuid attribute in its ResourceSlice "
                        "(dynamic MIG or vfio); it cannot be attributed", pool, name)

    def families(self) -> list[Family]:
        """Return the DRA metric families: whether the ResourceSlice watch is up, its errors, and
        the claimed devices that could not be resolved, by reason."""
        watch = self.watch
        return [
            DRA_SLICE_WATCH_UP.single(1.0 if watch is not None and watch.up else 0.0),
            DRA_SLICE_WATCH_ERRORS.single(float(watch.errors if watch is not None else 0)),
            DRA_UNRESOLVED_DEVICES.family(
                DRA_UNRESOLVED_DEVICES.sample(float(self._unresolved[reason]), reason=reason)
                for reason in UNRESOLVED_REASONS
            ),
        ]

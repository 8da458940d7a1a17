"""Doctor's Kubernetes checks: the pod-resources socket, what the kubelet reports, the API
server."""

from __future__ import annotations

import os
import stat
from collections import Counter
from collections.abc import Sequence
from typing import TYPE_CHECKING

from exporter.devices.model import Inventory
from exporter.doctor.report import FAIL, INFO, OK, WARN, Report
from exporter.k8s.config import KubernetesConfig

if TYPE_CHECKING:
    from exporter.k8s.attribution import Allocation
    from exporter.k8s.kubelet_client import PodResourcesClient


def check_socket(path: str, report: Report) -> bool:
    """Report whether the pod-resources socket at `path` exists, is a socket and may be
    connected to, with the fix for each problem; return True when the kubelet can be called
    through it."""
    directory = os.path.dirname(path) or "."
    try:
        st = os.stat(path)
    except FileNotFoundError:
        hint = ("the directory exists but holds no socket: the kubelet is not running or uses "
                "another --root-dir" if os.path.isdir(directory) else
                f"{directory} is not mounted into this container")
        report.line(FAIL, "pod-resources socket", f"{path} does not exist ({hint})",
                    "mount the host directory /var/lib/kubelet/pod-resources (hostPath, type "
                    "Directory, readOnly) — the directory, not the socket — or point "
                    "--kubernetes.pod-resources-socket at your distribution's path (k0s, "
                    "microk8s and custom kubelet root dirs differ)")
        return False
    except PermissionError:
        report.line(FAIL, "pod-resources socket", f"{path}: permission denied on the path",
                    "run the exporter as uid 0 (runAsUser: 0; no capabilities are needed)")
        return False
    if not stat.S_ISSOCK(st.st_mode):
        report.line(FAIL, "pod-resources socket", f"{path} exists but is not a unix socket",
                    "point --kubernetes.pod-resources-socket at kubelet.sock inside the mounted "
                    "pod-resources directory")
        return False
    report.line(OK, "pod-resources socket", f"{path} present")
    if not os.access(path, os.R_OK | os.W_OK):
        report.line(FAIL, "pod-resources permission",
                    f"uid {os.geteuid()} may not connect to {path} (connecting needs write "
                    "permission on the socket)",
                    "run the exporter as uid 0 (runAsUser: 0); no capability is needed and a "
                    "read-only mount works")
        return False
    report.line(OK, "pod-resources permission", f"uid {os.geteuid()} may connect")
    return True


_GRPC_FIXES = {
    "UNAVAILABLE": (
        "nothing answers on the socket (a stale socket left by a previous kubelet, typically "
        "because the socket file was mounted instead of its directory)",
        "mount the directory /var/lib/kubelet/pod-resources, not kubelet.sock; check the "
        "kubelet is running",
    ),
    "DEADLINE_EXCEEDED": ("the kubelet did not answer in time",
                          "check kubelet health on the node (journalctl -u kubelet)"),
    "RESOURCE_EXHAUSTED": (
        "the kubelet rate-limited the call (100 qps shared by every client on the node)",
        "find the agent polling pod-resources in a loop; the exporter itself calls once per poll",
    ),
    "PERMISSION_DENIED": ("the kubelet refused the call", "run the exporter as uid 0"),
    "UNIMPLEMENTED": ("this kubelet does not serve pod-resources v1",
                      "pod-resources v1 List needs Kubernetes 1.20+ (GA in 1.28)"),
}


async def kubelet_checks(
    config: KubernetesConfig, inventory: Inventory | None, timeout_s: float, report: Report
) -> None:
    """Call the kubelet and report what it answers: its pods and the devices they hold, the
    resource names it reports, this pod's devices with `--scope pod`, and whether each device
    id held maps to a GPU or MIG instance of `inventory` (skipped without one)."""
    from exporter.k8s.attribution import (
        DeviceResolver,
        attribute,
        resource_accepted,
    )
    from exporter.k8s.kubelet_client import KubeletCallError, PodResourcesClient, allocations_of

    client = PodResourcesClient(config.pod_resources_socket, timeout_s=timeout_s)
    try:
        try:
            pods = await client.fetch()
        except KubeletCallError as err:
            found, fix = _GRPC_FIXES.get(err.code, (f"the call failed: {err.detail}",
                                                    "check the kubelet's logs"))
            report.line(FAIL, "kubelet List", f"{err.code}: {found} ({err.detail})", fix)
            return
        allocations = allocations_of(pods)
        holding = len({(a.namespace, a.pod) for a in allocations})
        report.line(OK, "kubelet List", f"answered: {len(pods)} pods, {holding} holding devices")
        allocatable: dict[str, list[str]] = {}
        try:
            for dev in await client.allocatable():
                allocatable.setdefault(dev.resource_name, []).extend(dev.device_ids)
        except KubeletCallError as err:
            report.line(INFO, "kubelet GetAllocatableResources",
                        f"{err.code}: {err.detail} (resource names below come from allocations "
                        "only)")

        if config.scope == "pod":
            await _check_own_pod(client, config, report)
        _check_resource_names(config, allocatable, allocations, report)

        accepted = [a for a in allocations
                    if resource_accepted(a.resource, config.resource_names)]
        if inventory is None or not accepted:
            return
        result = attribute(accepted, inventory, DeviceResolver(),
                           extra_resource_names=config.resource_names)
        for alloc, bad in result.parse_errors:
            report.line(FAIL, "device id",
                        f"{bad.shown!r} held by {alloc.namespace}/{alloc.pod} ({alloc.resource}) "
                        f"is not understood: {bad.reason}",
                        "this device plugin reports ids in an unknown format; please report it")
        for item in result.unattributed:
            if item.reason != "unknown_device":
                continue
            alloc = item.allocation
            report.line(FAIL, "device id",
                        f"{alloc.device_id} held by {alloc.namespace}/{alloc.pod} "
                        f"({alloc.resource}) is not among the GPUs this exporter sees",
                        "give the exporter every GPU: NVIDIA_VISIBLE_DEVICES=all and no "
                        "nvidia.com/gpu request for the exporter itself (or the device was "
                        "removed / MIG was reconfigured since the pod started)")
        if not result.unattributed:
            held = {found.entity.key for _, found in result.resolved}
            shared = len(held - set(result.attribution.owners))
            report.line(OK, "attribution",
                        f"all {len(result.resolved)} allocated devices map to GPUs or MIG "
                        f"instances ({len(result.attribution.owners)} held exclusively, "
                        f"{shared} shared)")
    finally:
        await client.close()


async def _check_own_pod(client: PodResourcesClient, config: KubernetesConfig,
                         report: Report) -> None:
    """Report how many devices the kubelet says this pod (POD_NAMESPACE/POD_NAME) holds,
    which is what `--scope pod` exports."""
    from exporter.k8s.kubelet_client import KubeletCallError

    if not (config.pod_name and config.pod_namespace):
        report.line(FAIL, "pod scope", "POD_NAME / POD_NAMESPACE are not set",
                    "set both from the downward API (fieldRef metadata.name, metadata.namespace)")
        return
    try:
        mine = await client.fetch((config.pod_namespace, config.pod_name))
    except KubeletCallError as err:
        report.line(FAIL, "pod scope", f"Get({config.pod_namespace}/{config.pod_name}) failed: "
                    f"{err.code} {err.detail}",
                    "the kubelet must know this pod: run doctor inside the pod it describes")
        return
    how = "List filtered to this pod (Get is disabled here)" if client.get_disabled else "Get"
    devices = sum(len(d.device_ids) for p in mine for c in p.containers for d in c.devices)
    verdict = OK if devices else WARN
    fix = None if devices else ("a sidecar sees the GPUs its pod's other containers requested; "
                                "this pod holds none")
    report.line(verdict, "pod scope", f"{config.pod_namespace}/{config.pod_name} holds "
                f"{devices} devices (found with {how})", fix)


def _check_resource_names(
    config: KubernetesConfig,
    allocatable: dict[str, list[str]],
    allocations: Sequence[Allocation],
    report: Report,
) -> None:
    """Report each resource name the kubelet knows: accepted as GPUs, carrying GPU device ids
    but not accepted (with the flag that would accept it), or not a GPU resource; warn when
    none is a GPU resource."""
    # Imported here as kubelet_checks does: doctor loads the k8s layer only when it runs.
    from exporter.k8s.attribution import resource_accepted
    from exporter.k8s.device_ids import looks_like_gpu_id

    ids: dict[str, list[str]] = {name: list(v) for name, v in allocatable.items()}
    allocated: Counter[str] = Counter()
    for a in allocations:
        ids.setdefault(a.resource, []).append(a.device_id)
        allocated[a.resource] += 1
    gpu_like = 0
    for name in sorted(ids):
        count = f"{len(set(allocatable.get(name, [])))} allocatable, {allocated[name]} allocated"
        if resource_accepted(name, config.resource_names):
            gpu_like += 1
            report.line(OK, f"resource {name}", f"accepted ({count})")
        elif any(looks_like_gpu_id(i) for i in ids[name]):
            gpu_like += 1
            report.line(FAIL, f"resource {name}", f"carries GPU device ids but is not accepted "
                        f"({count})",
                        f"--kubernetes.resource-names {name} (or NVIDIA_RESOURCE_NAMES)")
        else:
            report.line(INFO, f"resource {name}", f"not a GPU resource; ignored ({count})")
    if gpu_like == 0:
        report.line(WARN, "resources", "the kubelet reports no GPU resources",
                    "is the NVIDIA device plugin running on this node "
                    "(nvidia.com/gpu.deploy.device-plugin label, GPU Operator)?")


def check_enrichment(config: KubernetesConfig, kubeconfig: str | None, report: Report) -> None:
    """Report whether this node's pods (or this pod) can be listed from the API server, as
    the pod labels need: NODE_NAME set, the kubernetes client installed, the list allowed."""
    # The pod-labels regex was checked when the settings were resolved.
    if config.scope != "pod" and not config.node_name:
        report.line(FAIL, "API server", "NODE_NAME is not set, so this node's pods can't be "
                    "selected", "set NODE_NAME from the downward API (fieldRef spec.nodeName)")
        return
    try:
        from exporter.k8s.pod_access import check_access
    except ImportError as exc:
        report.line(FAIL, "API server", f"the kubernetes client is missing ({exc})",
                    "reinstall gpu-exporter: the kubernetes client is one of its dependencies")
        return
    ok, message = check_access(config, kubeconfig=kubeconfig)
    report.line(OK if ok else FAIL, "API server", message)

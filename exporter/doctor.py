"""`gpu-exporter doctor`: what stands between this node and labelled GPU metrics.

Each check prints one line — its verdict, what it found and, when something is wrong, the fix —
in the order a problem would hide the next one: NVML, the GPUs it shows, the kubelet's
pod-resources socket, the resource names and device ids the kubelet reports, and (when pod
labels are asked for) the API server. Exit status 1 when any check failed, else 0.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import stat
import sys
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TextIO

from exporter.config import kubernetes_config
from exporter.devices.errors import (
    PROFILING_ADMIN_ONLY,
    PROFILING_ADMIN_ONLY_FIX,
    is_nvml_error,
    nvml_code,
)
from exporter.devices.model import Inventory
from exporter.devices.nvml_api import (
    NVML_ERROR_DRIVER_NOT_LOADED,
    NVML_ERROR_LIB_RM_VERSION_MISMATCH,
    NVML_ERROR_LIBRARY_NOT_FOUND,
    NVML_ERROR_NO_PERMISSION,
    NvmlLib,
    error_name,
    load_pynvml,
)
from exporter.k8s.config import KubernetesConfig
from exporter.options import ConfigError, Resolution, build_parser, parse_command_line
from exporter.options import serve_table as opt

if TYPE_CHECKING:
    from exporter.devices.enumerate import Enumeration

OK, INFO, WARN, FAIL = "OK", "INFO", "WARN", "FAIL"

_NVML_FIXES = {
    NVML_ERROR_LIBRARY_NOT_FOUND: (
        "libnvidia-ml.so.1 is not visible in this container",
        "run with the NVIDIA container runtime (runtimeClassName: nvidia where it isn't the "
        "default) and NVIDIA_VISIBLE_DEVICES=all, NVIDIA_DRIVER_CAPABILITIES=utility; on a "
        "machine without GPUs use --backend sim",
    ),
    NVML_ERROR_DRIVER_NOT_LOADED: (
        "the NVIDIA kernel driver is not loaded on this host",
        "check the driver (GPU Operator driver pod, or `lsmod | grep nvidia` on the node); "
        "without GPUs use --backend sim",
    ),
    NVML_ERROR_NO_PERMISSION: (
        "no permission to open the GPU device nodes",
        "run as uid 0 with the NVIDIA runtime injecting /dev/nvidia* (no capabilities needed)",
    ),
    NVML_ERROR_LIB_RM_VERSION_MISMATCH: (
        "the user-space NVML library and the kernel driver have different versions",
        "the driver was upgraded without reloading it: drain and reboot the node",
    ),
}


@dataclass
class Report:
    out: TextIO
    verdicts: Counter[str] = field(default_factory=Counter)

    def line(self, verdict: str, check: str, found: str, fix: str | None = None) -> None:
        self.verdicts[verdict] += 1
        text = f"[{verdict:>4}] {check}: {found}"
        if fix:
            text += f" -> fix: {fix}"
        print(text, file=self.out, flush=True)

    @property
    def failed(self) -> bool:
        return self.verdicts[FAIL] > 0


# -- NVML -------------------------------------------------------------------------------------


def _load_library(settings: Resolution, report: Report) -> NvmlLib | None:
    if settings[opt.BACKEND] == "sim":
        try:
            from exporter.devices.sim import SimNvml, parse_fault, profile_names
        except ImportError as exc:
            report.line(FAIL, "NVML", f"the simulated node is not available ({exc})")
            return None
        profile = settings[opt.SIM_PROFILE]
        if profile not in profile_names():
            report.line(FAIL, "NVML", f"unknown --sim.profile {profile!r}",
                        "one of " + ", ".join(profile_names()))
            return None
        try:
            faults = [parse_fault(spec) for spec in settings[opt.SIM_FAULTS]]
            return SimNvml(profile, seed=settings[opt.SIM_SEED], faults=faults)
        except ValueError as exc:
            report.line(FAIL, "NVML", f"--sim.fault: {exc}")
            return None
    try:
        return load_pynvml()
    except ImportError:
        report.line(FAIL, "NVML", "the pynvml module is missing",
                    "install nvidia-ml-py (not the deprecated `pynvml` package)")
        return None


def check_nvml(settings: Resolution, report: Report) -> Inventory | None:
    """NVML loadable, driver version, GPUs and MIG instances; the inventory when all worked."""
    lib = _load_library(settings, report)
    if lib is None:
        return None
    what = (f"simulated node {settings[opt.SIM_PROFILE]!r}" if settings[opt.BACKEND] == "sim"
            else "libnvidia-ml.so.1")
    try:
        lib.nvmlInit()
    except Exception as exc:
        if not is_nvml_error(exc):
            report.line(FAIL, "NVML", f"nvmlInit failed unexpectedly: {exc!r}")
            return None
        code = nvml_code(exc)
        found, fix = _NVML_FIXES.get(
            code, (f"nvmlInit failed with {error_name(code)}", "see the driver logs (dmesg)")
        )
        report.line(FAIL, "NVML", f"{found} ({error_name(code)})", fix)
        return None
    report.line(OK, "NVML", f"loaded {what}")
    try:
        return _check_devices(lib, report)
    finally:
        with contextlib.suppress(Exception):  # nothing useful to add to the report
            lib.nvmlShutdown()


def _check_devices(lib: NvmlLib, report: Report) -> Inventory | None:
    from exporter.devices.enumerate import enumerate_devices
    from exporter.devices.filter import ALL_DEVICES

    try:
        driver = lib.nvmlSystemGetDriverVersion()
        driver = driver.decode() if isinstance(driver, bytes) else str(driver)
        report.line(OK, "driver", f"version {driver}")
    except Exception as exc:
        report.line(WARN, "driver", f"version unreadable ({exc})")
    try:
        enum = enumerate_devices(lib, ALL_DEVICES)
        inventory = enum.inventory
    except Exception as exc:
        report.line(FAIL, "GPUs", f"enumeration failed: {exc}",
                    "check `nvidia-smi` on the node; a GPU that fell off the bus needs a reset")
        return None
    if not inventory.gpus:
        report.line(FAIL, "GPUs", "NVML shows no GPUs",
                    "set NVIDIA_VISIBLE_DEVICES=all for the exporter (a container sees only the "
                    "GPUs injected into it), and don't request nvidia.com/gpu for it")
        return inventory
    models = Counter(g.model for g in inventory.gpus)
    report.line(OK, "GPUs", f"{len(inventory.gpus)} visible: "
                + ", ".join(f"{n}x {m}" for m, n in sorted(models.items())))
    mig_gpus = sorted({i.gpu for i in inventory.instances})
    if mig_gpus:
        devices = sum(len(i.mig_devices) for i in inventory.instances)
        report.line(OK, "MIG", f"{len(inventory.instances)} GPU instances ({devices} MIG devices) "
                    f"on GPU {', '.join(map(str, mig_gpus))}")
    else:
        report.line(INFO, "MIG", "no MIG instances (no GPU in MIG mode)")
    _check_profiling(lib, enum, report)
    return inventory


def _check_profiling(lib: NvmlLib, enum: Enumeration, report: Report) -> None:
    """GPM, the source of DCGM_FI_PROF_*: a driver restricting it to administrators still
    reports support, so one sample is taken per GPU (per first GPU instance with MIG)."""
    from exporter.devices.gpm import probe_gpus

    found = probe_gpus(lib, enum)
    refused = [i for i, verdict in found.items() if verdict == "no_permission"]
    working = [i for i, verdict in found.items() if verdict == "supported"]
    failed = {i: v for i, v in found.items() if v not in ("supported", "unsupported",
                                                          "no_permission")}
    if refused:
        which = (f"all {len(found)} GPUs" if len(refused) == len(found)
                 else "GPU " + ", ".join(map(str, refused)))
        report.line(WARN, "profiling", f"{PROFILING_ADMIN_ONLY} ({which})",
                    PROFILING_ADMIN_ONLY_FIX)
    elif failed:
        report.line(WARN, "profiling", "GPM sampling failed: " + ", ".join(
            f"GPU {i}: {why}" for i, why in failed.items()))
    elif working:
        report.line(OK, "profiling", f"GPM answers on {len(working)} of {len(found)} GPUs "
                    "(DCGM_FI_PROF_* fields)")
    elif found:
        report.line(INFO, "profiling", "no GPU has GPM (it needs Hopper or newer): "
                    "DCGM_FI_PROF_* fields are not exported")


# -- kubelet ---------------------------------------------------------------------------------


def _check_socket(path: str, report: Report) -> bool:
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


async def _kubelet_checks(
    config: KubernetesConfig, inventory: Inventory | None, timeout_s: float, report: Report
) -> None:
    from exporter.k8s.attribution import (
        DeviceResolver,
        attribute,
        resource_accepted,
    )
    from exporter.k8s.client import KubeletCallError, PodResourcesClient, allocations_of
    from exporter.k8s.device_ids import looks_like_gpu_id

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
        _check_resource_names(config, allocatable, allocations, report,
                              resource_accepted, looks_like_gpu_id)

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


async def _check_own_pod(client: Any, config: KubernetesConfig, report: Report) -> None:
    from exporter.k8s.client import KubeletCallError

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
    allocations: Sequence[Any],
    report: Report,
    resource_accepted: Any,
    looks_like_gpu_id: Any,
) -> None:
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
                    "is the NVIDIA device plugin running on this node (nvidia.com/gpu.deploy."
                    "device-plugin label, GPU Operator)?")


def check_enrichment(config: KubernetesConfig, kubeconfig: str | None, report: Report) -> None:
    # The pod-labels regex was checked when the settings were resolved.
    if config.scope != "pod" and not config.node_name:
        report.line(FAIL, "API server", "NODE_NAME is not set, so this node's pods can't be "
                    "selected", "set NODE_NAME from the downward API (fieldRef spec.nodeName)")
        return
    try:
        from exporter.k8s.enrich import check_access
    except ImportError as exc:
        report.line(FAIL, "API server", f"the kubernetes client is missing ({exc})",
                    "pip install 'gpu-exporter[kubernetes]'")
        return
    ok, message = check_access(config, kubeconfig=kubeconfig)
    report.line(OK if ok else FAIL, "API server", message)


# -- entry ------------------------------------------------------------------------------------


DESCRIPTION = ("Check NVML, the GPUs, the kubelet pod-resources API and the API server; one "
               "line per check with the fix. Takes serve's flags and variables for what it "
               "checks. Exit status 1 if any check failed.")


def report_settings(settings: Resolution, report: Report) -> None:
    """One line per option not at its default, naming where its value came from: what the
    checks below ran with (and, in the exporter's pod, what serve runs with)."""
    for setting in settings.changed():
        report.line(INFO, "setting", setting.describe())
    for warning in settings.warnings():
        report.line(WARN, "setting", warning)


def main(argv: list[str], out: TextIO | None = None) -> int:
    report = Report(out or sys.stdout)
    try:
        settings = parse_command_line("doctor", argv, os.environ,
                                      build_parser("doctor", description=DESCRIPTION))
    except ConfigError as exc:
        report.line(FAIL, "setting", str(exc))
    else:
        report_settings(settings, report)
        _run_checks(settings, report)
    summary = ", ".join(f"{n} {v}" for v, n in sorted(report.verdicts.items()))
    print(f"doctor: {summary}; {'some checks failed' if report.failed else 'all checks passed'}",
          file=report.out)
    return 1 if report.failed else 0


def _run_checks(settings: Resolution, report: Report) -> None:
    inventory = check_nvml(settings, report)
    if settings[opt.SKIP_KUBERNETES]:
        return
    config = kubernetes_config(settings, enabled=True)
    if _check_socket(config.pod_resources_socket, report):
        asyncio.run(_kubelet_checks(config, inventory, settings[opt.KUBELET_TIMEOUT], report))
    if config.pod_labels:
        check_enrichment(config, settings[opt.KUBECONFIG], report)

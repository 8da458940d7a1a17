"""Doctor's NVML checks: the library loads, the driver answers, the GPUs and MIG instances."""

from __future__ import annotations

import contextlib
from collections import Counter
from typing import TYPE_CHECKING

from exporter.config import sim_settings
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
from exporter.doctor.report import FAIL, INFO, OK, WARN, Report
from exporter.options import Resolution
from exporter.options import serve_table as opt

if TYPE_CHECKING:
    from exporter.devices.enumerate import Enumeration

_NVML_FIXES = {
    NVML_ERROR_LIBRARY_NOT_FOUND: (
        "libnvidia-ml.so.1 is not visible in this container",
        "run with the NVIDIA container runtime (runtimeClassName: nvidia where it isn't the "
        "default) and NVIDIA_VISIBLE_DEVICES=all, NVIDIA_DRIVER_CAPABILITIES=compute,utility "
        "(the image sets both); on a machine without GPUs use --backend sim",
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


def _load_library(settings: Resolution, report: Report) -> NvmlLib | None:
    """Return pynvml, or the simulated node's library with --backend sim; None, with a
    failed line in the report, when neither can be loaded."""
    if settings[opt.BACKEND] == "sim":
        try:
            from exporter.simulated.node import SimNvml, parse_fault, profile_names
        except ImportError as exc:
            report.line(FAIL, "NVML", f"the simulated node is not available ({exc})")
            return None
        sim = sim_settings(settings)
        if sim.profile not in profile_names():
            report.line(FAIL, "NVML", f"unknown --sim.profile {sim.profile!r}",
                        "one of " + ", ".join(profile_names()))
            return None
        try:
            faults = [parse_fault(spec) for spec in sim.faults]
            return SimNvml(sim.profile, seed=sim.seed, faults=faults)
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
    """Check that NVML loads, the driver version, the GPUs and MIG instances; return the inventory
    when all worked."""
    lib = _load_library(settings, report)
    if lib is None:
        return None
    what = (f"simulated node {sim_settings(settings).profile!r}"
            if settings[opt.BACKEND] == "sim" else "libnvidia-ml.so.1")
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
    """Check GPM, the source of DCGM_FI_PROF_*: a driver restricting it to administrators still
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
        report.line(INFO, "profiling", "no GPU has GPM (it needs Hopper or newer): of the "
                    "DCGM_FI_PROF_* fields only those NVML measures too are exported, from "
                    "NVML (none with --no-prof-counterparts)")

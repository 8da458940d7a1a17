"""Errors a device backend reports upward."""

from __future__ import annotations

from typing import Any

from exporter.devices.nvml_api import NVML_ERROR_UNKNOWN, error_name


class BackendUnavailable(RuntimeError):
    """The backend cannot work on this machine at all (e.g. no NVML library)."""


PROFILING_ADMIN_ONLY = (
    "GPM profiling is restricted to administrators on this node: NVML answers NO_PERMISSION "
    "(the driver's RmProfilingAdminOnly is 1), so DCGM_FI_PROF_* fields are not exported")
PROFILING_ADMIN_ONLY_FIX = (
    "load the nvidia kernel module with NVreg_RestrictProfilingToAdminUsers=0 (`options nvidia "
    "NVreg_RestrictProfilingToAdminUsers=0` in /etc/modprobe.d/, or the GPU Operator driver's "
    "kernelModuleConfig) and reload it, or give the exporter the SYS_ADMIN capability; "
    "`grep RmProfilingAdminOnly /proc/driver/nvidia/params` shows the setting")
"""Logged once by the backend and shown by `doctor`: what the driver setting is, and the fix."""


def nvml_code(exc: BaseException) -> int:
    """Return the NVML return code (`nvmlReturn_t`) of a pynvml error, which pynvml keeps in
    `.value`."""
    value: Any = getattr(exc, "value", None)
    return value if isinstance(value, int) else NVML_ERROR_UNKNOWN


def is_nvml_error(exc: BaseException) -> bool:
    """Return whether the exception is one of pynvml's NVML errors."""
    # pynvml creates its NVMLError subclasses at import time; matching on the base class name
    # keeps this module free of a pynvml import.
    return any(cls.__name__ == "NVMLError" for cls in type(exc).__mro__)


def describe(exc: BaseException) -> str:
    """Return the error's NVML return code name followed by its message, for a log line."""
    return f"{error_name(nvml_code(exc))} ({exc})"

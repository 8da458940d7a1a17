"""Errors a device backend reports upward."""

from __future__ import annotations

from typing import Any

from exporter.devices.nvml_api import NVML_ERROR_UNKNOWN, error_name


class BackendUnavailable(RuntimeError):
    """The backend cannot work on this machine at all (e.g. no NVML library)."""


def nvml_code(exc: BaseException) -> int:
    """The nvmlReturn_t of a pynvml error (pynvml errors carry it as `.value`)."""
    value: Any = getattr(exc, "value", None)
    return value if isinstance(value, int) else NVML_ERROR_UNKNOWN


def is_nvml_error(exc: BaseException) -> bool:
    # pynvml creates its NVMLError subclasses at import time; matching on the base class name
    # keeps this module free of a pynvml import.
    return any(cls.__name__ == "NVMLError" for cls in type(exc).__mro__)


def describe(exc: BaseException) -> str:
    return f"{error_name(nvml_code(exc))} ({exc})"

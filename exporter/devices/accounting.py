"""Accounting for failed NVML calls, shared by the life cycle and the read paths.

Counts feed `gpu_exporter_nvml_errors_total` by (function, return code); an answer meaning
"this device will not answer this" is logged once per device and question, since it repeats
until the next enumeration otherwise.
"""

from __future__ import annotations

import collections
import logging

from exporter.devices.errors import is_nvml_error, nvml_code
from exporter.devices.nvml_api import NVML_ERROR_GPU_IS_LOST, error_name

log = logging.getLogger(__name__)


class GpuLost(Exception):
    """A call on the GPU being read answered GPU_IS_LOST: it leaves the inventory until it
    answers again."""


class CallErrors:
    """Count failed NVML calls by function and return code, and log each unsupported question once
    per device."""

    def __init__(self) -> None:
        self.counts: collections.Counter[tuple[str, str]] = collections.Counter()
        """Failed calls since start, by function and return code name."""
        self._logged_unsupported: set[tuple[str, str]] = set()

    def count(self, function: str, code: int) -> None:
        """Count one failed call of this NVML function with this return code."""
        self.counts[(function, error_name(code))] += 1

    def count_exception(self, function: str) -> None:
        """Count a call that failed with something other than an NVML error."""
        self.counts[(function, "EXCEPTION")] += 1

    def check_lost(self, exc: Exception, function: str) -> None:
        """Count an NVML error; raise GpuLost when it says the GPU is gone. Anything that is
        not an NVML error is a bug and propagates."""
        if not is_nvml_error(exc):
            raise exc
        code = nvml_code(exc)
        self.count(function, code)
        if code == NVML_ERROR_GPU_IS_LOST:
            raise GpuLost() from exc

    def note_unsupported(self, uid: str, what: str, function: str, code: int) -> None:
        """Count a call that the device does not support, and log it the first time this device
        answers so for this question."""
        self.count(function, code)
        if (uid, what) not in self._logged_unsupported:
            self._logged_unsupported.add((uid, what))
            log.info("%s: %s answers %s; its series are omitted", uid, what, error_name(code))

"""A MIG GPU instance's profile (`GPU_I_PROFILE`) as NVML names it.

dcgm-exporter 4.8.4 labels a GPU instance with the name of its profile that NVML gives
(`nvmlDeviceGetGpuInstanceProfileInfoByIdV` on the parent GPU, for the instance's profile
id), e.g. `7g.80gb` where DCGM's own name said `7g.79gb`, and falls back to the previous
name when NVML fails or answers an empty name. Here the instance's profile id comes from
`nvmlDeviceGetGpuInstanceById` and `nvmlGpuInstanceGetInfo` (DCGM reads the same id from
NVML), and the fallback is the profile in the MIG device's name (`3g.71gb` in
`NVIDIA H200 MIG 1c.3g.71gb`, as `exporter.devices.enumerate.profile_from_name` reads it).

nvidia-smi prints a profile as `MIG 3g.71gb`; a leading `MIG ` is dropped, so the label keeps
the `<g>g.<gb>gb` form DCGM, the device plugin and dashboards use.

Called once per GPU instance and enumeration, on the poll worker, never per poll.
"""

from __future__ import annotations

import logging
from typing import Any, Protocol, cast

from exporter.devices.errors import describe, is_nvml_error
from exporter.devices.nvml_api import Handle

log = logging.getLogger(__name__)

_NVML_PREFIX = "MIG "
_CALLS = ("nvmlDeviceGetGpuInstanceById", "nvmlGpuInstanceGetInfo",
          "nvmlDeviceGetGpuInstanceProfileInfoByIdV")


class GpuInstanceProfileCalls(Protocol):
    """The NVML calls that name a GPU instance's profile (pynvml's names and shapes)."""

    def nvmlDeviceGetGpuInstanceById(self, handle: Handle, gi_id: int) -> Handle:
        """Return the handle of the GPU instance with this id on the GPU."""
        ...
    def nvmlGpuInstanceGetInfo(self, gi_handle: Handle) -> Any:
        """Return the GPU instance's information, whose `.profileId` is its profile id (the ID
        that `nvidia-smi mig -lgip` shows)."""
        ...
    def nvmlDeviceGetGpuInstanceProfileInfoByIdV(self, handle: Handle, profile_id: int) -> Any:
        """Return the profile's information, whose `.name` is the profile's name
        (NUL-terminated)."""
        ...


def _text(value: str | bytes) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else value


def nvml_profile_name(lib: object, parent: Handle, gi_id: int) -> str | None:
    """Return NVML's name of GPU instance `gi_id`'s profile on the GPU `parent`, without
    `MIG `; None when the library lacks the calls, one fails, or the name is empty."""
    if not all(hasattr(lib, name) for name in _CALLS):
        return None
    calls = cast(GpuInstanceProfileCalls, lib)
    try:
        instance = calls.nvmlDeviceGetGpuInstanceById(parent, gi_id)
        profile_id = int(calls.nvmlGpuInstanceGetInfo(instance).profileId)
        info = calls.nvmlDeviceGetGpuInstanceProfileInfoByIdV(parent, profile_id)
    except Exception as exc:
        if not is_nvml_error(exc):
            raise
        log.debug("GPU instance %d: NVML names no profile (%s); using the MIG device's name",
                  gi_id, describe(exc))
        return None
    name = _text(info.name).split("\0", 1)[0].strip()
    name = name.removeprefix(_NVML_PREFIX).strip()
    return name or None

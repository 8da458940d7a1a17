"""NVLink entities: which links of a GPU are up, found once per plan.

dcgm-exporter exports link fields for every link whose state is up; a GPU in MIG mode
answers no NVLink query, and one without NVLink answers NOT_SUPPORTED for link 0.
"""

from __future__ import annotations

from exporter.devices.errors import is_nvml_error
from exporter.devices.nvml_api import NVML_NVLINK_MAX_LINKS, Handle, NvmlLib

LinkKey = tuple[int, int]
"""(gpu index, link index)."""

LinkValues = dict[LinkKey, dict[str, float]]
"""One poll's values of link entities: for each link, the value of each field by name."""


def active_links(lib: NvmlLib, handle: Handle) -> tuple[int, ...]:
    """Return the indices of the GPU's links that are up. Any error (NOT_SUPPORTED, or a link
    index beyond the GPU's last) means that link is not up; a lost GPU shows at its next read."""
    links = []
    for link in range(NVML_NVLINK_MAX_LINKS):
        try:
            active = lib.nvmlDeviceGetNvLinkState(handle, link)
        except Exception as exc:
            if not is_nvml_error(exc):
                raise
            continue
        if active:
            links.append(link)
    return tuple(links)

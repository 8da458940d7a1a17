"""What the device layer is told at start-up: which devices to read, and over what windows."""

from __future__ import annotations

from dataclasses import dataclass

from exporter.devices.filter import ALL_DEVICES, DeviceFilter


@dataclass(frozen=True, slots=True)
class DeviceSettings:
    """The NVML backend's settings, filled from the serve options whose `fills` names
    `devices.<field>` (exporter/options/serve_table.py, dcgm_table.py) and from
    exporter/config.py."""

    selection: DeviceFilter = ALL_DEVICES
    """The GPUs and MIG instances read and exported (`-d`); the others are left out."""
    xid_count_window_s: float = 300.0
    """The window over which `DCGM_EXP_XID_ERRORS_COUNT` counts XID events."""
    clock_events_count_window_s: float = 300.0
    """The window over which `DCGM_EXP_CLOCK_EVENTS_COUNT` counts polls per reason."""
    prof_counterparts: bool = True
    """Serve NVML's counterparts of DCGM_FI_PROF_* fields on GPUs without GPM."""


DEFAULT_DEVICE_SETTINGS = DeviceSettings()
"""Every setting at its default (what tests and benchmarks read devices with)."""

"""A GPU fault the exporter holds until its clearing event, and what clears each kind.

A fault is an XID or a failing health check on one GPU, with the action NVIDIA's XID catalog
(or its DCGM health-code table) recommends for it. The sampler derives faults every poll and
holds each one until the event that its action names has happened; the node's condition,
Events and taints are written from the faults held. This module is the shape both sides
share: it reads nothing and decides nothing.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Literal

FaultSource = Literal["xid", "health"]
"""Where a fault was seen: an XID event, or a health watch failing with a DCGM code."""


class ClearedBy(enum.Enum):
    """The event that ends a held fault."""

    NEVER_HELD = "never-held"
    """Raised once (an Event at most) and not held: nothing to clear."""
    HOLDER_EXIT = "holder-exit"
    """The processes that held the GPU when the fault happened have all exited."""
    HEALTH_PASS = "health-pass"
    """The health watch that failed passes again."""
    GPU_RESET = "gpu-reset"
    """The GPU has been reset (or the driver reloaded)."""
    REBOOT = "reboot"
    """The node has booted again (its boot id changed)."""


@dataclass(frozen=True, slots=True)
class GpuFault:
    """One fault on one GPU, held from `since` until its clearing event."""

    gpu: int
    """The GPU's NVML index."""
    uuid: str
    """The GPU's UUID, which is what survives a reboot or a re-enumeration."""
    source: FaultSource
    code: str
    """The XID number as text ("79"), or the DCGM health code ("DCGM_FR_VOLATILE_DBE_DETECTED")."""
    name: str
    """The catalog's name for the code ("ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS")."""
    action: str
    """The catalog's recommended action, as the catalog spells it ("RESET_GPU")."""
    fatal: bool
    """Whether the catalog marks the code fatal to the GPU's work."""
    cleared_by: ClearedBy
    since: float
    """Unix time the fault was first seen."""
    boot_id: str
    """The node's boot id when the fault was seen (a reboot clears REBOOT faults)."""

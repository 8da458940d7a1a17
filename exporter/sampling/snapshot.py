"""The immutable result of one poll: everything the exposition needs, nothing it must fetch."""

from __future__ import annotations

from dataclasses import dataclass

from exporter.devices.model import Inventory, Readings
from exporter.fields.csv import Collectors
from exporter.fields.faults import GpuFault
from exporter.k8s.types import NO_ATTRIBUTION, Attribution


@dataclass(frozen=True, slots=True)
class HostLabel:
    """The host label that every device series carries: its name, or None for no label, and its
    value."""

    name: str | None
    """"hostname" (dcgm-exporter 4.8.3 and later, the default), "Hostname" (4.8.2 and
    earlier), or None for no label."""
    value: str


@dataclass(frozen=True, slots=True)
class Snapshot:
    """Everything one poll produced (devices, readings, enabled fields, host label and attribution),
    so the exposition never has to fetch anything."""

    inventory: Inventory
    readings: Readings
    collectors: Collectors
    host: HostLabel
    attribution: Attribution = NO_ATTRIBUTION
    taken_at: float = 0.0
    """Unix time the poll finished."""
    faults: tuple[GpuFault, ...] = ()
    """The faults held after this poll, by GPU, source and code."""
    fault_events: tuple[GpuFault, ...] = ()
    """The faults first raised in this poll, held or not (one per occurrence worth an Event);
    codes whose action raises nothing (IGNORE, NONE) are never here. A republished poll is
    the same Snapshot object, so its events are not new."""

"""The immutable result of one poll: everything the exposition needs, nothing it must fetch."""

from __future__ import annotations

from dataclasses import dataclass

from exporter.devices.model import Inventory, Readings
from exporter.fields.csv import Collectors
from exporter.fields.faults import GpuFault
from exporter.k8s.types import NO_ATTRIBUTION, Attribution


@dataclass(frozen=True, slots=True)
class HostLabel:
    name: str | None
    """"Hostname" (dcgm-exporter up to 4.8), "hostname" (newer), or None for no label."""
    value: str


@dataclass(frozen=True, slots=True)
class Snapshot:
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

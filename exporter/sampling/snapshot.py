"""The immutable result of one poll: everything the exposition needs, nothing it must fetch."""

from __future__ import annotations

from dataclasses import dataclass

from exporter.devices.model import Inventory, Readings
from exporter.fields.csv import Collectors
from exporter.k8s.types import NO_ATTRIBUTION, Attribution


@dataclass(frozen=True, slots=True)
class HostLabel:
    name: str | None
    """"hostname" (dcgm-exporter 4.8.3 and later, the default), "Hostname" (4.8.2 and
    earlier), or None for no label."""
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

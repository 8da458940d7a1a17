"""The neutral shape of exported metrics, shared by every layer that produces some.

Backends, the kubelet client and the sampler describe what they want exposed as `Family`
objects; only `exporter.exposition` turns them into bytes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Labels = tuple[tuple[str, str], ...]
"""Label pairs in exposition order."""

FamilyType = Literal["gauge", "counter", "dcgm-counter", "untyped"]
""""counter" is named without "_total" (the renderer adds it); "dcgm-counter" is a DCGM
field counter, which keeps its name as it is. A collectors file may declare a DCGM field
untyped; its type line then says so (OpenMetrics: unknown)."""


@dataclass(frozen=True, slots=True)
class Sample:
    """One sample of a family: its label set and value."""

    labels: Labels
    value: float


@dataclass(frozen=True, slots=True)
class Family:
    """One metric family to expose: its name, type, help and samples."""

    name: str
    type: FamilyType
    help: str
    samples: tuple[Sample, ...]

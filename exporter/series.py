"""The neutral shape of exported metrics, shared by every layer that produces some.

Backends, the kubelet client and the sampler describe what they want exposed as `Family`
objects; only `exporter.exposition` turns them into bytes.
"""

from __future__ import annotations

from dataclasses import dataclass

Labels = tuple[tuple[str, str], ...]
"""Label pairs in exposition order."""


@dataclass(frozen=True, slots=True)
class Sample:
    labels: Labels
    value: float


@dataclass(frozen=True, slots=True)
class Family:
    name: str
    type: str
    """"gauge", or "counter" (named without "_total"; the renderer adds it). The renderer
    also knows "dcgm-counter": a DCGM field counter, which keeps its name as it is."""
    help: str
    samples: tuple[Sample, ...]

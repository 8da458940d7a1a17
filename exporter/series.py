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
    suffix: str = ""
    """Appended to the family name for this sample (e.g. "_total" for OpenMetrics counters
    is added by the renderer; use this only for things like "_info")."""


@dataclass(frozen=True, slots=True)
class Family:
    name: str
    type: str
    """"gauge", "counter" (name without "_total"; the renderer adds it), "info" or "untyped"."""
    help: str
    samples: tuple[Sample, ...]

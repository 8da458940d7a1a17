"""What attribution hands to the exposition layer."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

from exporter.devices.model import EntityKey as EntityKey
from exporter.devices.model import Inventory
from exporter.series import Family, Labels


@dataclass(frozen=True, slots=True)
class PodRef:
    """The container that holds a device exclusively."""

    pod: str
    namespace: str
    container: str
    extra: Labels = ()
    """Enrichment labels (pod UID, allow-listed pod labels), appended after `pod`."""


SharerValues = Mapping[str, tuple[float | None, ...]]
"""Each sharer's own value of a field, in `Attribution.sharers` order, by field name; None where
it is unknown for that sharer (its series is then left out)."""


@dataclass(frozen=True, slots=True)
class Attribution:
    """Which pod and container holds each device, as the exposition layer uses it to label device
    series."""

    owners: Mapping[EntityKey, PodRef] = field(default_factory=dict)
    """Entities held by exactly one container: their device series carry its labels."""
    visible: frozenset[EntityKey] | None = None
    """With `--scope pod`: the only entities that may appear anywhere. None: all."""
    sharers: Mapping[EntityKey, tuple[PodRef, ...]] = field(default_factory=dict)
    """With virtual GPUs: entities shared by several holders, whose device series are repeated
    once per holder with its labels (`vgpu` in `extra`); never also in `owners`."""
    split: Mapping[EntityKey, SharerValues] = field(default_factory=dict)
    """With virtual GPUs: the fields each sharer of an entity reports its own part of
    (`exporter.k8s.virtual_gpus`). Such a field is shown once with the device's own value
    and no pod labels, then once per sharer with its part; a field not named here shows the
    device's value on every copy."""
    holders: Mapping[EntityKey, tuple[tuple[str, str], ...]] = field(default_factory=dict)
    """Every (namespace, pod) holding each entity, sorted, however it is shared: one owner, the
    sharers of a virtual GPU, or the holders a time-sliced GPU lists only as allocation rows.
    The node fault writer sends a fault's Event to each of them."""
    containers: Mapping[EntityKey, tuple[str, ...]] = field(default_factory=dict)
    """Outside Kubernetes (`--container-labels`): the runtime's containers holding each
    entity, by their `container` label. Each entity's series are kept as they are and
    repeated once per container with `container` added."""


NO_ATTRIBUTION = Attribution()


class AttributionSource(Protocol):
    """What the sampler awaits once per poll (implemented by `exporter.k8s.source`)."""

    async def refresh(self, inventory: Inventory) -> Attribution:
        """Return this poll's attribution. It never raises, is bounded by its own deadline, and
        gives the last good answer on failure."""
        ...

    def families(self) -> list[Family]:
        """Return the source's own metrics and allocation rows, already filtered for
        `--scope pod`."""
        ...

    async def close(self) -> None:
        """Release what the source holds (connections, threads)."""
        ...

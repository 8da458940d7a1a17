"""MIG lookups are cached, misses included, until the inventory changes."""

from __future__ import annotations

from dataclasses import dataclass, field

from exporter.devices.model import Entity, Inventory, MigDevice
from exporter.k8s.attribution import DeviceResolver
from exporter.k8s.device_ids import DeviceId, parse_device_id

from .k8s_helpers import mig_node, mig_uuid


@dataclass(frozen=True)
class CountingInventory(Inventory):
    lookups: list[str] = field(default_factory=list, compare=False)

    def mig_owner(self, mig_uuid: str) -> tuple[Entity, MigDevice] | None:
        self.lookups.append(mig_uuid)
        return super().mig_owner(mig_uuid)


def counting(base: Inventory) -> CountingInventory:
    return CountingInventory(gpus=base.gpus, instances=base.instances,
                             driver_version=base.driver_version)


def parsed(raw: str) -> DeviceId:
    dev = parse_device_id(raw)
    assert isinstance(dev, DeviceId)
    return dev


def test_hits_and_misses_cached_until_the_inventory_changes() -> None:
    inventory = counting(mig_node())
    resolver = DeviceResolver()
    known, unknown = parsed(mig_uuid(1, 5, 0)), parsed(mig_uuid(7, 7, 7))
    for _ in range(5):
        found = resolver.resolve(known, inventory)
        assert found is not None
        assert found.entity.key == (1, 5)
        assert resolver.resolve(unknown, inventory) is None
    assert sorted(inventory.lookups) == sorted([mig_uuid(1, 5, 0), mig_uuid(7, 7, 7)])

    # An equal inventory from a new enumeration keeps the cache...
    same = counting(mig_node())
    assert resolver.resolve(unknown, same) is None
    assert same.lookups == []
    # ...a different one (MIG reconfigured) drops it.
    changed = counting(Inventory(gpus=same.gpus, instances=same.instances[:1]))
    assert resolver.resolve(known, changed) is None
    assert changed.lookups == [mig_uuid(1, 5, 0)]

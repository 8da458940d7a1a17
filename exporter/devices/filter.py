"""The `--devices` selection, in dcgm-exporter's syntax: `f`, `g`, `i`, `g:0,1`, `i:0-2`."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class DeviceFilter:
    gpus: bool = True
    """Emit whole-GPU entities."""
    instances: bool = True
    """Emit MIG GPU-instance entities."""
    gpu_ids: frozenset[int] | None = None
    """Only these GPU indices (None: all)."""
    instance_ids: frozenset[int] | None = None
    """Only these GPU-instance ids (None: all)."""

    def wants_gpu(self, index: int) -> bool:
        return self.gpu_ids is None or index in self.gpu_ids

    def wants_instance(self, gpu_instance_id: int) -> bool:
        return self.instance_ids is None or gpu_instance_id in self.instance_ids


ALL_DEVICES = DeviceFilter()


MAX_DEVICE_INDEX = 1023
"""Above any GPU index or GPU-instance id a node has: a range past it is a typo, and
`g:0-1000000000` must not build a billion-entry set at start-up."""


def _parse_ids(text: str, flag: str) -> frozenset[int]:
    ids: set[int] = set()
    for part in text.split(","):
        part = part.strip()
        lo, sep, hi = part.partition("-")
        try:
            first, last = (int(lo), int(hi)) if sep else (int(part), int(part))
        except ValueError:
            raise ValueError(
                f"{flag}: {part!r} is not a device index or range (expected e.g. 0,1 or 0-3)"
            ) from None
        if not 0 <= first <= MAX_DEVICE_INDEX or not 0 <= last <= MAX_DEVICE_INDEX:
            raise ValueError(f"{flag}: {part!r} is out of range (device indices are 0 to "
                             f"{MAX_DEVICE_INDEX})")
        ids.update(range(first, last + 1))
    return frozenset(ids)


def parse_device_filter(text: str, flag: str = "--devices") -> DeviceFilter:
    kind, _, ids = text.strip().partition(":")
    if kind == "f" and not ids:
        return ALL_DEVICES
    if kind == "g":
        return DeviceFilter(instances=False, gpu_ids=_parse_ids(ids, flag) if ids else None)
    if kind == "i":
        return DeviceFilter(gpus=False, instance_ids=_parse_ids(ids, flag) if ids else None)
    raise ValueError(
        f"{flag}: {text!r} is not a device selection; expected f, g, i, g:0,1 or i:0,1"
    )

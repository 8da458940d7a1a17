"""The `--devices` selection, in dcgm-exporter 4.8.3's syntax: `f`, `g`, `i`, `g:0,1`, `i:0-2`,
and selectors joined by `+` (`g+i`, `g:0-3+i:0-2`, `i+g`): GPUs and GPU instances both."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class DeviceFilter:
    """Which GPUs and MIG GPU instances the `--devices` flag selects."""

    gpus: bool = True
    """Emit whole-GPU entities."""
    instances: bool = True
    """Emit MIG GPU-instance entities."""
    gpu_ids: frozenset[int] | None = None
    """Only these GPU indices (None: all)."""
    instance_ids: frozenset[int] | None = None
    """Only these GPU-instance ids (None: all)."""

    def wants_gpu(self, index: int) -> bool:
        """Return whether the GPU with this index is selected."""
        return self.gpu_ids is None or index in self.gpu_ids

    def wants_instance(self, gpu_instance_id: int) -> bool:
        """Return whether the MIG GPU instance with this id is selected."""
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
        if first > last:
            raise ValueError(f"{flag}: invalid range {part!r}: start ({first}) must not "
                             f"exceed end ({last})")
        ids.update(range(first, last + 1))
    return frozenset(ids)


_EXPECTED = "expected f, g, i, g:0,1, i:0-2 or g+i"


def _selectors(text: str, flag: str) -> dict[str, str | None]:
    """Return the id list of each letter of a `+`-joined selection (None for all), checked as
    dcgm-exporter's parseDeviceOptions checks them."""
    found: dict[str, str | None] = {}
    for part in text.strip().split("+"):
        part = part.strip()
        if not part:
            raise ValueError(f"{flag}: {text!r} has an empty selector ({_EXPECTED})")
        if part.count(":") > 1:
            raise ValueError(f"{flag}: {part!r} has more than one ':' ({_EXPECTED})")
        letter, sep, ids = part.partition(":")
        if letter not in ("f", "g", "i"):
            raise ValueError(f"{flag}: {text!r} is not a device selection: the only valid "
                             f"options are 'f', 'g', or 'i', but found {letter!r}")
        if letter in found:
            raise ValueError(f"{flag}: {text!r} has the device option {letter!r} twice")
        if letter == "f" and sep:
            raise ValueError(f"{flag}: {part!r}: the flex option 'f' takes no ids "
                             f"({_EXPECTED})")
        if sep and not ids.strip():
            raise ValueError(f"{flag}: {part!r} has no ids after ':' ({_EXPECTED})")
        found[letter] = ids if sep else None
    if "f" in found and len(found) > 1:
        raise ValueError(f"{flag}: {text!r}: the flex option 'f' cannot be combined with "
                         "other device options")
    return found


def parse_device_filter(text: str, flag: str = "--devices") -> DeviceFilter:
    """Parse a `--devices` value into a filter; raise ValueError naming the flag when the text is
    not valid."""
    found = _selectors(text, flag)
    if "f" in found:
        return ALL_DEVICES
    gpu_ids, instance_ids = found.get("g"), found.get("i")
    return DeviceFilter(
        gpus="g" in found,
        instances="i" in found,
        gpu_ids=_parse_ids(gpu_ids, flag) if gpu_ids is not None else None,
        instance_ids=_parse_ids(instance_ids, flag) if instance_ids is not None else None,
    )

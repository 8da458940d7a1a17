"""Walking NVML's device tree once: GPUs, their MIG devices, and the handles to keep.

Handles are fetched here and cached by the backend until the next enumeration; re-fetching
them every cycle is a known CPU sink.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

from exporter.devices.errors import is_nvml_error, nvml_code
from exporter.devices.filter import DeviceFilter
from exporter.devices.mig_profile_names import nvml_profile_name
from exporter.devices.model import Entity, EntityKey, Inventory, MigDevice
from exporter.devices.nvml_api import (
    NVML_DEVICE_MIG_ENABLE,
    NVML_ERROR_GPU_IS_LOST,
    NVML_ERROR_NOT_FOUND,
    UNSUPPORTED_CODES,
    Handle,
    NvmlLib,
)

_PROFILE = re.compile(r"(?:\d+c\.)?(\d+g\.\d+gb(?:[+-][A-Za-z0-9.,]+)*)")
"""`[<c>c.]<g>g.<gb>gb`, then the profile's attributes whole: Blackwell names media-engine and
graphics variants `+me`, `+me.all`, `-me` (without media engines) and `+gfx`."""


def profile_from_name(name: str) -> str:
    """Return the GPU-instance profile named in a MIG device's name.

    "NVIDIA H200 MIG 1c.3g.71gb" gives "3g.71gb", and "NVIDIA B200 MIG 1c.2g.45gb-me" gives
    "2g.45gb-me". The name is used rather than the memory size because a 1g.18gb instance reports
    16,384 MiB, which rounds to the wrong profile; the attributes are kept because `1g.23gb` and
    `1g.23gb+me` are different instances to schedule on and to chart."""
    match = _PROFILE.search(name.rsplit("MIG", 1)[-1])
    return match.group(1) if match else name.rsplit(" ", 1)[-1]


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value


@dataclass(slots=True)
class Handles:
    """Handles for one enumeration: physical GPUs and one MIG handle per GPU instance."""

    gpu: dict[int, Handle] = field(default_factory=dict)
    instance: dict[EntityKey, Handle] = field(default_factory=dict)
    """By (GPU index, GPU instance id): the first compute instance's MIG handle."""
    mig_enabled: dict[int, bool] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Enumeration:
    """The result of one walk of NVML's device tree: the inventory, the handles to keep, and the
    GPUs that were lost."""

    inventory: Inventory
    handles: Handles
    lost: frozenset[int]
    """Indices that answered GPU_IS_LOST: left out until a later enumeration finds them."""


def _mig_enabled(lib: NvmlLib, handle: Handle) -> bool:
    try:
        current = lib.nvmlDeviceGetMigMode(handle)[0]
    except Exception as exc:
        if is_nvml_error(exc) and nvml_code(exc) in UNSUPPORTED_CODES:
            return False
        raise
    return bool(current == NVML_DEVICE_MIG_ENABLE)


def _mig_devices(lib: NvmlLib, handle: Handle) -> list[tuple[MigDevice, Handle]]:
    found: list[tuple[MigDevice, Handle]] = []
    for slot in range(lib.nvmlDeviceGetMaxMigDeviceCount(handle)):
        try:
            mig = lib.nvmlDeviceGetMigDeviceHandleByIndex(handle, slot)
        except Exception as exc:
            # Slots are sparse: an empty one is not the end of the list.
            if is_nvml_error(exc) and nvml_code(exc) in (NVML_ERROR_NOT_FOUND,
                                                         *UNSUPPORTED_CODES):
                continue
            raise
        device = MigDevice(
            uuid=_text(lib.nvmlDeviceGetUUID(mig)),
            gpu_instance_id=int(lib.nvmlDeviceGetGpuInstanceId(mig)),
            compute_instance_id=int(lib.nvmlDeviceGetComputeInstanceId(mig)),
            name=_text(lib.nvmlDeviceGetName(mig)),
        )
        found.append((device, mig))
    return found


def enumerate_devices(
    lib: NvmlLib,
    devices: DeviceFilter,
    on_lost: Callable[[int], None] = lambda _index: None,
) -> Enumeration:
    """Enumerate every visible device. A GPU answering GPU_IS_LOST is reported and skipped."""
    handles = Handles()
    gpus: list[Entity] = []
    instances: list[Entity] = []
    lost: set[int] = set()
    driver = _text(lib.nvmlSystemGetDriverVersion())
    for index in range(lib.nvmlDeviceGetCount()):
        if not devices.wants_gpu(index):
            continue
        try:
            h = lib.nvmlDeviceGetHandleByIndex(index)
            base = Entity(
                gpu=index,
                uuid=_text(lib.nvmlDeviceGetUUID(h)),
                pci_bus_id=_text(lib.nvmlDeviceGetPciInfo(h).busId),
                device=f"nvidia{index}",
                model=_text(lib.nvmlDeviceGetName(h)),
            )
            mig_on = _mig_enabled(lib, h)
            migs = _mig_devices(lib, h) if mig_on else []
        except Exception as exc:
            if is_nvml_error(exc) and nvml_code(exc) == NVML_ERROR_GPU_IS_LOST:
                lost.add(index)
                on_lost(index)
                continue
            raise
        handles.gpu[index] = h
        handles.mig_enabled[index] = mig_on
        gpus.append(base)
        by_gi: dict[int, list[tuple[MigDevice, Handle]]] = {}
        for mig, mh in migs:
            by_gi.setdefault(mig.gpu_instance_id, []).append((mig, mh))
        for gi_id in sorted(by_gi):
            members = sorted(by_gi[gi_id], key=lambda m: m[0].compute_instance_id)
            handles.instance[(index, gi_id)] = members[0][1]
            if not devices.instances or not devices.wants_instance(gi_id):
                continue
            instances.append(
                Entity(
                    gpu=index,
                    uuid=base.uuid,
                    pci_bus_id=base.pci_bus_id,
                    device=base.device,
                    model=base.model,
                    gpu_instance_id=gi_id,
                    # NVML's name for the profile, as dcgm-exporter 4.8.4; else the
                    # MIG device's name.
                    gpu_instance_profile=nvml_profile_name(lib, h, gi_id)
                    or profile_from_name(members[0][0].name),
                    mig_devices=tuple(m for m, _ in members),
                )
            )
    inventory = Inventory(gpus=tuple(gpus), instances=tuple(instances), driver_version=driver)
    return Enumeration(inventory, handles, frozenset(lost))

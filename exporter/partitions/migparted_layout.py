"""Lay a mig-parted config's MIG devices out on GPU models, as `nvidia-mig-parted apply`
would find them on the GPU.

Each profile must be one of the model's (`exporter.partitions.mig_profiles`), and the GPU
instances must fit without overlapping (`mig_profiles.place`). Compute-instance profiles
(`1c.3g.71gb`) share a GPU instance while it has compute slices left, as mig-parted creates
them (largest first, each into the last GPU instance of its profile or a new one).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from exporter.partitions import mig_profiles as profiles
from exporter.partitions.migparted import (
    MigPartedConfig,
    MigPartedError,
    ProfileName,
    device_filter_matches,
    parse_profile_name,
)

__all__ = [
    "PCI_DEVICE_IDS",
    "EntryCheck",
    "GpuInstanceLayout",
    "NodeGpu",
    "check_layouts",
    "entry_layout",
    "node_layout",
]



@dataclass(frozen=True, slots=True)
class GpuInstanceLayout:
    """One GPU instance mig-parted would create, where it sits, and its compute instances."""

    placement: profiles.Placement
    compute_instances: tuple[int, ...]
    """Compute slices of each compute instance, largest first."""

    @property
    def profile(self) -> profiles.MigProfile:
        """Return the MIG profile of the GPU instance."""
        return self.placement.profile


def _model_profile(model: profiles.GpuModel, wanted: ProfileName) -> profiles.MigProfile | None:
    for candidate in model.profiles:
        if parse_profile_name(candidate.name).same_gpu_instance(wanted):
            return candidate
    return None


def entry_layout(model: profiles.GpuModel, mig_devices: Mapping[str, int], where: str
                 ) -> tuple[GpuInstanceLayout, ...]:
    """Return the GPU instances `mig_devices` makes on `model`, placed, largest first as
    they are created; raise MigPartedError naming the profile or the set that does not fit."""
    model_name = model.names[0]
    names = ", ".join(p.name for p in model.profiles) or "none (no MIG)"
    # GPU-instance profile -> compute-instance sizes asked of it.
    asked: dict[profiles.MigProfile, list[int]] = {}
    for text, count in mig_devices.items():
        if not count:
            continue
        wanted = parse_profile_name(text)
        profile = _model_profile(model, wanted)
        if profile is None:
            raise MigPartedError(f"{where}: {text!r} is not a MIG profile of {model_name}; "
                                 f"expected one of: {names}")
        if not 0 < wanted.compute_slices <= profile.compute_slices:
            raise MigPartedError(
                f"{where}: {text!r} asks {wanted.compute_slices} compute slices of a "
                f"{profile.name} instance; expected 1 to {profile.compute_slices}")
        asked.setdefault(profile, []).extend([wanted.compute_slices] * count)
    # Each compute instance goes into the last GPU instance of its profile while that has
    # slices left, else into a new one: mig-parted's order, largest first.
    instances: list[tuple[profiles.MigProfile, list[int]]] = []
    for profile, sizes in asked.items():
        for size in sorted(sizes, reverse=True):
            current = instances[-1] if instances and instances[-1][0] == profile else None
            if current is None or sum(current[1]) + size > profile.compute_slices:
                instances.append((profile, [size]))
            else:
                current[1].append(size)
    placed = profiles.place(model, [p.name for p, _ in instances])
    if placed is None:
        wanted_text = ", ".join(f"{n}x {p}" for p, n in _counts(instances))
        raise MigPartedError(f"{where}: {wanted_text} cannot be placed together on "
                             f"{model_name}; expected a set of GPU instances that fits "
                             f"{model.memory_slices} memory and {model.compute_slices} "
                             "compute slices without overlapping")
    pending = {p: [cis for q, cis in instances if q == p] for p, _ in instances}
    return tuple(GpuInstanceLayout(pl, tuple(pending[pl.profile].pop(0))) for pl in placed)


def _counts(instances: Sequence[tuple[profiles.MigProfile, list[int]]]
            ) -> list[tuple[str, int]]:
    out: dict[str, int] = {}
    for profile, _ in instances:
        out[profile.name] = out.get(profile.name, 0) + 1
    return list(out.items())


# -- whose GPUs an entry names -----------------------------------------------------------------

PCI_DEVICE_IDS: Mapping[str, int] = {
    "NVIDIA H100 80GB HBM3": 0x233010DE,
    "NVIDIA H200": 0x233510DE,
    "NVIDIA A100-SXM4-80GB": 0x20B210DE,
}
"""NVML's `pciDeviceId` of the known models that have one on record: the H100 and H200 from
`nvidia-smi -q` captures on driver 590.48.01, the A100 from its published PCI id (the
simulated node's boards carry the same). A device filter naming no id here is not checked."""


@dataclass(frozen=True, slots=True)
class NodeGpu:
    """One GPU of a node, as mig-parted walks them."""

    index: int
    model: profiles.GpuModel
    pci_device_id: int
    pci_subsystem_id: int = 0


def node_layout(config: MigPartedConfig, name: str | None, gpus: Sequence[NodeGpu]
                ) -> tuple[str, dict[int, tuple[GpuInstanceLayout, ...] | None]]:
    """Return (config name, GPU index -> its GPU instances, None for MIG off) after applying
    the config `name` to `gpus` as `nvidia-mig-parted apply` does: entries in order, each to
    the GPUs its filter and devices select, a later one overriding. GPUs no entry selects are
    left out. Raise MigPartedError where apply would fail."""
    name, entries = config.select(name)
    out: dict[int, tuple[GpuInstanceLayout, ...] | None] = {}
    for i, entry in enumerate(entries):
        where = f"{config.source}: mig-configs.{name}[{i}]"
        for gpu in gpus:
            if not entry.applies_to(gpu.index, gpu.pci_device_id, gpu.pci_subsystem_id):
                continue
            if not gpu.model.mig_capable:
                # apply skips a GPU without MIG under `devices: all` or with MIG off.
                if entry.mig_enabled and entry.devices != "all":
                    raise MigPartedError(f"{where}: GPU {gpu.index} ({gpu.model.names[0]}) "
                                         "has no MIG; expected an entry that leaves it off")
                continue
            out[gpu.index] = (entry_layout(gpu.model, entry.mig_devices or {},
                                           f"{where} on GPU {gpu.index}")
                              if entry.mig_enabled else None)
    return name, out


@dataclass(frozen=True, slots=True)
class EntryCheck:
    """What `check_layouts` found for one entry that enables MIG."""

    config: str
    index: int
    placed_on: tuple[str, ...]
    """Keys of the known models the entry was laid out on; empty: not checked, as it names
    only GPUs the profile table does not know."""


def check_layouts(config: MigPartedConfig,
                  models: Sequence[profiles.GpuModel] | None = None) -> tuple[EntryCheck, ...]:
    """Lay every MIG entry of every config out on the known models it is meant for: those
    its device filter names (each must have its profiles and fit them), or, without a filter,
    those that have all its profiles (each must fit them). Raise MigPartedError for the
    first that does not; return what was checked."""
    known = models if models is not None else tuple(
        {m.key: m for m in profiles.MODELS.values() if m.mig_capable}.values())
    checks: list[EntryCheck] = []
    for name, entries in config.mig_configs.items():
        for i, entry in enumerate(entries):
            if not entry.mig_enabled:
                continue
            where = f"{config.source}: mig-configs.{name}[{i}]"
            wanted = [parse_profile_name(p) for p, n in (entry.mig_devices or {}).items() if n]
            if entry.device_filter:
                targets = [m for m in known if any(
                    device_filter_matches(f, PCI_DEVICE_IDS[n])
                    for n in m.names if n in PCI_DEVICE_IDS for f in entry.device_filter)]
            else:
                targets = [m for m in known
                           if all(_model_profile(m, w) is not None for w in wanted)]
            for model in targets:
                entry_layout(model, entry.mig_devices or {}, f"{where} on {model.names[0]}")
            checks.append(EntryCheck(name, i, tuple(m.key for m in targets)))
    return tuple(checks)

"""The MIG profiles of each GPU model, where each may sit, and which layouts are valid.

Keyed by the model name as NVML spells it (`nvmlDeviceGetName`, dcgm-exporter's `modelName`
label). Figures come from real `nvidia-smi` captures where one exists (H100 80GB HBM3, H200 on
driver 590.48.01) and from NVIDIA's MIG User Guide otherwise; each model's `source` says which
figures are measured. A running node's NVML is the authority: these are what an offline
advisor or a test starts from. A model not listed is unknown, never guessed.

Memory is cut into `memory_slices` slices and compute into `compute_slices`; a profile takes a
run of memory slices starting at one of its allowed starts. A layout is valid when its
instances do not overlap in memory, take at most the GPU's compute slices, and hold at most
one `+me` instance.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache

__all__ = [
    "MODELS",
    "GpuModel",
    "MigProfile",
    "Placement",
    "find_model",
    "is_valid_layout",
    "layout_problems",
    "place",
    "placeable_layouts",
]


@dataclass(frozen=True, slots=True, order=True)
class MigProfile:
    """One GPU-instance profile of one model, as `nvidia-smi mig -lgip` lists it."""

    name: str
    """`3g.40gb`, `1g.10gb+me`: the name mig-parted configs and `GPU_I_PROFILE` use."""
    compute_slices: int
    memory_slices: int
    memory_mib: int
    """Usable framebuffer as NVML reports it for an instance (the MIG device's total)."""
    multiprocessors: int
    max_instances: int
    starts: tuple[int, ...]
    """Memory slices where an instance may begin (`nvidia-smi mig -lgipp`)."""
    media_extensions: bool = False
    """The `+me` profile: holds the media engines; at most one per GPU."""

    @property
    def resource_name(self) -> str:
        """Return the resource the device plugin advertises this profile under with the mixed
        strategy, such as `nvidia.com/mig-3g.40gb`; `+me` is written `.me`, as the plugin and the
        operator's config names spell it."""
        return "nvidia.com/mig-" + self.name.replace("+", ".")


@dataclass(frozen=True, slots=True)
class GpuModel:
    """A GPU model: its whole memory and SMs, and its MIG profiles (none: no MIG)."""

    key: str
    """Short name used in messages and config names (`h100-80gb`)."""
    names: tuple[str, ...]
    """Every `modelName` NVML gives this model."""
    memory_mib: int
    """Framebuffer total as NVML reports it with MIG off."""
    multiprocessors: int
    compute_slices: int
    memory_slices: int
    profiles: tuple[MigProfile, ...]
    source: str
    """Where the figures come from and which are not measured."""

    @property
    def mig_capable(self) -> bool:
        """Return whether the model can be partitioned with MIG, which is whether any MIG profile
        is on record for it."""
        return bool(self.profiles)

    def profile(self, name: str) -> MigProfile:
        """Return the profile called `name`; raise KeyError naming the model otherwise."""
        for candidate in self.profiles:
            if candidate.name == name:
                return candidate
        raise KeyError(f"{self.names[0]} has no MIG profile {name!r}; it has "
                       f"{', '.join(p.name for p in self.profiles) or 'none'}")

    def has_profile(self, name: str) -> bool:
        """Return whether the model has a MIG profile called `name`."""
        return any(p.name == name for p in self.profiles)


@dataclass(frozen=True, slots=True, order=True)
class Placement:
    """One instance of a profile at a memory-slice start."""

    start: int
    profile: MigProfile

    @property
    def end(self) -> int:
        """Return the memory slice just past the last one the instance takes."""
        return self.start + self.profile.memory_slices


_SEVEN = (0, 1, 2, 3, 4, 5, 6)


def _seven_slice(sizes: Sequence[str], memory: Sequence[int],
                 sms: Sequence[int]) -> tuple[MigProfile, ...]:
    """Return the seven profiles every GPU with 7 compute and 8 memory slices has, in the MIG
    user guide's order (1g, 1g+me, 1g with double memory, 2g, 3g, 4g, 7g), built from each one's
    name suffix, usable memory and SM count; the allowed start slices are those
    `nvidia-smi mig -lgipp` lists."""
    one, double, two, three, four, seven = sizes
    return (
        MigProfile(f"1g.{one}", 1, 1, memory[0], sms[0], 7, _SEVEN),
        MigProfile(f"1g.{one}+me", 1, 1, memory[1], sms[1], 1, _SEVEN, media_extensions=True),
        MigProfile(f"1g.{double}", 1, 2, memory[2], sms[2], 4, (0, 2, 4, 6)),
        MigProfile(f"2g.{two}", 2, 2, memory[3], sms[3], 3, (0, 2, 4)),
        MigProfile(f"3g.{three}", 3, 4, memory[4], sms[4], 2, (0, 4)),
        MigProfile(f"4g.{four}", 4, 4, memory[5], sms[5], 1, (0,)),
        MigProfile(f"7g.{seven}", 7, 8, memory[6], sms[6], 1, (0,)),
    )


_A100_SMS = (14, 14, 14, 28, 42, 56, 98)
_HOPPER_SMS = (16, 16, 26, 32, 60, 64, 132)

_MODEL_LIST = (
    GpuModel(
        "a100-40gb", ("NVIDIA A100-SXM4-40GB", "NVIDIA A100-PCIE-40GB"), 40960, 108, 7, 8,
        _seven_slice(("5gb", "10gb", "10gb", "20gb", "20gb", "40gb"),
                     (4864, 4864, 9856, 9984, 20096, 20096, 40320), _A100_SMS),
        "MIG User Guide (A100-SXM4-40GB listing); 1g.10gb memory not in its table here",
    ),
    GpuModel(
        "a100-80gb", ("NVIDIA A100-SXM4-80GB", "NVIDIA A100 80GB PCIe"), 81920, 108, 7, 8,
        _seven_slice(("10gb", "20gb", "20gb", "40gb", "40gb", "80gb"),
                     (9728, 9728, 19968, 19968, 40192, 40192, 80640), _A100_SMS),
        "MIG User Guide (A100-SXM4-80GB listing); SM counts as the 40GB's, not measured",
    ),
    GpuModel(
        "h100-80gb", ("NVIDIA H100 80GB HBM3",), 81559, 132, 7, 8,
        _seven_slice(("10gb", "20gb", "20gb", "40gb", "40gb", "80gb"),
                     (9984, 9984, 20096, 20096, 40448, 40448, 81152), _HOPPER_SMS),
        "nvidia-smi capture on driver 590.48.01 (1g.10gb, 2g.20gb, 3g.40gb); the others "
        "from the MIG User Guide",
    ),
    GpuModel(
        "h200", ("NVIDIA H200",), 143771, 132, 7, 8,
        _seven_slice(("18gb", "35gb", "35gb", "71gb", "71gb", "141gb"),
                     (16384, 16384, 33024, 33280, 71424, 71424, 143360), _HOPPER_SMS),
        "nvidia-smi capture on driver 590.48.01 (1g.18gb, 2g.35gb, 3g.71gb); 1g.35gb and "
        "7g.141gb from mig-parted issue 120; 4g.71gb taken as 3g.71gb's memory",
    ),
    GpuModel("l4", ("NVIDIA L4",), 23034, 58, 0, 0, (), "no MIG; published figures"),
    GpuModel("l40s", ("NVIDIA L40S",), 46068, 142, 0, 0, (),
             "no MIG; nvidia-smi capture on driver 595.80"),
)

MODELS: Mapping[str, GpuModel] = {name: m for m in _MODEL_LIST for name in m.names}
"""Every known `modelName` to its model."""


def find_model(model_name: str) -> GpuModel | None:
    """Return the model NVML calls `model_name` (surrounding blanks ignored), or None."""
    return MODELS.get(model_name.strip())


def layout_problems(model: GpuModel, placements: Iterable[Placement]) -> tuple[str, ...]:
    """Return why `placements` is not a valid layout on `model`, one sentence each; empty
    when it is valid."""
    chosen = sorted(placements)
    problems: list[str] = []
    for placement in chosen:
        profile = placement.profile
        if not model.has_profile(profile.name) or model.profile(profile.name) != profile:
            problems.append(f"{profile.name} is not a MIG profile of {model.names[0]}")
        elif placement.start not in profile.starts:
            problems.append(f"{profile.name} cannot start at memory slice {placement.start} "
                            f"(allowed: {', '.join(map(str, profile.starts))})")
    for before, after in itertools.pairwise(chosen):
        if after.start < before.end:
            problems.append(f"{before.profile.name}@{before.start} and "
                            f"{after.profile.name}@{after.start} overlap in memory")
    compute = sum(p.profile.compute_slices for p in chosen)
    if compute > model.compute_slices:
        problems.append(f"{compute} compute slices taken, {model.compute_slices} exist")
    if sum(p.profile.media_extensions for p in chosen) > 1:
        problems.append("more than one +me instance")
    for name, count in sorted(Counter(p.profile.name for p in chosen).items()):
        if model.has_profile(name) and count > model.profile(name).max_instances:
            problems.append(f"{count} instances of {name}, at most "
                            f"{model.profile(name).max_instances}")
    return tuple(problems)


def is_valid_layout(model: GpuModel, placements: Iterable[Placement]) -> bool:
    """Return whether `placements` is a valid layout on `model`: profiles of the model at allowed
    starts, no overlap, and no more instances, compute slices or media engines than the GPU has."""
    return not layout_problems(model, placements)


def place(model: GpuModel, profile_names: Iterable[str]) -> tuple[Placement, ...] | None:
    """Return placements for these profiles (a name once per instance) forming a valid
    layout, largest first as the instances must be created, or None when none exists.
    Raise KeyError for a name that is not a profile of `model`."""
    wanted = sorted((model.profile(n) for n in profile_names),
                    key=lambda p: (-p.memory_slices, -p.compute_slices, p.name))
    if sum(p.compute_slices for p in wanted) > model.compute_slices:
        return None
    if sum(p.media_extensions for p in wanted) > 1:
        return None
    taken = [False] * model.memory_slices
    chosen: list[Placement] = []

    def fill(index: int) -> bool:
        if index == len(wanted):
            return True
        profile = wanted[index]
        for start in profile.starts:
            span = range(start, start + profile.memory_slices)
            if span.stop > model.memory_slices or any(taken[s] for s in span):
                continue
            # Instances of one profile go left to right, so each layout is tried once.
            if chosen and chosen[-1].profile == profile and start < chosen[-1].start:
                continue
            for s in span:
                taken[s] = True
            chosen.append(Placement(start, profile))
            if fill(index + 1):
                return True
            chosen.pop()
            for s in span:
                taken[s] = False
        return False

    return tuple(chosen) if fill(0) else None


@cache
def placeable_layouts(model: GpuModel) -> tuple[tuple[str, ...], ...]:
    """Return every non-empty multiset of profiles that can be laid out validly on `model`, each
    as sorted profile names, in a fixed order (fewest instances first, then by name)."""
    found: set[tuple[str, ...]] = set()
    profiles = sorted(model.profiles, key=lambda p: p.name)

    def grow(current: list[str], first: int) -> None:
        for i in range(first, len(profiles)):
            candidate = [*current, profiles[i].name]
            if place(model, candidate) is None:
                continue
            found.add(tuple(sorted(candidate)))
            grow(candidate, i)

    grow([], 0)
    return tuple(sorted(found, key=lambda names: (len(names), names)))

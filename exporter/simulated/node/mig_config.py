"""`--sim.mig-config FILE[:NAME]`: start the simulated node with a mig-parted config applied.

The config is read and laid out as the MIG Manager would apply it (`exporter.partitions`):
entries in order, each to the GPUs its device filter and devices select. A selected GPU with
MIG on gets the config's GPU instances at their placements, each with its compute
instances; one with MIG off gets none; GPUs no entry selects keep the profile's layout.

GPU-instance ids follow the placement as NVML numbers them: the first id of each size (7g: 0,
4g and 3g: 1, 2g: 3, 1g: 7) plus the start slice over the size, which gives the H200
capture's ids (3g at slice 4: 2, 2g at 0: 3, 1g at 2 and 3: 9 and 10). No capture shows the
double-memory 1g (`1g.35gb`); it is numbered as the 2g, whose slices it takes.
Memory and SMs are the profile table's; a compute instance smaller than its GPU instance has
the model's one-slice SM count per slice.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from exporter.partitions.mig_profiles import GpuModel, find_model
from exporter.partitions.migparted import MigPartedError, load
from exporter.partitions.migparted_layout import GpuInstanceLayout, NodeGpu, node_layout
from exporter.simulated.node.profiles import (
    ComputeInstanceSpec,
    GpuInstanceSpec,
    GpuSpec,
    Profile,
)

__all__ = ["apply_mig_config", "split_mig_config_arg"]

_FIRST_ID = {8: 0, 4: 1, 2: 3, 1: 7}
"""GPU-instance id of the first placement, by memory slices taken."""


def split_mig_config_arg(value: str) -> tuple[Path, str | None]:
    """Split `FILE[:NAME]`; a whole value naming an existing file is the file alone."""
    if Path(value).is_file() or ":" not in value:
        return Path(value), None
    file, _, name = value.rpartition(":")
    return Path(file), name or None


def _model(gpu: GpuSpec) -> GpuModel:
    model = find_model(gpu.board.name)
    if model is None:
        raise MigPartedError(f"GPU {gpu.index} ({gpu.board.name}) is not in the MIG profile "
                             "table; expected a board the table lists")
    return model


def _gpu_instances(model: GpuModel, layout: tuple[GpuInstanceLayout, ...]
                   ) -> tuple[GpuInstanceSpec, ...]:
    one_slice_sms = min((p.multiprocessors for p in model.profiles if p.compute_slices == 1),
                        default=0)
    out: list[GpuInstanceSpec] = []
    slot = 0
    for gi in sorted(layout, key=_gi_id):
        cis: list[ComputeInstanceSpec] = []
        for ci_id, slices in enumerate(gi.compute_instances):
            sms = (gi.profile.multiprocessors if slices == gi.profile.compute_slices
                   else one_slice_sms * slices)
            cis.append(ComputeInstanceSpec(ci_id, slices, slot, sms))
            slot += 1
        out.append(GpuInstanceSpec(_gi_id(gi), gi.profile.name, gi.profile.compute_slices,
                                   gi.profile.memory_mib, tuple(cis)))
    return tuple(out)


def _gi_id(gi: GpuInstanceLayout) -> int:
    size = gi.profile.memory_slices
    return _FIRST_ID[size] + gi.placement.start // size


def apply_mig_config(profile: Profile, value: str) -> Profile:
    """Return `profile` with the mig-parted config `value` (`FILE[:NAME]`) applied; raise
    MigPartedError (one line: the file, the config, what is expected) where the MIG Manager
    would fail. The profile keeps its name, so the GPUs keep their UUIDs."""
    path, name = split_mig_config_arg(value)
    config = load(path)
    gpus = [NodeGpu(g.index, _model(g), g.board.pci_device_id, g.board.pci_subsystem_id)
            for g in profile.gpus]
    chosen, layout = node_layout(config, name, gpus)
    new_gpus: list[GpuSpec] = []
    for gpu, node_gpu in zip(profile.gpus, gpus, strict=True):
        if gpu.index not in layout:
            new_gpus.append(gpu)
            continue
        placed = layout[gpu.index]
        mig = None if placed is None else _gpu_instances(node_gpu.model, placed)
        # A GPU in MIG mode runs no time-sliced processes.
        new_gpus.append(replace(gpu, mig=mig, shared_by=0 if mig is not None else gpu.shared_by))
    description = f"{profile.description}; mig-parted config {chosen!r} from {path.name}"
    return replace(profile, description=description, gpus=tuple(new_gpus))

"""The smallest place that holds each holder's measured use.

On a MIG-capable model: the smallest profile whose usable memory covers the peak framebuffer
plus the headroom and whose compute slices cover the compute need (the 7-slice profile is
the whole GPU, advised as `whole`). On a model without MIG: how many time-sliced replicas
its use allows (each replica is an equal part of the GPU's memory and time); the pool then
chooses one replica count for all (`exporter.advise.plan`). A model missing from the table,
a holder with too little history or without an activity series is not advised, with why.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from exporter.advise.demand import SHARED, TIME_SLICING, UNNAMED_INSTANCE, WHOLE, Holder
from exporter.partitions.mig_profiles import GpuModel, MigProfile, find_model


@dataclass(frozen=True, slots=True)
class FitSettings:
    """The thresholds the fitting applies: the headroom added to the memory peak, the history a
    holder needs before it is advised, and the most replicas one GPU may be shared into."""

    headroom: float = 0.10
    """Part of the peak framebuffer added before fitting."""
    min_samples: int = 30
    min_hours: float = 1.0
    max_replicas: int = 8
    """Most time-sliced replicas per GPU advised."""


@dataclass(frozen=True, slots=True)
class Fit:
    """What is advised for one holder, or that nothing is, with the memory it needs and the
    reason in words for the reader."""

    holder: Holder
    need_mib: float
    """Peak framebuffer plus headroom."""
    advice: str | None
    """`whole`, a MIG profile, or `time-slicing`; None: not advised (see `reason`)."""
    reason: str
    max_replicas: int = 1
    """On a model without MIG: the most replicas per GPU its use allows."""

    @property
    def advised(self) -> bool:
        """Return whether the holder was advised, as opposed to skipped for the reason given."""
        return self.advice is not None

    @property
    def unchanged(self) -> bool:
        """Return whether the advice is what the holder has now (time-slicing for a holder that
        already shares its device), so listings can leave the holder out."""
        now = self.holder.now
        return self.advice == now or (self.advice == TIME_SLICING and now == SHARED)


def _mib(value: float) -> str:
    return f"{value:,.0f} MiB"


def mig_candidates(model: GpuModel) -> list[MigProfile]:
    """Return the model's MIG profiles that may be advised, smallest first. Profiles with a media
    engine (`+me`) are left out: only workloads that ask for a media engine should get one."""
    return sorted((p for p in model.profiles if not p.media_extensions),
                  key=lambda p: (p.compute_slices, p.memory_slices, p.memory_mib, p.name))


def _not_advised(holder: Holder, need: float, why: str) -> Fit:
    return Fit(holder, need, None, why)


def fit(holder: Holder, settings: FitSettings) -> Fit:
    """Return the place advised for `holder`, or why none is."""
    need = holder.peak_framebuffer_mib * (1 + settings.headroom)
    if holder.samples < settings.min_samples:
        return _not_advised(holder, need, f"{holder.samples} samples, fewer than "
                            f"--min-samples {settings.min_samples}")
    if holder.hours < settings.min_hours:
        return _not_advised(holder, need, f"held {holder.hours:.1f} h, less than "
                            f"--min-hours {settings.min_hours:g}")
    model = find_model(holder.gpu_model)
    if model is None:
        return _not_advised(holder, need, f"GPU model {holder.gpu_model!r} is not in the MIG "
                            "profile table")
    if holder.compute_need is None:
        return _not_advised(holder, need, "no activity series (DCGM_FI_PROF_GR_ENGINE_ACTIVE "
                            "or DCGM_FI_DEV_GPU_UTIL)")
    if holder.now == UNNAMED_INSTANCE:
        return _not_advised(holder, need, "a MIG instance whose series carry no GPU_I_PROFILE")
    if holder.now not in (WHOLE, SHARED) and not model.has_profile(holder.now):
        return _not_advised(holder, need, f"holds {holder.now!r}, not a MIG profile of "
                            f"{holder.gpu_model}")
    if model.mig_capable:
        return _fit_mig(holder, model, need)
    return _fit_shared(holder, model, need, settings)


def _fit_mig(holder: Holder, model: GpuModel, need: float) -> Fit:
    compute = holder.compute_need or 0.0
    for profile in mig_candidates(model):
        share = profile.compute_slices / model.compute_slices
        if profile.memory_mib >= need and share + 1e-9 >= compute:
            if profile.compute_slices == model.compute_slices:
                break
            return Fit(holder, need, profile.name,
                       f"{_mib(need)} fits {profile.name}'s {_mib(profile.memory_mib)}; "
                       f"compute {compute:.0%} within {profile.compute_slices}/"
                       f"{model.compute_slices}")
    return Fit(holder, need, WHOLE, f"needs {_mib(need)} and {compute:.0%} of the compute: "
               "no instance smaller than the GPU holds it")


def _fit_shared(holder: Holder, model: GpuModel, need: float, settings: FitSettings) -> Fit:
    compute = holder.compute_need or 0.0
    by_memory = math.floor(model.memory_mib / max(need, 1.0))
    by_compute = math.floor(1 / compute + 1e-9) if compute > 0 else settings.max_replicas
    replicas = max(1, min(by_memory, by_compute, settings.max_replicas))
    if replicas < 2:
        return Fit(holder, need, WHOLE, f"needs {_mib(need)} and {compute:.0%} of the GPU: "
                   "too much to share it")
    return Fit(holder, need, TIME_SLICING,
               f"needs {_mib(need)} and {compute:.0%} of the GPU: fits 1/{replicas}",
               replicas)

"""Holdings: one series per (pod, device) a pod holds at an instant, valued by its share.

Where the holders are found:

- A device held by one container alone (a whole GPU or a MIG GPU instance) is *exclusive*:
  its device series carry `pod`/`namespace`. `DCGM_FI_DEV_FB_USED` is read as the device
  marker, as it exists for every whole GPU and every MIG instance.
- A shared device (time-sliced replicas, a MIG instance split between containers, DRA share
  ids) has one `gpu_exporter_pod_gpu_allocation` row per holder. Its holders split it
  evenly, one part per row. Where a device has both (dcgm-exporter's virtual-GPU copies),
  the rows win, so nothing is counted twice.

A holding's *share* is its part of a physical GPU: a whole GPU is 1, a MIG instance is its
compute slices over the GPU's (`3g.71gb` on a 7-slice GPU is 3/7), and a shared device's is
divided by its number of rows. Its *fraction* is its part of its own device series (1 for an
exclusive holder, 1/rows for a shared one), which apportions the device's framebuffer.
"""

from __future__ import annotations

from exporter.fields.catalog import CATALOG, MetricType
from exporter.promql import measures as gpm

ALLOCATION = "gpu_exporter_pod_gpu_allocation"
FRAMEBUFFER = "DCGM_FI_DEV_FB_USED"
ENERGY = "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"
"""A counter of millijoules since the driver loaded (per physical GPU)."""

DEVICE = "UUID, GPU_I_ID"
"""What identifies a device: the GPU's UUID and, for a MIG instance, its GPU instance id
(MIG series carry their parent GPU's UUID)."""
CARRIED = "modelName, Hostname, hostname"
"""Device labels an allocation row lacks and borrows from its device's series, so shared
holdings can be grouped by model and node like exclusive ones."""

ACTIVITY_SOURCE = "activity_source"
PROFILING = "profiling"
"""Activity from `DCGM_FI_PROF_GR_ENGINE_ACTIVE` (the graphics engine's busy ratio)."""
UTILISATION = "utilisation"
"""Activity from `DCGM_FI_DEV_GPU_UTIL` / 100, on GPUs with no profiling series (before
Hopper; `exporter.promql.measures`)."""

MIG_SLICES_BY_MODEL: tuple[tuple[str, int], ...] = ((".*A30.*", 4),)
"""Compute slices of a whole GPU where it is not 7 (A30), by `modelName` regex."""
DEFAULT_MIG_SLICES = 7

DEVICE_LABELS: tuple[str, ...] = (
    "gpu", "UUID", "pci_bus_id", "device", "GPU_I_ID", "GPU_I_PROFILE", "container",
    "resource", "replica", "vgpu", "dra_share_id",
    *(f.name for f in CATALOG if f.type is MetricType.LABEL),
)
"""Labels dropped when holdings are summed into one series per pod: what names the device
or the container. The rest stays: namespace, pod, node, model, pod labels, job, instance."""
POD_GROUPING_HINT = ", ".join(DEVICE_LABELS)


def _slice_terms() -> list[str]:
    """One term per MIG profile size: the device marker of every instance of that size,
    valued by its share of the GPU."""
    terms = [f'({FRAMEBUFFER}{{GPU_I_ID=""}} * 0 + 1)']
    special = "|".join(regex for regex, _ in MIG_SLICES_BY_MODEL)
    models = [(f'modelName=~"{regex}"', total) for regex, total in MIG_SLICES_BY_MODEL]
    models.append((f'modelName!~"{special}"', DEFAULT_MIG_SLICES))
    for matcher, total in models:
        for size in range(1, total + 1):
            terms.append(f'({FRAMEBUFFER}{{GPU_I_PROFILE=~"{size}g\\\\..*",{matcher}}} * 0 '
                         f"+ {size}/{total})")
    return terms


def device_share() -> str:
    """Per device (UUID, GPU_I_ID): its share of its physical GPU."""
    return f"max by ({DEVICE}) (\n  " + "\n  or ".join(_slice_terms()) + "\n)"


def holder_fraction() -> str:
    """Per holding: the holder's part of its device series (1, or 1/rows when shared)."""
    exclusive = f'({FRAMEBUFFER}{{pod!=""}} * 0 + 1) unless on({DEVICE}) {ALLOCATION}'
    shared = (f"{ALLOCATION}\n  / on({DEVICE}) group_left count by ({DEVICE}) ({ALLOCATION})"
              f"\n  * on({DEVICE}) group_left({CARRIED}) "
              f"group by ({DEVICE}, {CARRIED}) ({FRAMEBUFFER})")
    return f"(\n  {exclusive}\n)\nor\n(\n  {shared}\n)"


def holder_share() -> str:
    """Per holding: its share of a physical GPU (whole 1, MIG by slices, shared split)."""
    return f"(\n{holder_fraction()}\n)\n* on({DEVICE}) group_left\n{device_share()}"


def device_activity() -> str:
    """Per device: busy ratio 0-1 and where it came from (`activity_source`)."""
    sources = gpm.GR_ENGINE.labelled(ACTIVITY_SOURCE, PROFILING, UTILISATION)
    assert sources is not None  # every source is enabled here
    return f"max by ({DEVICE}, {ACTIVITY_SOURCE}) (\n  " + sources.replace("\n", "\n  ") + "\n)"


def holder_active_share() -> str:
    """Per holding: share x activity (active GPUs), labelled with the activity source."""
    return (f"(\n{holder_share()}\n)\n* on({DEVICE}) group_left({ACTIVITY_SOURCE})\n"
            f"{device_activity()}")


def holder_activity() -> str:
    """Per holding: its device's activity (0-1), whatever the share."""
    return (f"(\n{holder_fraction()}\n) * 0\n+ on({DEVICE}) group_left({ACTIVITY_SOURCE})\n"
            f"{device_activity()}")


def gpu_energy_mj(resolution: str) -> str:
    """Per GPU (UUID): the energy counter's rise over the last `resolution` (mJ).

    The plain difference of the last samples, not `increase()`: summed over consecutive
    steps it telescopes to the counter's exact rise, where `increase()` extrapolates each
    window and runs a few percent high. Averaged by UUID first: the GPU's series change labels
    when its holder changes (an exclusive GPU's series carry the pod), and dcgm-exporter's
    virtual-GPU option repeats them per holder. A drop is a counter reset (driver reload,
    GPU reset): that step counts what the new counter has counted since."""
    now = f"avg by (UUID) ({ENERGY})"
    before = f"avg by (UUID) ({ENERGY} offset {resolution})"
    return (f"max by (UUID) (\n  ({now} - {before}) >= 0\n  or on(UUID)\n"
            f"  ({now} and on(UUID) {before})\n)")


def holder_energy_mj(resolution: str) -> str:
    """Per holding: its share of its GPU's energy in the last resolution step (mJ). The
    energy of MIG slices nobody holds stays unattributed."""
    return f"(\n{holder_share()}\n)\n* on(UUID) group_left\n{gpu_energy_mj(resolution)}"


def holder_framebuffer_mib() -> str:
    """Per holding: its part of its device's framebuffer in use (MiB)."""
    return (f"(\n{holder_fraction()}\n)\n* on({DEVICE}) group_left\n"
            f"max by ({DEVICE}) ({FRAMEBUFFER})")


def per_pod(expr: str, aggregation: str = "sum", drop: tuple[str, ...] = ()) -> str:
    """`expr`'s holdings folded into one series per pod."""
    return f"{aggregation} without ({', '.join((*DEVICE_LABELS, *drop))}) (\n{expr}\n)"

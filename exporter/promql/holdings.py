"""Holdings: which pod holds what share of which GPU, and the series that measure each holding.

Where the holders are found:

- A device held by one container alone (a whole GPU or a MIG GPU instance) is *exclusive*:
  its device series carry `pod`/`namespace` (*labelled* series). Each labelled series is one
  holding, present exactly while it is held, so a figure over a window is a range function
  of that series alone: `count_over_time(FB_USED{namespace!=""}[1h:1m])` counts the steps it was
  held, with no join at each step. `DCGM_FI_DEV_FB_USED` marks the devices: it exists for
  every whole GPU and MIG instance.
- A shared device (time-sliced replicas, a MIG instance split between containers, DRA share
  ids) has one `gpu_exporter_pod_gpu_allocation` *row* per holder; its own series stay
  unlabelled. Its holders split it evenly, one part per row, at each step: these joins run
  at every step, but over the rows and the devices they name only.

A holding's *share* is its part of a physical GPU: a whole GPU is 1, a MIG instance is its
compute slices over the GPU's (`3g.71gb` on a 7-slice GPU is 3/7), a shared device's is
divided by its number of rows. The slices follow from a series' own labels
(`GPU_I_PROFILE`, `modelName`), so the share is applied once per window, not per step.

Where a device has both labelled series and rows (virtual GPUs: the device's series repeated
per holder), the rows win: a labelled series is dropped for a window in which its pod has a
row on that device (for a time-sliced replica, a row for that replica). A time-sliced device
passing from one holder to several in the window keeps both parts: the one holder's labelled
series (no `vgpu` label) before, the rows after.

Why this shape: a join evaluated at every step of a window costs the server a pass over
every series it touches at every step; a range function over a plain selector reads each
series once. At 10,000 GPUs the first is minutes of every hour, the second seconds
(`benchmarks/bench_report.py`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from exporter.fields.catalog import CATALOG, MetricType
from exporter.promql import measures as gpm

ALLOCATION = "gpu_exporter_pod_gpu_allocation"
FRAMEBUFFER = "DCGM_FI_DEV_FB_USED"
ENERGY = "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"
"""A counter of millijoules since the driver loaded (per physical GPU)."""

DEVICE = "UUID, GPU_I_ID"
"""What identifies a device: the GPU's UUID and, for a MIG instance, its GPU instance id
(MIG series carry their parent GPU's UUID)."""
HOLDER = "namespace, pod"
CARRIED = "modelName, Hostname, hostname"
"""Device labels an allocation row lacks and borrows from its device's series, so shared
holdings can be grouped by model and node like exclusive ones."""
LABELLED = '{namespace!=""}'
"""Series of a device attributed to a pod. The attribution sets `namespace` and `pod`
together; the matcher names `namespace` because the server resolves `label!=""` (and
`label=""`) by merging the index entries of every value the label has in the range, and a
fleet has tens of namespaces where it has thousands of pods an hour (on a 1,024-GPU store,
a tenth of the rules' cost)."""
UNLABELLED = '{namespace=""}'
WHOLE_GPUS = '{namespace!="", GPU_I_ID=""}'
"""Labelled whole GPUs: a share of 1, whatever the model."""
INSTANCES = '{namespace!="", GPU_I_ID!=""}'
"""Labelled MIG instances: a share by their slices."""

ACTIVITY_SOURCE = "activity_source"
PROFILING = "profiling"
"""Activity from `DCGM_FI_PROF_GR_ENGINE_ACTIVE` (the graphics engine's busy ratio)."""
UTILISATION = "utilisation"
"""Activity from `DCGM_FI_DEV_GPU_UTIL` / 100, on GPUs with no profiling series (before
Hopper; `exporter.promql.measures`)."""

MIG_SLICES_BY_MODEL: tuple[tuple[str, int], ...] = ((".*A30.*", 4),)
"""Compute slices of a whole GPU where it is not 7 (A30), by `modelName` regex."""
DEFAULT_MIG_SLICES = 7
SLICES = "gpu_usage_slices"
GPU_SLICES = "gpu_usage_gpu_slices"
"""Labels the share join adds (slices of the instance, slices of its GPU where not 7)."""
KIND = "gpu_usage_kind"
"""Label telling exclusive from shared holdings apart where both are folded per pod."""

DEVICE_LABELS: tuple[str, ...] = (
    "gpu", "UUID", "pci_bus_id", "device", "GPU_I_ID", "GPU_I_PROFILE", "container",
    "resource", "replica", "vgpu", "dra_share_id",
    *(f.name for f in CATALOG if f.type is MetricType.LABEL),
)
"""Labels dropped when holdings are summed into one series per pod: what names the device
or the container. The rest stays: namespace, pod, node, model, pod labels, job, instance."""
POD_GROUPING_HINT = ", ".join(DEVICE_LABELS)
FOLDED = ", ".join((*DEVICE_LABELS, SLICES, GPU_SLICES))


def duration(seconds: float) -> str:
    """Return a PromQL duration: whole days, hours, minutes or seconds where exact, else
    milliseconds."""
    ms = round(seconds * 1000)
    if ms <= 0:
        raise ValueError(f"a duration must be positive, not {seconds!r}s")
    for unit, size in (("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1000)):
        if ms % size == 0:
            return f"{ms // size}{unit}"
    return f"{ms}ms"


def short_range(span_s: float, step_s: float | None = None) -> str:
    """Return the range selector over `span_s` less one millisecond, so that its start is
    left out (see `Sampling.steps`), or, given `step_s`, the subquery range over that span's
    steps: `[86399999ms]`, `[86399999ms:5m]`."""
    span = f"{round(span_s * 1000) - 1}ms"
    return f"[{span}]" if step_s is None else f"[{span}:{duration(step_s)}]"


@dataclass(frozen=True, slots=True)
class Sampling:
    """A window and the resolution its holdings are sampled at (subquery steps, aligned to
    multiples of the resolution)."""

    window_s: float
    resolution_s: float

    def steps(self, from_start: bool = False) -> str:
        """Return the subquery range over the window's steps (the multiples of the resolution in
        it), its start left out: Prometheus before 3.0 includes a step lying exactly on it,
        which the previous window already counted (VictoriaMetrics and Prometheus 3 leave
        it out; a millisecond short, all agree). `from_start` adds the step before the
        window's first, for the counter's value before it."""
        ms = round(self.window_s * 1000) - 1
        if from_start:
            ms += round(self.resolution_s * 1000)
        return f"[{ms}ms:{duration(self.resolution_s)}]"

    def span(self) -> str:
        """Return the window as a plain range, its start left out."""
        return short_range(self.window_s)

    @property
    def step(self) -> str:
        """Return the resolution as a PromQL duration (`1m`), the step of the window's
        subqueries."""
        return duration(self.resolution_s)

    @property
    def step_hours(self) -> str:
        """Return the resolution in hours as PromQL number text, the time one sample at one step
        stands for when samples are added up into hours."""
        return repr(self.resolution_s / 3600)


# -- labelled (exclusive) holdings ------------------------------------------------------------


def labelled(fn: str, metric: str, sampling: Sampling, from_start: bool = False,
             selector: str = LABELLED) -> str:
    """Return `fn` (a range function) of every labelled series of `metric` over the window's
    steps."""
    return f"{fn}({metric}{selector}{sampling.steps(from_start)})"


def shared_by_slices(figure: Callable[[str], str]) -> str:
    """Return `figure` (of a labelled-series selector) times each holding's share: whole GPUs as
    they are, MIG instances by their slices. Apart, so the share's joins touch the
    instances only."""
    return f"(\n{figure(WHOLE_GPUS)}\n)\nor\n{slice_share(figure(INSTANCES))}"


def rows_win(expr: str, sampling: Sampling) -> str:
    """Return the labelled holdings in `expr` less those whose pod holds the device through a row in
    the window: virtual-GPU copies. A replica copy (`vgpu`) gives way to its replica's row
    only, so a time-sliced device's one holder (no `vgpu`) keeps its labelled part."""
    r = sampling.steps()
    return (f"(\n{expr}\n)\nunless on({DEVICE}, {HOLDER}, vgpu) (\n"
            f'  count_over_time({ALLOCATION}{{replica=""}}{r})\n'
            f'  or label_replace(count_over_time({ALLOCATION}{{replica!=""}}{r}), '
            f'"vgpu", "$1", "replica", "(.+)")\n)')


def _slice_shares() -> str:
    """Return one constant per (instance slices, GPU slices) pair the share join matches on,
    valued by the share: 1 for a whole GPU (`s`), k/7 (k/4 on an A30) for a k-slice
    instance (`s<k>`)."""
    def constant(value: str, slices: str, total: int) -> str:
        return (f'label_replace(label_replace(vector({value}), "{SLICES}", "{slices}", "", ""), '
                f'"{GPU_SLICES}", "{total}", "", "")')

    totals = sorted({DEFAULT_MIG_SLICES, *(n for _, n in MIG_SLICES_BY_MODEL)})
    terms = [constant("1", "s", total) for total in totals]
    terms += [constant(f"{k}/{total}", f"s{k}", total)
              for total in totals for k in range(1, total + 1)]
    return "(\n    " + "\n    or ".join(terms) + "\n  )"


def slice_share(expr: str) -> str:
    """Return `expr` (device series or figures of them, keeping `GPU_I_PROFILE` and `modelName`)
    times each device's share of its GPU; adds the `gpu_usage_*slices` labels, which the
    fold per pod drops.

    Both labels are always set, never left empty: VictoriaMetrics' `label_replace` leaves
    a label it did not match present but empty, which its joins then tell from an absent
    one (Prometheus drops it). So whole GPUs are `s`, a k-slice instance `s<k>`, and the
    GPU's slices are 7 unless its model says otherwise."""
    out = (f'label_replace(\n{expr},\n"{SLICES}", "s$1", "GPU_I_PROFILE", '
           f'"([0-9]+)g\\\\..*|.*")')
    out = f'label_replace({out}, "{GPU_SLICES}", "{DEFAULT_MIG_SLICES}", "", "")'
    for regex, total in MIG_SLICES_BY_MODEL:
        out = f'label_replace({out}, "{GPU_SLICES}", "{total}", "modelName", "{regex}")'
    return f"{out}\n* on({SLICES}, {GPU_SLICES}) group_left()\n  {_slice_shares()}"


def _activity(selector: str, wrap: Callable[[str], str]) -> str:
    """Return `wrap` (a figure over the window) of each source's series matching `selector`, with
    its `activity_source`: profiling where the GPU has it, else utilisation / 100; the
    choice made once per GPU and window."""
    sources = gpm.GR_ENGINE.labelled(ACTIVITY_SOURCE, PROFILING, UTILISATION, selector,
                                     wrap=wrap)
    assert sources is not None  # every source is enabled here
    return sources


def labelled_activity(fn: str, sampling: Sampling, selector: str = LABELLED) -> str:
    """Return `fn` of each labelled holding's activity (0-1) over the window (`_activity`)."""
    steps = sampling.steps()
    return _activity(selector, lambda series: f"{fn}({series}{steps})")


def labelled_energy_mj(sampling: Sampling) -> str:
    """Return, per labelled whole GPU, the counter's rise over the steps it was held (mJ).

    The rise is the last value less the least, the least taken from the step before the
    window's first where the GPU was held then. A holding that began inside the window has no
    value from before its first step: its rise covers one step fewer, and is scaled by its
    steps over the steps measured (its mean power over its first step). A window in which
    the counter was reset (driver reload, GPU reset) counts what it counted since the
    reset. Energy series exist per physical GPU only, so these are whole GPUs (MIG
    holdings: `holders_energy_mj`)."""
    last = labelled("last_over_time", ENERGY, sampling)
    least = labelled("min_over_time", ENERGY, sampling, from_start=True)
    held = labelled("count_over_time", ENERGY, sampling)
    measured = labelled("count_over_time", ENERGY, sampling, from_start=True)
    return f"({last} - {least})\n* {held}\n/ (({measured} - 1) > 0)"


# -- allocation rows (shared holdings) and per-step joins ------------------------------------


def row_fraction() -> str:
    """Return, per row at one step, the holder's part of its device (1 / rows of the device)."""
    return (f"{ALLOCATION}\n  / on({DEVICE}) group_left count by ({DEVICE}) ({ALLOCATION})")


def shared_devices(sampling: Sampling) -> str:
    """Return, per device with rows in the window, its share of its GPU, with the device labels the
    rows borrow."""
    span = sampling.span()
    marked = (f"(last_over_time({FRAMEBUFFER}{UNLABELLED}{span}) "
              f"and on({DEVICE}) last_over_time({ALLOCATION}{span})) * 0 + 1")
    return f"max by ({DEVICE}, {CARRIED}) (\n{slice_share(marked)}\n)"


def shared(expr: str, sampling: Sampling) -> str:
    """Return the row figures in `expr` times their device's share, with its device labels."""
    return (f"(\n{expr}\n)\n* on({DEVICE}) group_left({CARRIED})\n"
            f"{shared_devices(sampling)}")


def carried(expr: str, sampling: Sampling) -> str:
    """Return the row figures in `expr` with their device's labels, values unchanged."""
    return (f"(\n{expr}\n)\n* on({DEVICE}) group_left({CARRIED})\n"
            f"({shared_devices(sampling)} > bool 0)")


BORROWED = f"{CARRIED}, GPU_I_PROFILE"
"""What a row borrows from its device's series at each step of a per-step join: the device
labels, and the profile its share follows from (`slice_share`)."""


def rows_over(fn: str, series: str, sampling: Sampling, part: bool = True) -> str:
    """Return, per allocation row, `fn` (a range function) over the window's steps of its device's
    value in `series` (a selector of the devices' unlabelled series), times the row's part
    of the device where `part`, as it is otherwise (a peak of activity); with the labels the
    row borrows (`BORROWED`).

    The join runs at every step, over the rows and the devices they name. The labels come
    with the value, so no second pass over the devices' series is needed for them, and a
    choice between two fields (profiling or utilisation) is made after it, once a window,
    as for labelled holdings."""
    rows = row_fraction() if part else f"{ALLOCATION} * 0"
    join = "*" if part else "+"
    device = f"max by ({DEVICE}, {BORROWED}) ({series} and on({DEVICE}) {ALLOCATION})"
    return (f"{fn}((\n{rows}\n{join} on({DEVICE}) group_left({BORROWED})\n{device}\n)"
            f"{sampling.steps()})")


def rows_activity(fn: str, sampling: Sampling, part: bool = True) -> str:
    """Return `rows_over` of each row's device activity (0-1) (`_activity`)."""
    return _activity(UNLABELLED, lambda series: rows_over(fn, series, sampling, part))


MIG_HOLDINGS = FRAMEBUFFER + INSTANCES
"""Labelled MIG instances: their energy is their GPU's, measured on its unlabelled series."""


def gpu_energy_mj(gpus: str, sampling: Sampling) -> str:
    """Return, per GPU (UUID) that `gpus` (a selector) names, at one step, the energy counter's rise
    over the last step (mJ), from the GPU's unlabelled series.

    The plain difference of the values at consecutive steps, not `increase()`: summed over
    steps it telescopes to the counter's exact rise, where `increase()` extrapolates (in
    Prometheus, not in VictoriaMetrics). A step in which the counter dropped (a reset)
    counts nothing."""
    def of(offset: str) -> str:
        return f"avg by (UUID) ({ENERGY}{UNLABELLED}{offset} and on(UUID) {gpus})"
    return f"(\n  ({of('')} - {of(' offset ' + sampling.step)}) >= 0\n)"


def holders_energy_mj(holders: str, gpus: str, sampling: Sampling) -> str:
    """Return, per holding in `holders` (one series each, valued by its part of its device), summed
    over the window: that part of its GPU's energy (mJ), before the device's share. `gpus`
    is a selector naming the GPUs the holders sit on."""
    return (f"sum_over_time((\n{holders}\n* on(UUID) group_left()\n"
            f"{gpu_energy_mj(gpus, sampling)}\n){sampling.steps()})")

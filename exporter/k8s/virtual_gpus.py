"""Virtual GPUs split per holder: each holder's own `FB_USED` and `GPU_UTIL`, as dcgm-exporter's
`--kubernetes-virtual-gpus` reports them, from the processes that holder runs.

With virtual GPUs a shared device's series are repeated once per holder
(`exporter.k8s.attribution`). Copying the device's framebuffer and utilisation onto every
copy would multiply them (four pods on one time-sliced GPU would show four times its
memory), so these two fields instead carry the holder's part:

- `DCGM_FI_DEV_FB_USED`: the framebuffer of the holder's processes (NVML's running compute
  and MPS client processes), in MiB as DCGM converts the device's own value;
- `DCGM_FI_DEV_GPU_UTIL`: the SM utilisation of the holder's processes (NVML's process
  utilisation samples since the previous poll, averaged per process, summed per holder), in
  percent. NVML has no such samples under MIG, and a MIG instance has no `GPU_UTIL` at all.

A holder running no process reads 0. A holder whose part cannot be known gets no series for
that field (never the device's value, never a guess): the process list or samples could not
be read, NVML gives no framebuffer figure for one of its processes, or a process runs in a pod
the API-server watch does not name yet (it could be this holder's). A container holding
several copies (two replicas of one GPU) has its use split evenly between them, so that no
process is counted twice. The device's own value stays in the exposition as one more series
without pod labels (as dcgm-exporter keeps it), and the holders' values, scaled down together
where needed, never add up to more than it (`within`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence

from exporter.devices.convert import CONVERTERS
from exporter.devices.model import EntityKey
from exporter.fields.catalog import Convert
from exporter.k8s.process_use import ContainerKey, EntityUse
from exporter.k8s.types import PodRef, SharerValues

FB_USED = "DCGM_FI_DEV_FB_USED"
GPU_UTIL = "DCGM_FI_DEV_GPU_UTIL"
SPLIT_FIELDS = (FB_USED, GPU_UTIL)
"""The fields dcgm-exporter reports per holder under virtual GPUs; every other field keeps the
device's value on each copy."""

_to_mib = CONVERTERS[Convert.BYTES_TO_MIB]


def _container(ref: PodRef) -> ContainerKey:
    return ref.namespace, ref.pod, ref.container


def holder_values(sharers: Sequence[PodRef], use: EntityUse | None) -> SharerValues:
    """Return each sharer's `FB_USED` and `GPU_UTIL`, in `sharers` order, with None where they
    are unknown.

    `use` is the entity's last read (None when it could not be read)."""
    unknown = (None,) * len(sharers)
    if use is None or not use.complete:
        return {FB_USED: unknown, GPU_UTIL: unknown}
    copies = Counter(_container(ref) for ref in sharers)
    memory: list[float | None] = []
    util: list[float | None] = []
    for ref in sharers:
        key, n = _container(ref), copies[_container(ref)]
        used = use.memory_bytes.get(key, 0.0)
        memory.append(None if used is None else _mib(used) / n)
        if use.sm_ratio is not None:
            # Rounded past the exposition's six decimals: NVML's whole percents, averaged
            # through ratios, come back as 28.999999999999996.
            util.append(round(100.0 * use.sm_ratio.get(key, 0.0) / n, 9))
    return {FB_USED: tuple(memory),
            GPU_UTIL: tuple(util) if use.sm_ratio is not None else unknown}


def _mib(used_bytes: float) -> float:
    value = _to_mib(used_bytes)
    assert value is not None  # the byte-to-MiB conversion answers every number
    return value


def split(sharers: Mapping[EntityKey, tuple[PodRef, ...]],
          uses: Mapping[EntityKey, EntityUse] | None) -> dict[EntityKey, SharerValues]:
    """Return `holder_values` for every shared entity. With `uses` None there are no process
    reads at all (no NVML backend, or no pod watch to name containers), so every holder's part is
    unknown."""
    return {key: holder_values(refs, None if uses is None else uses.get(key))
            for key, refs in sharers.items()}


def within(device_value: float, values: Sequence[float | None]) -> list[float | None]:
    """Return the holders' values, scaled down together so that their sum never exceeds the
    device's value as this same exposition shows it.

    NVML's figures need not agree: the device's value comes from the poll and the processes' from
    the read after it (memory can grow in between), per-process framebuffer is not an exact part
    of the device's used memory, and process SM samples cover the whole interval since the
    previous poll while the device's utilisation covers only NVML's last sampling period (a GPU
    that just went idle reads 0 while its processes' samples still show work)."""
    total = sum(v for v in values if v is not None)
    if total <= device_value or total <= 0:
        return list(values)
    scale = max(device_value, 0.0) / total
    return [None if v is None else v * scale for v in values]

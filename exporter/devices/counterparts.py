"""`DCGM_FI_PROF_*` values on GPUs without GPM, from NVML readings of the same quantities.

`exporter.fields.gpm_fallbacks.SERVED` says which GPM fields have such a counterpart and
where NVML has it: the driver's utilisation samples (`nvmlDeviceGetSamples`), averaged over
those taken since the previous poll, or a cumulative counter read in the entity's one
`nvmlDeviceGetFieldValues` batch, turned into a rate over the poll interval. Each needs a
reading from the poll before, so the first poll after (re)planning yields nothing, like GPM.
A poll with no new sample, or one where a counter wrapped or went back, yields nothing too:
an absent value beats a made-up one, and repeating the last value would show activity that
may have stopped.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass, field

from exporter.devices.errors import is_nvml_error, nvml_code
from exporter.devices.model import EntityKey
from exporter.devices.nvml_api import NVML_ERROR_NOT_FOUND, VALUE_MEMBERS, Handle, NvmlLib
from exporter.fields.catalog import BY_NAME, FieldSpec, Reader
from exporter.fields.gpm_fallbacks import SERVED, Served

FieldKey = tuple[int, int]



def served_for(spec: FieldSpec) -> Served | None:
    """Return how `spec` (a catalog GPM field, under any of its names) is served on a GPU
    without GPM; None when NVML has no counterpart. Matched by GPM metric id, since a
    collectors file may name the field by an alias (`DCGM_FI_PROF_PCIE_TX_BYTES_PER_SECOND`)."""
    if spec.reader is not Reader.GPM or not isinstance(spec.part, int):
        return None
    return _BY_METRIC.get(spec.part)


def _by_metric() -> dict[int, Served]:
    found: dict[int, Served] = {}
    for name, served in SERVED.items():
        part = BY_NAME[name].part
        assert isinstance(part, int), name
        found[part] = served
    return found


_BY_METRIC = _by_metric()


@dataclass(slots=True)
class CounterpartStep:
    """One whole GPU's counterpart series: which name each is served under, and how."""

    outputs: list[tuple[str, Served]] = field(default_factory=list)
    requests: list[FieldKey] = field(default_factory=list)
    """The field-value entries only counterparts read (left out with them on a GPU with
    GPM)."""

    @property
    def sampling_types(self) -> list[int]:
        """Return the `nvmlSamplingType_t`s the outputs read, each read once per poll."""
        return sorted({s.samples for _, s in self.outputs if s.samples is not None})


class CounterpartReader:
    """Keeps, per entity, the last sample timestamp of each sampling type and the last value
    of each counter, and turns new readings into DCGM-unit values."""

    def __init__(self, lib: NvmlLib, clock: Callable[[], float] = time.monotonic) -> None:
        self._lib = lib
        self._clock = clock
        self._seen: dict[tuple[EntityKey, int], int] = {}
        """The newest sample's CPU time stamp (in microseconds) seen, by entity and sampling
        type."""
        self._counters: dict[tuple[EntityKey, FieldKey], tuple[int, float]] = {}
        """Each counter's value and the poll clock when it was read, by entity and field entry."""

    def mean_sample(self, key: EntityKey, handle: Handle, sampling_type: int) -> float | None:
        """Return the mean of the samples taken since the last call for this entity and type
        (percent); None on the first call, or when there is no new sample. NVML errors other
        than NOT_FOUND (no sample newer than the last) propagate."""
        seen = self._seen.get((key, sampling_type))
        try:
            value_type, samples = self._lib.nvmlDeviceGetSamples(handle, sampling_type,
                                                                 seen or 0)
        except Exception as exc:
            if is_nvml_error(exc) and nvml_code(exc) == NVML_ERROR_NOT_FOUND:
                self._seen.setdefault((key, sampling_type), 0)
                return None
            raise
        member = (VALUE_MEMBERS[value_type] if 0 <= value_type < len(VALUE_MEMBERS)
                  else "uiVal")
        newer = [s for s in samples if s.timeStamp > (seen or 0)]
        if newer:
            self._seen[(key, sampling_type)] = max(s.timeStamp for s in newer)
        else:
            self._seen.setdefault((key, sampling_type), 0)
        if seen is None or not newer:
            return None
        return sum(float(getattr(s.sampleValue, member)) for s in newer) / len(newer)

    def rates(self, key: EntityKey, values: dict[FieldKey, float],
              wanted: Iterable[FieldKey], narrow: Collection[FieldKey] = ()
              ) -> dict[FieldKey, float]:
        """Return the per-second increase of each wanted counter since the previous call;
        a counter read for the first time, absent from `values`, or lower than before (it
        wrapped, or the driver reset it) has none this time. Nor has one NVML answered in
        fewer than 64 bits (`narrow`): it wraps every 4 GiB, several times a second on a
        busy PCIe link, so its increase over a poll cannot be known."""
        now = self._clock()
        found: dict[FieldKey, float] = {}
        for entry in wanted:
            value = values.get(entry)
            if value is None or entry in narrow:
                self._counters.pop((key, entry), None)
                continue
            current = int(value)
            previous = self._counters.get((key, entry))
            self._counters[(key, entry)] = (current, now)
            if previous is None:
                continue
            before, then = previous
            if current >= before and now > then:
                found[entry] = (current - before) / (now - then)
        return found

    def keep_only(self, keys: Collection[EntityKey]) -> None:
        """Forget the readings of every entity not in `keys`, so that reading it again later
        starts afresh rather than spanning the gap (or another device behind a reused
        handle)."""
        self._seen = {k: v for k, v in self._seen.items() if k[0] in keys}
        self._counters = {k: v for k, v in self._counters.items() if k[0] in keys}

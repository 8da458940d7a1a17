"""The health watches' inputs over the last minute, per GPU, and their incidents.

The rules themselves, and the NVML reads they need, are `exporter.fields.health_rules`'s; the plan
reads those under hidden names, and `HealthTracker.record` takes them out of each poll's values
again, so they never show as series.
"""

from __future__ import annotations

import collections
from collections.abc import Callable, Iterable, Mapping

from exporter.devices.model import EntityKey
from exporter.fields.health_rules import (
    PREFIX,
    WINDOW_S,
    Facts,
    HealthIncident,
    evaluate,
    failing_codes,
)


class HealthTracker:
    """The last minute of each GPU's health reads; used by the poll thread only."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self._clock = clock
        self._history: dict[int, collections.deque[tuple[float, dict[str, float]]]] = {}

    def record(self, values: dict[EntityKey, dict[str, float]]) -> None:
        """Take this poll's health reads out of `values` (GPU entities only)."""
        now = self._clock()
        for (gpu, instance), entity_values in values.items():
            taken = {k: entity_values.pop(k) for k in [k for k in entity_values
                                                       if k.startswith(PREFIX)]}
            if instance != -1 or not taken:
                continue
            history = self._history.setdefault(gpu, collections.deque())
            history.append((now, taken))
            while history and history[0][0] < now - WINDOW_S:
                history.popleft()

    def _samples(self, gpu: int, now: float) -> tuple[dict[str, float], ...]:
        return tuple(s for t, s in self._history.get(gpu, ()) if t >= now - WINDOW_S)

    def conditions(self, gpus: Iterable[int], mig_on: Mapping[int, bool]
                   ) -> dict[int, frozenset[str]]:
        """Return the DCGM codes failing now on each of `gpus` that has health reads in the
        last minute, from the rules over NVML values only (`failing_codes`)."""
        now = self._clock()
        out = {}
        for gpu in gpus:
            samples = self._samples(gpu, now)
            if samples:
                out[gpu] = failing_codes(Facts(samples, frozenset(), mig_on.get(gpu, False)))
        return out

    def status(self, gpus: Iterable[int], xids: Mapping[int, frozenset[int]],
               mig_on: Mapping[int, bool]) -> dict[int, tuple[HealthIncident, ...]]:
        """Return each GPU's health watches: those of `gpus`, and of any other GPU with XIDs on
        record (a GPU that fell off the bus keeps its XID 79 on display)."""
        now = self._clock()
        status = {}
        for gpu in sorted({*gpus, *xids}):
            samples = self._samples(gpu, now)
            status[gpu] = evaluate(Facts(samples, xids.get(gpu, frozenset()),
                                         mig_on.get(gpu, False)))
        return status

"""Clock event (throttle) reasons counted per GPU: DCGM_EXP_CLOCK_EVENTS_COUNT is how many
polls within a sliding window found each reason active, and DCGM_EXP_CLOCK_EVENTS_TOTAL is how
often each reason turned on since the exporter started.

dcgm-exporter counts DCGM's samples of DCGM_FI_DEV_CLOCKS_EVENT_REASONS taken within the
window, one per collect interval, bit by bit; here each poll is that sample. The poll's plan
reads the bitmask under the pseudo-field's own name (sharing the one
nvmlDeviceGetCurrentClocksEventReasons call with DCGM_FI_DEV_CLOCKS_EVENT_REASONS), and
`record` moves it out of the poll's values into the counter, so it never shows as a value.

The total is edge-counted as dcgm-exporter 4.8.3 does (`clock_events_total_collector.go`): a
GPU's first sample is the baseline, and each later one adds 1 for every reason bit that is on
now and was off in the sample before (`current &^ previous`).
"""

from __future__ import annotations

import collections
import time
from collections.abc import Callable, Iterable

from exporter.devices.model import ClockEventCount, ClockEventTotal

EntityKey = tuple[int, int]

CLOCK_EVENTS_COUNT_FIELD = "DCGM_EXP_CLOCK_EVENTS_COUNT"
CLOCK_EVENTS_TOTAL_FIELD = "DCGM_EXP_CLOCK_EVENTS_TOTAL"
CLOCK_EVENT_FIELDS = (CLOCK_EVENTS_COUNT_FIELD, CLOCK_EVENTS_TOTAL_FIELD)

REASONS: tuple[tuple[int, str], ...] = (
    (0x001, "gpu_idle"),
    (0x002, "clocks_setting"),
    (0x004, "power_cap"),
    (0x008, "hw_slowdown"),
    (0x010, "sync_boost"),
    (0x020, "sw_thermal"),
    (0x040, "hw_thermal"),
    (0x080, "hw_power_brake"),
    (0x100, "display_clocks"),
)
"""NVML's clocks event reason bits and dcgm-exporter's `clock_event` label value for each;
other bits are not counted, as upstream."""


class ClockEventCounter:
    """The bitmasks of the polls within the window, with running counts kept as polls enter
    and leave it (a poll costs the GPUs times the reasons, not the window's length); used by
    the poll thread only."""

    def __init__(self, window_s: float, clock: Callable[[], float] = time.time) -> None:
        self.window_s = window_s
        self._clock = clock
        self._polls: collections.deque[tuple[float, EntityKey, int]] = collections.deque()
        self._counts: collections.Counter[tuple[EntityKey, int]] = collections.Counter()
        """Polls in the window per GPU and reason bit."""
        self._sampled: collections.Counter[EntityKey] = collections.Counter()
        """Polls in the window per GPU."""
        self._previous: dict[EntityKey, int] = {}
        """The last bitmask per GPU (the baseline of the next edge count)."""
        self._edges: collections.Counter[tuple[EntityKey, int]] = collections.Counter()
        """Times each reason bit turned on since start, per GPU."""

    def _tally(self, key: EntityKey, bits: int, step: int) -> None:
        self._sampled[key] += step
        if not self._sampled[key]:
            del self._sampled[key]
        for bit, _ in REASONS:
            if bits & bit:
                self._counts[(key, bit)] += step
                if not self._counts[(key, bit)]:
                    del self._counts[(key, bit)]

    def record(self, values: dict[EntityKey, dict[str, float]]) -> None:
        """Take this poll's bitmasks out of `values`; entities without one are skipped (not
        supported there, or not asked for)."""
        now = self._clock()
        for key, entity_values in values.items():
            counted = entity_values.pop(CLOCK_EVENTS_COUNT_FIELD, None)
            totalled = entity_values.pop(CLOCK_EVENTS_TOTAL_FIELD, None)
            if counted is not None:
                self._polls.append((now, key, int(counted)))
                self._tally(key, int(counted), 1)
            if totalled is not None:
                self._edge(key, int(totalled))

    def _edge(self, key: EntityKey, bits: int) -> None:
        previous = self._previous.get(key)
        self._previous[key] = bits
        if previous is None:
            # The first poll is the baseline: a reason already on before the exporter looked
            # is not counted as turning on.
            return
        turned_on = bits & ~previous
        for bit, _ in REASONS:
            if turned_on & bit:
                self._edges[(key, bit)] += 1

    def totals(self) -> tuple[ClockEventTotal, ...]:
        """Return how often each reason turned on, by GPU and then by reason bit; a reason that
        never turned on has no count."""
        names = dict(REASONS)
        return tuple(ClockEventTotal(key, names[bit], n)
                     for (key, bit), n in sorted(self._edges.items()))

    def window(self, gpus: Iterable[EntityKey] = ()) -> tuple[ClockEventCount, ...]:
        """Return the counts in the window by GPU, then by reason bit; a reason not seen in the
        window has no count. A GPU of `gpus` without any poll in the window gets one count of 0
        and no reason, as dcgm-exporter shows a GPU it has no sample of (a GPU whose samples show
        no reason has no series at all)."""
        cutoff = self._clock() - self.window_s
        while self._polls and self._polls[0][0] < cutoff:
            _, key, bits = self._polls.popleft()
            self._tally(key, bits, -1)
        names = dict(REASONS)
        found = [ClockEventCount(key, names[bit], n)
                 for (key, bit), n in sorted(self._counts.items())]
        found += (ClockEventCount(key, None, 0) for key in set(gpus) - set(self._sampled))
        # The sort is stable, so each GPU's reasons keep their order.
        return tuple(sorted(found, key=lambda c: c.entity_key))

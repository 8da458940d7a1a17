"""DCGM_EXP_CLOCK_EVENTS_COUNT: per GPU and clock-event reason, how many polls within a
sliding window saw the reason's bit set, as dcgm-exporter counts DCGM's cached samples of
DCGM_FI_DEV_CLOCKS_EVENT_REASONS (so it counts polls, not events).
"""

from __future__ import annotations

import collections

from exporter.devices.model import ClockEventCount, EntityKey

REASONS: tuple[tuple[int, str], ...] = (
    (0x1, "gpu_idle"),
    (0x2, "clocks_setting"),
    (0x4, "power_cap"),
    (0x8, "hw_slowdown"),
    (0x10, "sync_boost"),
    (0x20, "sw_thermal"),
    (0x40, "hw_thermal"),
    (0x80, "hw_power_brake"),
    (0x100, "display_clocks"),
)
"""nvmlClocksEventReason* bits and dcgm-exporter's `clock_event` label values."""


class ClockEventLedger:
    """The bitmasks polled within the window, per GPU, with running counts per reason."""

    def __init__(self, window_s: float) -> None:
        self.window_s = window_s
        self._seen: dict[EntityKey, collections.deque[tuple[float, int]]] = {}
        self._counts: dict[EntityKey, list[int]] = {}

    def record(self, key: EntityKey, at: float, reasons: int) -> None:
        self._seen.setdefault(key, collections.deque()).append((at, reasons))
        counts = self._counts.setdefault(key, [0] * len(REASONS))
        for i, (bit, _) in enumerate(REASONS):
            if reasons & bit:
                counts[i] += 1

    def counts(self, now: float, present: set[EntityKey]) -> tuple[ClockEventCount, ...]:
        """Counts of the GPUs in `present` (a GPU gone from the inventory is forgotten)."""
        cutoff = now - self.window_s
        out: list[ClockEventCount] = []
        for key in sorted(self._seen):
            if key not in present:
                del self._seen[key], self._counts[key]
                continue
            samples, counts = self._seen[key], self._counts[key]
            while samples and samples[0][0] < cutoff:
                _, reasons = samples.popleft()
                for i, (bit, _) in enumerate(REASONS):
                    if reasons & bit:
                        counts[i] -= 1
            seen = [ClockEventCount(key, name, n)
                    for (_, name), n in zip(REASONS, counts, strict=True) if n]
            out += seen or [ClockEventCount(key, None, 0)]
        return tuple(out)

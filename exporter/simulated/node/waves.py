"""Activity waves with closed-form integrals.

Every cumulative quantity the simulated node reports (energy, NVLink bytes, GPM activity,
PCIe replays) is an integral of activity over time. Keeping activity a sum of sinusoids
(cut to zero inside idle windows) makes those integrals exact and cheap at any time, so a
value depends only on (profile, seed, t) and counters can never run backwards.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from exporter.simulated.node.fault_specs import Window


@dataclass(frozen=True, slots=True)
class Wave:
    """base + sum(a * sin(w * t + phase)); constructed so it stays within [0, 1]."""

    base: float
    parts: tuple[tuple[float, float, float], ...] = ()
    """(amplitude, angular frequency rad/s, phase rad)."""

    def at(self, t: float) -> float:
        """Return the wave's value at t."""
        return self.base + sum(a * math.sin(w * t + p) for a, w, p in self.parts)

    def integral(self, t0: float, t1: float) -> float:
        """Return the integral of the wave from t0 to t1 (0 when t1 is not after t0)."""
        if t1 <= t0:
            return 0.0
        total = self.base * (t1 - t0)
        for a, w, p in self.parts:
            total += a / w * (math.cos(w * t0 + p) - math.cos(w * t1 + p))
        return total

    @staticmethod
    def random(rng: random.Random, low: float, high: float) -> Wave:
        """Return a load wave whose mean lies in [low, high]: a slow job-level swell plus a faster
        step-to-step ripple, never below 0 nor above 1."""
        base = rng.uniform(low, high)
        room = min(base, 1.0 - base) * 0.97
        slow = room * rng.uniform(0.55, 0.85)
        fast = (room - slow) * rng.uniform(0.6, 1.0)
        return Wave(
            base,
            (
                (slow, 2 * math.pi / rng.uniform(120.0, 420.0), rng.uniform(0, 2 * math.pi)),
                (fast, 2 * math.pi / rng.uniform(12.0, 45.0), rng.uniform(0, 2 * math.pi)),
            ),
        )


def merge(windows: Iterable[Window]) -> tuple[Window, ...]:
    """Return sorted, non-overlapping windows covering the same time."""
    merged: list[Window] = []
    for w in sorted(windows, key=lambda w: w.start):
        if merged:
            last = merged[-1]
            if last.end is None or w.start <= last.end:
                end = None if last.end is None or w.end is None else max(last.end, w.end)
                merged[-1] = Window(last.start, end)
                continue
        merged.append(w)
    return tuple(merged)


@dataclass(frozen=True, slots=True)
class GatedWave:
    """A wave forced to 0 inside its (merged) idle windows."""

    wave: Wave
    idle: tuple[Window, ...] = ()

    def at(self, t: float) -> float:
        """Return the wave's value at t, or 0 inside an idle window."""
        if any(w.active(t) for w in self.idle):
            return 0.0
        return self.wave.at(t)

    def integral(self, t0: float, t1: float) -> float:
        """Return the integral of the wave from t0 to t1, leaving out the idle windows."""
        if t1 <= t0:
            return 0.0
        total = self.wave.integral(t0, t1)
        for w in self.idle:
            start = max(t0, w.start)
            end = t1 if w.end is None else min(t1, w.end)
            total -= self.wave.integral(start, end)
        return max(0.0, total)


def covered(windows: Sequence[Window], t0: float, t1: float) -> float:
    """Return the seconds of [t0, t1] inside any of the windows."""
    return sum(w.overlap(t0, t1) for w in merge(windows))


def breakpoints(windows: Iterable[Window], t0: float, t1: float) -> list[float]:
    """Return [t0, ..., t1] split at every window edge strictly inside the interval."""
    edges = {t0, t1}
    for w in windows:
        for edge in (w.start, w.end):
            if edge is not None and t0 < edge < t1:
                edges.add(edge)
    return sorted(edges)

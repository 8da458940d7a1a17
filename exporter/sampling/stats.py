"""Counters the poll loop keeps about itself (exported as gpu_exporter_* self-metrics)."""

from __future__ import annotations

import collections
from dataclasses import dataclass, field

POLL_ERROR_REASONS = ("deadline", "busy", "nvml_down", "exception")


@dataclass(slots=True)
class PollStats:
    """What the poll loop counts about itself: its interval, the last poll's duration and success,
    scrapes and errors."""

    collect_interval_s: float
    last_duration_s: float | None = None
    last_success: float | None = None
    """Unix time of the last poll that read devices."""
    scrapes: int = 0
    errors: collections.Counter[str] = field(
        default_factory=lambda: collections.Counter(dict.fromkeys(POLL_ERROR_REASONS, 0)))
    reloads: collections.Counter[str] = field(
        default_factory=lambda: collections.Counter({"success": 0, "failure": 0}))
    last_reload_success: float | None = None

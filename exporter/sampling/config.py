"""What the poll loop is told at start-up: how often to poll, the host label, what to watch."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from exporter.sampling.snapshot import HostLabel


@dataclass(frozen=True, slots=True)
class SamplerSettings:
    """The sampler's settings, filled from the serve options whose `fills` names
    `sampler.<field>` (exporter/options/serve_table.py) and from exporter/config.py."""

    interval_s: float = 15.0
    """Time between polls."""
    host: HostLabel = field(default_factory=lambda: HostLabel("hostname", ""))
    """The host label every series carries (its name None: no host label)."""
    deadline_s: float | None = None
    """Longest a device poll may take before it counts as failed (default: the interval)."""
    collectors_path: Path | None = None
    """Watched for changes and re-read on reload; None: fixed collectors."""

"""What the exposition layer is told at start-up: the label names, the jobs, the label limit
and which bodies each poll renders."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True, slots=True)
class ExpositionSettings:
    """The publisher's settings, filled from the serve options whose `fills` names
    `exposition.<field>` (exporter/options/serve_table.py, dcgm_table.py) and, for the
    bodies rendered, from what the web layer serves (exporter/config.py)."""

    use_old_namespace: bool = False
    """dcgm-exporter 1.x label names (`-o`)."""
    replace_blanks_in_model_name: bool = False
    """`modelName` with dashes for blanks (`-rbmn`)."""
    hpc_job_mapping_dir: Path | None = None
    """Files naming the HPC jobs on each GPU; None: no `hpc_job` label."""
    label_limit: int = 0
    """At most this many labels per series, the name counted; copied pod labels beyond it
    are left off. 0: no limit."""
    openmetrics: bool = True
    """Render the OpenMetrics body too (serve: only when the endpoint may serve it)."""
    appendable: bool = False
    """Render the gzipped bodies so that scrapes can append to them
    (`--enable-exporter-metrics`: `Rendered.text_open`)."""


DEFAULT_EXPOSITION_SETTINGS = ExpositionSettings()
"""Every setting at its default (what tests and benchmarks render with)."""

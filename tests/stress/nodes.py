"""Exporters the matrix runs: over the simulated libnvidia-ml with a control channel, or on
the built-in simulated node; and small helpers on what a scrape shows."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tests.nvmlsim.harness import child_env, write_scenario
from tests.stress.controlled import command_line
from tests.stress.harness import StressRun
from tests.stress.scraper import Scrape
from tests.support.exporter_process import ExporterProcess

INTERVAL = "300ms"
"""Short polls keep each phase short; /ready's staleness limit is then 0.9 s."""

TEMP = "DCGM_FI_DEV_GPU_TEMP"
FB_USED = "DCGM_FI_DEV_FB_USED"
NVML_UP = "gpu_exporter_nvml_up"

MIG_GPU: dict[str, Any] = {"mig": [
    {"gi": 2, "profile": "3g.71gb", "compute_instances": [{"index": 0}]},
    {"gi": 9, "profile": "1g.18gb", "compute_instances": [{"index": 5}]},
]}
NODE: dict[str, Any] = {"device_count": 4, "devices": [{}, {}, MIG_GPU, {}]}
"""Four H200s, GPU 2 in MIG mode with GPU instances 2 and 9."""


SCRAPED_FORMATS = ("--web.enable-openmetrics",)
"""The scraper rotates through text and OpenMetrics (each plain and gzipped): OpenMetrics is
served only when enabled (text 0.0.4 is the default, as from dcgm-exporter)."""


def start_controlled(factory: type[ExporterProcess], lib: Path, tmp: Path,
                     scenario: Mapping[str, Any] = NODE, *args: str) -> StressRun:
    """The exporter (`--backend nvml`, real pynvml) over the simulated library, whose
    control calls the run sends with `control`."""
    env = child_env(lib, write_scenario(tmp, dict(scenario)))
    proc = factory(["--backend", "nvml", "-c", INTERVAL, "--no-hostname", *SCRAPED_FORMATS,
                    *args], env,
                   launcher=(sys.executable, "-m", "tests.stress.controlled"),
                   stdin=subprocess.PIPE)
    return StressRun(proc).start()


def control(run: StressRun, call: str, *args: Any, **kwargs: Any) -> None:
    stdin = run.exporter.proc.stdin
    assert stdin is not None, "started without a control channel"
    stdin.write(command_line(call, *args, **kwargs))
    stdin.flush()


def start_sim(factory: type[ExporterProcess], *args: str, profile: str = "h100-8",
              env: dict[str, str] | None = None, interval: str = INTERVAL) -> StressRun:
    """The exporter on the built-in simulated node."""
    proc = factory(["--backend", "sim", "--sim.profile", profile, "-c", interval,
                    "--no-hostname", *SCRAPED_FORMATS, *args], env)
    return StressRun(proc).start()


def dcgm_names(scrape: Scrape, **labels: str) -> list[str]:
    """Names of the DCGM_FI_* series whose labels include `labels`."""
    if scrape.samples is None:
        return []
    return sorted({name for name, lab in scrape.samples
                   if name.startswith("DCGM_FI_")
                   and all(dict(lab).get(k) == v for k, v in labels.items())})


def gpus_with(scrape: Scrape, name: str) -> set[str]:
    return {lab["gpu"] for lab, _ in scrape.matching(name)}


def during(scrape: Scrape, marks: Mapping[str, float], start: str, end: str | None) -> bool:
    """Whether the scrape was sent between two marks (an absent mark: not yet reached)."""
    if start not in marks or scrape.at < marks[start]:
        return False
    return end is None or end not in marks or scrape.at < marks[end]

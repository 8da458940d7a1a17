"""The simulated nodes the consumers' queries run against: one exporter per GPU generation,
each scraped by its own real Prometheus (the queries aggregate over every series they see,
so two nodes in one Prometheus would mix their answers).

Every query is evaluated as an instant query at one explicit time `at`: the first 5-minute
boundary after the data was scraped. OpenCost's subqueries (`[1h:5m]`, `[65m:5m]`) step on
5-minute boundaries of the evaluation time, so at such a boundary their last step always
falls on the data, whatever the wall clock said when the test ran. Prometheus is started with
a lookback delta longer than 5 minutes, so a plain selector at `at` still sees the last
scraped samples.
"""

from __future__ import annotations

import contextlib
import math
import re
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.support.exporter_process import ExporterProcess
from tests.support.prometheus import PrometheusProcess
from tests.support.wait import wait_until

STEP_S = 300
"""OpenCost's query resolution (PROMETHEUS_QUERY_RESOLUTION_SECONDS): its subqueries' step."""
LOOKBACK = "10m"
"""Longer than STEP_S, so that a selector evaluated at the next boundary still sees data."""
BRAKE_AT_S, BRAKE_FOR_S = 6, 3
"""The simulated power brake on each node's `brake_gpu`: seconds after the exporter started,
and how long it holds. Its violation counter must then have risen by BRAKE_FOR_S seconds."""
XID = 13
"""An XID (graphics engine exception) on the same GPU at the same time: OpenCost counts the
changes of the last-XID gauge."""
WAIT_S = 120.0


@dataclass(frozen=True)
class Generation:
    """One simulated node and what its board can physically serve."""

    id: str
    title: str
    profile: str
    hopper: bool
    """GPM (Hopper or newer): SM_ACTIVE, SM_OCCUPANCY and PIPE_* can only be measured there."""
    nvlink: bool
    mig: bool
    brake_gpu: int
    """A GPU a pod's container holds whole, so its violation counter carries `container`."""
    extra_args: tuple[str, ...] = ()


GENERATIONS = (
    Generation("hopper", "Hopper (8x H100, whole GPUs held by pods)", "h100-8",
               hopper=True, nvlink=True, mig=False, brake_gpu=0),
    Generation("mig", "MIG (8x H200, two GPUs in MIG)", "h200-mig",
               hopper=True, nvlink=True, mig=True, brake_gpu=2),
    Generation("a100", "A100 (4x A100 SXM, whole GPUs held by pods)", "a100-4",
               hopper=False, nvlink=True, mig=False, brake_gpu=0),
    Generation("a100-timesliced", "A100 time-sliced (virtual GPUs)", "a100-timesliced",
               hopper=False, nvlink=True, mig=False, brake_gpu=0,
               extra_args=("--kubernetes-virtual-gpus",)),
    Generation("l4", "L4 (one PCIe L4)", "l4-1",
               hopper=False, nvlink=False, mig=False, brake_gpu=0),
)


def field_names(texts: Sequence[str]) -> list[str]:
    """Return every DCGM field name the given query texts read, sorted."""
    return sorted({name for text in texts for name in re.findall(r"\bDCGM_FI_[A-Z0-9_]+", text)})


def collectors_csv(names: Sequence[str]) -> str:
    """Return a collectors CSV enabling `names`: the violation timers are counters, as in
    dcgm-exporter's CSVs; everything else a gauge, as dcgm-exporter declares these."""
    return "".join(f"{n}, {'counter' if n.endswith('_VIOLATION') else 'gauge'}, {n}\n"
                   for n in names)


@dataclass
class Node:
    """A running node: its exporter, its Prometheus and the evaluation time `at`."""

    generation: Generation
    exporter: ExporterProcess
    prometheus: PrometheusProcess
    at: float = 0.0

    def query(self, expr: str) -> list[dict[str, Any]]:
        """Return the instant query's result at `at`."""
        return self.prometheus.query(expr, at=self.at)

    def has_data(self) -> bool:
        """Whether the brake is over in what was scraped and every series has enough samples
        for `rate` and `increase` (at least five scrapes)."""
        now = time.time()
        brake = self.prometheus.query(
            f'DCGM_FI_DEV_POWER_VIOLATION{{gpu="{self.generation.brake_gpu}"}}', at=now)
        scrapes = self.prometheus.query("min(count_over_time(up[1h]))", at=now)
        return (bool(brake) and float(brake[0]["value"][1]) >= BRAKE_FOR_S * 1e9
                and bool(scrapes) and float(scrapes[0]["value"][1]) >= 5)


def exporter_args(generation: Generation, csv: Path) -> list[str]:
    return ["--backend", "sim", "--sim.profile", generation.profile, "-f", str(csv),
            "-c", "500ms", "--sim.kubelet", "--kubernetes-enable-pod-uid",
            "--sim.fault",
            f"power-brake,gpu={generation.brake_gpu},at={BRAKE_AT_S}s,for={BRAKE_FOR_S}s",
            "--sim.fault", f"xid,code={XID},gpu={generation.brake_gpu},at={BRAKE_AT_S}s",
            *generation.extra_args]


@contextlib.contextmanager
def running_nodes(tmp: Path, fields: Sequence[str]) -> Iterator[dict[str, Node]]:
    """Start every generation's node with `fields` enabled, wait until each has the data the
    queries need, fix each node's evaluation time, and stop everything on exit."""
    csv = tmp / "collectors.csv"
    csv.write_text(collectors_csv(fields))
    exporters: list[ExporterProcess] = []
    prometheuses: list[PrometheusProcess] = []
    nodes: dict[str, Node] = {}
    try:
        for generation in GENERATIONS:
            exporters.append(ExporterProcess(exporter_args(generation, csv)))
        for generation, exporter in zip(GENERATIONS, exporters, strict=True):
            exporter.wait_ready(60.0)
            config = {"global": {"scrape_interval": "1s", "scrape_timeout": "1s"},
                      "scrape_configs": [{"job_name": "dcgm-exporter", "static_configs": [
                          {"targets": [f"127.0.0.1:{exporter.port}"]}]}]}
            prometheuses.append(PrometheusProcess(
                tmp / generation.id, config, args=(f"--query.lookback-delta={LOOKBACK}",)))
            nodes[generation.id] = Node(generation, exporter, prometheuses[-1])
        for node in nodes.values():
            node.prometheus.wait_ready()
        for node in nodes.values():
            wait_until(node.has_data, WAIT_S, 0.5,
                       what=f"{node.generation.id}: the brake scraped and five scrapes")
            node.at = math.ceil(time.time() / STEP_S) * STEP_S
        yield nodes
    finally:
        for prometheus in prometheuses:
            prometheus.stop()
        for exporter in exporters:
            exporter.close()

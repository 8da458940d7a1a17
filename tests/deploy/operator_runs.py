"""The containers of the GPU Operator cases: each started once, shared by a module's tests.

A `Case` is a rendered DaemonSet plus what the cluster holds for it (ConfigMaps, files on
the node). `Runs.get` starts the case's container on its own simulated node on first use
and measures the first readiness-probe success from the process start; a container that
never answers is recorded once and re-raised to every test of the case.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from tests.support.apiserver import FakeApiServer
from tests.support.metrics_reader import MetricsReader

from .operator_node import ContainerProcess, SimNode, start_container, write_scenario
from .operator_render import ImageSpec, Obj, env_value, under

UPSTREAM_DEFAULT_COLLECTORS = "/etc/dcgm-exporter/default-counters.csv"
"""dcgm-exporter's --collectors default, inside the container."""


@dataclass(frozen=True)
class Case:
    daemonset: Callable[[], Obj]
    configmaps: dict[str, dict[str, str]] = field(default_factory=dict)
    host_files: dict[str, str] = field(default_factory=dict)
    """Files on the node, by host path (what a workload manager writes for HPC mapping)."""


@dataclass
class Run(MetricsReader):
    daemonset: Obj
    process: ContainerProcess
    health_after_s: float

    @property
    def container(self) -> Obj:
        container: Obj = self.daemonset["spec"]["template"]["spec"]["containers"][0]
        return container

    def collectors_path(self) -> Path:
        """The CSV this container is configured with: the last -f/--collectors argument,
        else DCGM_EXPORTER_COLLECTORS, else dcgm-exporter's default (container paths)."""
        path = env_value(self.container, "DCGM_EXPORTER_COLLECTORS") or \
            UPSTREAM_DEFAULT_COLLECTORS
        args = list(self.container.get("args") or [])
        for i, arg in enumerate(args):
            if arg in ("-f", "--collectors") and i + 1 < len(args):
                path = args[i + 1]
            elif arg.startswith("--collectors="):
                path = arg.split("=", 1)[1]
        return under(self.process.root, path)

    def get(self, path: str, timeout: float = 5.0) -> tuple[int, str]:
        return self.process.get(path, timeout)


class Runs:
    """Each case's container, started on first use and kept for the module's tests."""

    def __init__(self, cases: dict[str, Case], lib_dir: Path, image: ImageSpec,
                 cluster: FakeApiServer) -> None:
        self._cases = cases
        self._lib_dir = lib_dir
        self._image = image
        self._cluster = cluster
        self._runs: dict[str, Run | AssertionError] = {}
        self._processes: list[ContainerProcess] = []
        self._cleanup: list[Callable[[], None]] = []

    def get(self, case_id: str) -> Run:
        if case_id not in self._runs:
            try:
                self._runs[case_id] = self._start(self._cases[case_id])
            except AssertionError as exc:
                self._runs[case_id] = exc
        run = self._runs[case_id]
        if isinstance(run, AssertionError):
            raise run
        return run

    def _start(self, case: Case) -> Run:
        # A short root: the kubelet socket under it must fit a unix socket path.
        root = Path(tempfile.mkdtemp(prefix="gop-", dir="/tmp"))
        self._cleanup.append(lambda: shutil.rmtree(root, ignore_errors=True))
        node = SimNode.start(root)
        self._cleanup.append(node.stop)
        for host_path, text in case.host_files.items():
            under(root, host_path).parent.mkdir(parents=True, exist_ok=True)
            under(root, host_path).write_text(text)
        daemonset = case.daemonset()
        process = start_container(daemonset, self._image, root, lib_dir=self._lib_dir,
                                  scenario=write_scenario(root), cluster=self._cluster,
                                  configmaps=case.configmaps)
        self._processes.append(process)
        probe = daemonset["spec"]["template"]["spec"]["containers"][0]["readinessProbe"]
        health_after = process.first_probe_success(
            probe["httpGet"]["path"], budget_s=float(probe["initialDelaySeconds"]),
            timeout_s=float(probe.get("timeoutSeconds", 1)))
        return Run(daemonset, process, health_after)

    def close(self) -> None:
        for process in self._processes:  # all at once: each takes a moment to shut down
            process.terminate()
        for process in self._processes:
            process.stop()
        for step in reversed(self._cleanup):
            step()

"""The chart's rendered exporter container, started on a simulated GPU node.

`start_release` is the one place that decides how a container runs. Today it runs it as a
process, exactly as tests/deploy/operator_node.py runs the GPU Operator's container (the
image's files laid out from the Dockerfile, the entrypoint with the container's args, env and
volume mounts under a temporary root; the liberties it takes are listed there). Running the
built image instead (a podman helper in tests/support) replaces the body of `_start_process`
and nothing else: the release, the node and the checks stay as they are.

What stands in for the cluster: the ConfigMaps and Secrets the release renders (plus those a
values file says exist already), the simulated NVML library and kubelet of operator_node,
and its fake API server when the pod gets a service-account token. One more liberty than
the operator's test: the web config names certificate files by container path, so its text
is re-rooted like the env values and arguments are.
"""

from __future__ import annotations

import base64
import shutil
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from tests.deploy.operator_node import ContainerProcess, SimNode, start_container, write_scenario
from tests.deploy.operator_render import DOCKERFILE, read_dockerfile
from tests.deploy.operator_runs import Run
from tests.support.apiserver import FakeApiServer
from tests.support.wait import wait_until

from ._chart import Obj, of_kind, one

WEB_CONFIG_KEY = "web-config.yaml"
CONTAINER_ETC = "/etc/dcgm-exporter/"


@dataclass(frozen=True)
class Release:
    """The objects a values file renders, and Secrets the cluster already holds for it."""

    objects: list[Obj]
    existing_secrets: Mapping[str, Mapping[str, str]] = field(default_factory=dict)

    @property
    def daemonset(self) -> Obj:
        return one(self.objects, "DaemonSet")

    def configmaps(self) -> dict[str, dict[str, str]]:
        return {c["metadata"]["name"]: dict(c.get("data", {}))
                for c in of_kind(self.objects, "ConfigMap")}

    def secrets(self) -> dict[str, dict[str, str]]:
        found = {s["metadata"]["name"]: {
            **{k: base64.b64decode(v).decode() for k, v in s.get("data", {}).items()},
            **s.get("stringData", {})} for s in of_kind(self.objects, "Secret")}
        found.update({name: dict(data) for name, data in self.existing_secrets.items()})
        return found


def _rerooted(stores: dict[str, dict[str, str]], root: Path) -> dict[str, dict[str, str]]:
    """Web config texts with the container paths they name under `root`."""
    return {name: {key: text.replace(CONTAINER_ETC, f"{root}{CONTAINER_ETC}")
                   if key == WEB_CONFIG_KEY else text for key, text in data.items()}
            for name, data in stores.items()}


def _start_process(release: Release, root: Path, *, lib_dir: Path,
                   cluster: FakeApiServer) -> ContainerProcess:
    return start_container(release.daemonset, read_dockerfile(DOCKERFILE), root,
                           lib_dir=lib_dir, scenario=write_scenario(root), cluster=cluster,
                           configmaps=_rerooted(release.configmaps(), root),
                           secrets=_rerooted(release.secrets(), root))


def _answering(process: ContainerProcess, path: str, budget_s: float) -> None:
    """Waits until `path` answers 200 over plain HTTP (the probes' way)."""
    def answered() -> bool:
        if process.proc.poll() is not None:
            raise AssertionError(f"the exporter exited with {process.proc.returncode}:\n"
                                 f"{process.output()}")
        try:
            return process.get(path, timeout=2)[0] == 200
        except OSError:
            return False

    wait_until(answered, timeout=budget_s, interval=0.1, what=f"{path} answering 200")


class Releases:
    """Each case's container, started on its own node on first use, kept for the module."""

    def __init__(self, cases: Mapping[str, Callable[[], Release]], lib_dir: Path,
                 cluster: FakeApiServer) -> None:
        self._cases = cases
        self._lib_dir = lib_dir
        self._cluster = cluster
        self._runs: dict[str, Run | AssertionError] = {}
        self._releases: dict[str, Release] = {}
        self._processes: list[ContainerProcess] = []
        self._cleanup: list[Callable[[], None]] = []

    def get(self, case_id: str) -> Run:
        if case_id not in self._runs:
            try:
                self._releases[case_id] = self._cases[case_id]()
                self._runs[case_id] = self._start(self._releases[case_id])
            except AssertionError as exc:
                self._runs[case_id] = exc
        run = self._runs[case_id]
        if isinstance(run, AssertionError):
            raise run
        return run

    def release(self, case_id: str) -> Release:
        """The objects the case's container was started from (a re-render would differ:
        an auto-generated certificate is new each time)."""
        self.get(case_id)
        return self._releases[case_id]

    def _start(self, release: Release) -> Run:
        # A short root: the kubelet socket under it must fit a unix socket path.
        root = Path(tempfile.mkdtemp(prefix="chart-", dir="/tmp"))
        self._cleanup.append(lambda: shutil.rmtree(root, ignore_errors=True))
        node = SimNode.start(root)
        self._cleanup.append(node.stop)
        process = _start_process(release, root, lib_dir=self._lib_dir, cluster=self._cluster)
        self._processes.append(process)
        # Liveness, then readiness (a poll has succeeded): both probes, over plain HTTP.
        _answering(process, "/health", budget_s=30)
        _answering(process, "/ready", budget_s=60)
        return Run(release.daemonset, process, health_after_s=0.0)

    def close(self) -> None:
        for process in self._processes:  # all at once: each takes a moment to shut down
            process.terminate()
        for process in self._processes:
            process.stop()
        for step in reversed(self._cleanup):
            step()

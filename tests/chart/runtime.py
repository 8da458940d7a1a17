"""The chart's rendered exporter container, run from this checkout's image on a simulated GPU
node, as a kubelet runs it.

Each case's DaemonSet container runs under podman (tests/support/container.py) from the pod
spec Helm rendered, translated by tests/support/pod_container.py: its args, env (the
downward API included), volume mounts (the pod-resources hostPath, ConfigMaps and Secrets
with their file modes and subPaths, the in-memory /tmp), its securityContext (user, read-only
root, capabilities), the pod's name as host name, and, where the pod gets one, a
service-account token. Only the image is swapped: the spec names a registry's, the test runs
this checkout's (`built_image`).

What stands in for the cluster and the node:
- the ConfigMaps and Secrets the release renders, plus those a values file says exist;
- per case, a node (tests/image/node.py): a real kubelet pod-resources gRPC server on the
  socket under the pod's hostPath, and the simulated libnvidia-ml.so.1 mounted where the
  NVIDIA toolkit injects the driver's (with NVMLSIM_SCENARIO naming its GPUs);
- one API server for every case: the fake one of tests/support/apiserver.py with the pods and
  the DRA ResourceSlice of tests/deploy/operator_node.py, serving HTTPS with a certificate
  from a CA made here (the pods' ca.crt) and requiring the pods' token. It listens on the
  host's loopback, which the containers' network reaches at HOST_LOOPBACK, the address of
  the `kubernetes` Service in their environment.

The containers of a module start together on first use (their start-ups overlap), each
checked as its probes would be (/health, then /ready), and stay up for the module's tests.
"""

from __future__ import annotations

import base64
import secrets
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from scripts.podman import PodmanError
from tests.deploy.operator_node import NODE_NAME, start_cluster
from tests.image.node import ContainerNode
from tests.support.apiserver import FakeApiServer
from tests.support.container import HOST_LOOPBACK, RunningContainer, start
from tests.support.metrics_reader import MetricsReader
from tests.support.pod_container import ApiAccess, PodSpecError
from tests.support.requirements import require_module, require_tool

from ._chart import Obj, of_kind, one

POD_SUFFIX = "x7k2p"
"""What the DaemonSet controller appends to the pod's name on the node."""
HEALTH_BUDGET_S = 180.0
READY_BUDGET_S = 240.0
"""From `podman run`, with every case starting at once on a small machine shared with other
work: a start that is merely slow is not what these tests are about."""


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

    def downward(self) -> dict[str, str]:
        """What the downward API answers for the DaemonSet's pod on the node."""
        metadata = self.daemonset["metadata"]
        return {"spec.nodeName": NODE_NAME, "metadata.name": f"{metadata['name']}-{POD_SUFFIX}",
                "metadata.namespace": metadata["namespace"]}


@dataclass
class ChartRun(MetricsReader):
    """One case's container, running."""

    release: Release
    running: RunningContainer

    @property
    def container(self) -> Obj:
        """The container as Helm rendered it."""
        container: Obj = self.release.daemonset["spec"]["template"]["spec"]["containers"][0]
        return container

    @property
    def port(self) -> int:
        """The host port the container's metrics port is published on."""
        assert self.running.host_port is not None
        return self.running.host_port

    def get(self, path: str, timeout: float = 5.0) -> tuple[int, str]:
        return self.running.get(path, timeout)


@dataclass
class Cluster:
    """The fake API server as the pods reach it."""

    server: FakeApiServer
    access: ApiAccess

    @classmethod
    def start(cls, folder: Path) -> Cluster:
        require_module("cryptography")
        from tests.support.certs import Authority

        ca = Authority("cluster CA")
        cert, key = ca.server("kubernetes", HOST_LOOPBACK).write(folder, "apiserver")
        token = secrets.token_urlsafe(24)
        server = start_cluster(tls=(cert, key), token=token)
        return cls(server, ApiAccess(server.port, token, ca.pem.decode()))

    def stop(self) -> None:
        self.server.stop()


class Releases:
    """Each case's container, all started on first use, kept for the module."""

    def __init__(self, cases: Mapping[str, Callable[[], Release]], image: str,
                 nvml_lib: Path) -> None:
        self._cases = cases
        self._image = image
        self._nvml_lib = nvml_lib
        require_tool("slirp4netns", "slirp4netns")  # the network reaching the API server
        self._folder = Path(tempfile.mkdtemp(prefix="chart-"))
        self.cluster = Cluster.start(self._folder)
        self._runs: dict[str, ChartRun | AssertionError] = {}
        self._releases: dict[str, Release] = {}
        self._nodes: list[ContainerNode] = []
        self._containers: list[RunningContainer] = []

    def get(self, case_id: str) -> ChartRun:
        if not self._runs:
            self._start_all()
        run = self._runs[case_id]
        if isinstance(run, AssertionError):
            raise run
        return run

    def release(self, case_id: str) -> Release:
        """The objects the case's container was started from (a re-render would differ:
        an auto-generated certificate is new each time)."""
        self.get(case_id)
        return self._releases[case_id]

    def _start_all(self) -> None:
        # Rendering and the nodes here, one at a time; podman and the waits in parallel.
        started: dict[str, Callable[[], ChartRun]] = {}
        for case_id, make in self._cases.items():
            try:
                self._releases[case_id] = make()
                started[case_id] = self._starter(self._releases[case_id])
            except (AssertionError, PodSpecError) as exc:
                self._runs[case_id] = AssertionError(f"{case_id}: {exc}")
        with ThreadPoolExecutor(max_workers=max(len(started), 1)) as pool:
            futures = {case_id: pool.submit(begin) for case_id, begin in started.items()}
            for case_id, future in futures.items():
                try:
                    self._runs[case_id] = future.result()
                except (AssertionError, PodmanError, subprocess.TimeoutExpired) as exc:
                    self._runs[case_id] = AssertionError(f"{case_id}: {exc}")

    def _starter(self, release: Release) -> Callable[[], ChartRun]:
        """The case's node, started, and what starts its container on it."""
        node = ContainerNode.start(self._nvml_lib)
        self._nodes.append(node)
        pod = release.daemonset["spec"]["template"]["spec"]
        spec = node.spec(pod, pod["containers"][0], self._image,
                         configmaps=release.configmaps(), secrets=release.secrets(),
                         api=self.cluster.access, downward=release.downward())

        def begin() -> ChartRun:
            running = start(spec)
            self._containers.append(running)
            try:
                # Liveness, then readiness (a poll has succeeded): both probes, plain HTTP.
                running.answered("/health", budget_s=HEALTH_BUDGET_S)
                running.answered("/ready", budget_s=READY_BUDGET_S)
            except AssertionError as exc:
                raise AssertionError(f"{exc}\n{running.logs()}") from exc
            return ChartRun(release, running)

        return begin

    def close(self) -> None:
        with ThreadPoolExecutor(max_workers=max(len(self._containers), 1)) as pool:
            list(pool.map(RunningContainer.remove, self._containers))
        for node in self._nodes:
            node.stop()
        self.cluster.stop()
        shutil.rmtree(self._folder, ignore_errors=True)

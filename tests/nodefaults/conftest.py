"""The fixture of the node fault tests that run real exporter processes (`--backend sim`)
against the fake API server, and what they share."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.apiserver import FakeApiServer
from tests.support.exporter_process import ExporterProcess

NODE = "gpu-node-1"
"""The node every exporter process runs on (its `NODE_NAME`)."""
SIM = ["--backend", "sim", "-c", "500ms"]

Start = Callable[..., ExporterProcess]


@pytest.fixture
def start(tmp_path: Path) -> Iterator[Start]:
    """Yield a function that starts an exporter on the simulated node `NODE` (h100-8 unless
    `profile` says otherwise), pointed at a fake API server with a kubeconfig, and returns
    it once ready; each is stopped at the end of the test."""
    started: list[ExporterProcess] = []

    def _start(api: FakeApiServer, *args: str, profile: str = "h100-8") -> ExporterProcess:
        kubeconfig = api.write_kubeconfig(tmp_path / "kubeconfig")
        env = {"KUBECONFIG": kubeconfig, "NODE_NAME": NODE, "KUBERNETES_SERVICE_HOST": ""}
        proc = ExporterProcess([*SIM, "--sim.profile", profile, *args], env=env)
        started.append(proc)
        proc.wait_ready()
        return proc

    yield _start
    for proc in started:
        proc.close()


def condition(api: FakeApiServer, kind: str = "GPUHardwareReady") -> dict[str, Any] | None:
    """Return a copy of the node's condition of type `kind`, or None when it has none."""
    for c in api.state.store.nodes[NODE]["status"]["conditions"]:
        if c["type"] == kind:
            return dict(c)
    return None

"""The manifests' container args and probe paths against the real exporter.

Each exporter container of the manifests is started as a local process with exactly its
`args` and `env` (downward-API values filled in as the kubelet would), on the simulated
node and a loopback address, with the kubelet socket absent as on a node whose kubelet is
restarting. Every HTTP probe the manifest declares must then answer 200: a flag the CLI
refuses or a probe on a wrong path would crash-loop the pods.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

import pytest

from tests.support.wait import wait_until

from ._manifests import (
    DEPLOY_DIR,
    REPO_ROOT,
    Obj,
    exporter_containers,
    load_tree,
    name_of,
)

DOWNWARD_API = {
    "metadata.name": "llm-inference-7f9c-qz2lm",
    "metadata.namespace": "inference-demo",
    "spec.nodeName": "gpu-node-1",
}
WEB_CONFIG_ENV = "DCGM_EXPORTER_WEB_CONFIG_FILE"


class Running(NamedTuple):
    container: Obj
    port: int
    log: Path
    proc: subprocess.Popen[bytes]


def _cases() -> list[tuple[str, Obj]]:
    """Every exporter container of the manifests, named by its file (each entry point under
    deploy/daemonset is one rendered file). One naming a web config file is left to
    test_tls_overlay.py, which lays out the Secrets it reads."""
    cases = []
    for doc in load_tree().objects:
        if doc.obj.get("kind") not in ("DaemonSet", "Deployment"):
            continue
        for container, _ in exporter_containers(doc.obj):
            if any(e.get("name") == WEB_CONFIG_ENV for e in container.get("env", [])):
                continue
            where = doc.path.parent.relative_to(DEPLOY_DIR)
            cases.append((f"{where}/{name_of(doc.obj)}/{container['name']}", container))
    return cases


CASES = _cases()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _container_env(container: Obj) -> dict[str, str]:
    env: dict[str, str] = {}
    for var in container.get("env", []):
        if "value" in var:
            env[var["name"]] = str(var["value"])
        else:
            env[var["name"]] = DOWNWARD_API[var["valueFrom"]["fieldRef"]["fieldPath"]]
    return env


def _status(url: str) -> int | None:
    try:
        with urllib.request.urlopen(url, timeout=3) as resp:
            status: int = resp.status
            return status
    except urllib.error.HTTPError as exc:
        return exc.code
    except OSError:
        return None


@pytest.fixture(params=[c for _, c in CASES], ids=[name for name, _ in CASES])
def running(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Running]:
    container: Obj = request.param
    port = _free_port()
    log = tmp_path / "exporter.log"
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("POD_", "NODE_NAME", "KUBERNETES_"))
    }
    env.update(_container_env(container))
    # With pod labels on, the API client must find no cluster: neither in-cluster settings
    # (dropped above) nor a kubeconfig, so nothing leaves the machine.
    env["KUBECONFIG"] = str(tmp_path / "no-kubeconfig")
    argv = [
        sys.executable, "-m", "exporter", *container.get("args", []),
        "--backend", "sim",
        "-a", f"127.0.0.1:{port}",
        "--kubernetes.pod-resources-socket", str(tmp_path / "kubelet.sock"),
    ]  # fmt: skip
    with log.open("w") as out:
        proc = subprocess.Popen(argv, cwd=REPO_ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        yield Running(container, port, log, proc)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=15)


def test_declared_probes_answer(running: Running) -> None:
    container, port, log, proc = running
    probes = {
        kind: container[kind]["httpGet"]["path"]
        for kind in ("livenessProbe", "readinessProbe", "startupProbe")
        if "httpGet" in container.get(kind, {})
    }
    assert probes, "no HTTP probe declared"
    paths = [*probes.values(), "/metrics"]
    pending = set(paths)

    def answered_or_exited() -> bool:
        pending.difference_update(
            {p for p in pending if _status(f"http://127.0.0.1:{port}{p}") == 200})
        return not pending or proc.poll() is not None

    with contextlib.suppress(AssertionError):  # the asserts below say what was missing
        wait_until(answered_or_exited, 60, interval=0.25)
    assert proc.poll() is None, f"exporter exited {proc.returncode}: {log.read_text()[-2000:]}"
    assert not pending, f"{sorted(pending)} never answered 200: {log.read_text()[-2000:]}"

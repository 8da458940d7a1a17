"""The `kubernetes` package is loaded only when pod-label enrichment is on."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

PROBE = """
import asyncio, json, sys
from exporter.devices.model import Inventory
from exporter.k8s.config import KubernetesConfig
import exporter.k8s.source, exporter.k8s.client, exporter.k8s.simkubelet, exporter.doctor
config = KubernetesConfig(enabled=True, pod_resources_socket=sys.argv[1],
                          pod_labels=sys.argv[2] or None, node_name="node-a")
source = exporter.k8s.source.build_source(config)
async def poll():
    await source.refresh(Inventory())
    await source.wait_metadata(30)
    source.families()
    await source.close()
asyncio.run(poll())
print(json.dumps("kubernetes" in sys.modules))
"""


def probe(tmp_path: Path, pod_labels: str) -> bool:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "KUBECONFIG": str(tmp_path / "absent")}
    env.pop("KUBERNETES_SERVICE_HOST", None)
    proc = subprocess.run(
        [sys.executable, "-c", PROBE, str(tmp_path / "kubelet.sock"), pod_labels],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    loaded: bool = json.loads(proc.stdout.strip().splitlines()[-1])
    return loaded


def test_kubernetes_not_imported_without_enrichment(tmp_path: Path) -> None:
    assert probe(tmp_path, "") is False


def test_kubernetes_imported_with_enrichment(tmp_path: Path) -> None:
    # The same probe notices the import when enrichment is asked for (here it then fails to
    # find credentials, which is logged, not raised).
    assert probe(tmp_path, "team") is True

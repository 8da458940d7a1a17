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
import exporter.k8s.source, exporter.k8s.kubelet_client, exporter.simulated.kubelet, exporter.doctor
config = KubernetesConfig(enabled=True, pod_resources_socket=sys.argv[1], node_name="node-a",
                          **json.loads(sys.argv[2]))
source = exporter.k8s.source.build_source(config)
async def poll():
    await source.refresh(Inventory())
    await source.wait_metadata(30)
    source.families()
    await source.close()
asyncio.run(poll())
print(json.dumps("kubernetes" in sys.modules))
"""


def probe(tmp_path: Path, **config: object) -> bool:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "KUBECONFIG": str(tmp_path / "absent")}
    env.pop("KUBERNETES_SERVICE_HOST", None)
    proc = subprocess.run(
        [sys.executable, "-c", PROBE, str(tmp_path / "kubelet.sock"), json.dumps(config)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    loaded: bool = json.loads(proc.stdout.strip().splitlines()[-1])
    return loaded


def test_kubernetes_not_imported_without_enrichment(tmp_path: Path) -> None:
    assert probe(tmp_path) is False
    # Neither virtual GPUs nor the GPU id type need the API server.
    assert probe(tmp_path, virtual_gpus=True, gpu_id_type="device-name") is False


def test_kubernetes_imported_with_enrichment(tmp_path: Path) -> None:
    # The same probe notices the import when enrichment is asked for (here it then fails to
    # find credentials, which is logged, not raised).
    assert probe(tmp_path, pod_labels="team") is True


def test_kubernetes_imported_for_dcgm_pod_uid(tmp_path: Path) -> None:
    assert probe(tmp_path, enable_pod_uid=True) is True

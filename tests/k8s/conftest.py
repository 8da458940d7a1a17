"""Shared pieces of the Kubernetes attribution tests: inventories built by hand and a real
pod-resources gRPC server on a temporary unix socket."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from exporter.k8s.simkubelet import SimKubeletHandle, serve_pod_resources


@pytest.fixture
def socket_dir() -> Iterator[Path]:
    # Short path: unix socket paths are limited to ~107 bytes.
    path = Path(tempfile.mkdtemp(prefix="prk-", dir="/tmp"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def socket_path(socket_dir: Path) -> str:
    return str(socket_dir / "kubelet.sock")


@pytest.fixture
def kubelet(socket_path: str) -> Iterator[SimKubeletHandle]:
    handle = serve_pod_resources(socket_path)
    try:
        yield handle
    finally:
        handle.stop()

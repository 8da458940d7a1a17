"""Fixtures the whole suite shares: a real exporter process, the fake Kubernetes API server,
the simulated kubelet's pod-resources socket and the simulated NVML library.

Helpers that are not fixtures live in tests/support/ and are imported from there.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.nvmlsim.build import BuildError, build_library
from tests.support.apiserver import FakeApiServer
from tests.support.exporter_process import (
    PYTHON_EXPORTER,
    ExporterProcess,
    free_port,
    http_get,
)
from tests.support.paths import FIXTURES, ROOT

SLOW_PATHS = (
    "tests/image/",
    "tests/stress/",
    "tests/chart/test_running.py",
    "tests/artifacts/test_e2e.py",
    "tests/artifacts/test_e2e_prehopper.py",
    "tests/report/test_ground_truth.py",
    "tests/packaging/",
    "tests/web/test_prometheus_tls.py",
)
"""Tests left out of the quick tier: image builds and arm64 under qemu, soak-like stress
runs, the packaged wheel and the 0700 clone, and the end-to-end runs against a real
Prometheus, VictoriaMetrics or Chromium. Everything runs in the full test command."""
SLOW_MODULES = (
    "tests/advise/test_end_to_end.py",
    "tests/advise/test_failures.py",
    "tests/artifacts/test_alerts.py",
    "tests/chart/test_render.py",
    "tests/chart/test_upstream.py",
    "tests/cli/test_config_watch_groups.py",
    "tests/cli/test_device_selectors.py",
    "tests/cli/test_serve.py",
    "tests/deploy/test_exporter_args.py",
    "tests/deploy/test_gpu_operator.py",
    "tests/deploy/test_kustomize.py",
    "tests/deploy/test_monitor_labels.py",
    "tests/devices/test_backend_sim.py",
    "tests/devices/test_health.py",
    "tests/devices/test_nvml_clib.py",
    "tests/devices/test_nvml_every_field.py",
    "tests/devices/test_shipped_csvs.py",
    "tests/doctor/test_doctor.py",
    "tests/exposition/test_exp_fields_e2e.py",
    "tests/exposition/test_selfmetrics.py",
    "tests/fields/test_served_names.py",
    "tests/fuzz/test_config_file.py",
    "tests/fuzz/test_option_numbers.py",
    "tests/fuzz/test_pod_label_collisions.py",
    "tests/k8s/test_container_labels_podman.py",
    "tests/k8s/test_hostile_pod_labels.py",
    "tests/k8s/test_k8s_configmap.py",
    "tests/k8s/test_k8s_dra.py",
    "tests/k8s/test_k8s_e2e.py",
    "tests/k8s/test_k8s_enrich.py",
    "tests/k8s/test_k8s_imports.py",
    "tests/k8s/test_k8s_processes.py",
    "tests/k8s/test_k8s_virtual_gpu_split.py",
    "tests/nodefaults/test_fault_matrix.py",
    "tests/nodepage/test_node_page.py",
    "tests/nvmlsim/test_build.py",
    "tests/nvmlsim/test_call_table.py",
    "tests/report/test_plan.py",
    "tests/sampling/test_sampler.py",
    "tests/web/test_exporter_metrics.py",
    "tests/web/test_health_gpus.py",
    "tests/web/test_limits.py",
    "tests/web/test_timeouts.py",
)
"""Modules whose tests took 3.5 s or more in all, measured with `pytest -m "not slow"
--durations=0` on 2 cores: most start real exporter processes, kubelets or browsers, or run
many property-test examples. Left out of the quick tier so that it runs in under 3 minutes."""
SLOW_FIXTURES = frozenset({"built_image"})


LONGEST_FIRST = (
    "tests/chart/test_running.py",
    "tests/report/test_ground_truth.py",
    "tests/stress/test_kubelet_faults.py",
    "tests/nodepage/test_node_page.py",
    "tests/artifacts/test_e2e_prehopper.py",
    "tests/nodefaults/test_fault_matrix.py",
    "tests/cli/test_serve.py",
    "tests/simulated/test_mig_config_applied.py",
    "tests/artifacts/test_e2e_counterparts.py",
    "tests/image/test_arm64_image.py",
    "tests/k8s/test_k8s_processes.py",
    "tests/artifacts/test_alerts.py",
)
"""The modules that take longest, longest first, measured with `--durations` on 2 cores (the
table in docs/testing.md). The test command hands whole modules to its workers in the order
the suite is collected: started first, the long ones run beside many short ones, instead of
one of them running on alone at the end while the other workers have nothing left."""


def _module_order(items: list[pytest.Item]) -> dict[str, tuple[int, int]]:
    """Return each module's place in the run: the modules of LONGEST_FIRST in its order, then
    the others by their number of tests, most first (as pytest-xdist orders them by default),
    so that the modules of one or two tests are what is left to share at the end."""
    counts: dict[str, int] = {}
    for item in items:
        path = Path(item.path).relative_to(ROOT).as_posix()
        counts[path] = counts.get(path, 0) + 1
    rank = {path: i for i, path in enumerate(LONGEST_FIRST)}
    return {path: (rank.get(path, len(LONGEST_FIRST)), -count) for path, count in counts.items()}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark the tests of the slow tier `slow`, so that `-m "not slow"` is the quick tier, and
    put the longest modules first (each module's tests stay together and in their order)."""
    for item in items:
        path = Path(item.path).relative_to(ROOT).as_posix()
        fixtures = set(getattr(item, "fixturenames", ()))
        if (path.startswith(SLOW_PATHS) or path in SLOW_MODULES
                or item.get_closest_marker("e2e") is not None
                or fixtures & SLOW_FIXTURES):
            item.add_marker(pytest.mark.slow)
    order = _module_order(items)
    # sorted() is stable: within a module, the tests keep the order they were collected in.
    items.sort(key=lambda item: (*order[Path(item.path).relative_to(ROOT).as_posix()],
                                 Path(item.path).relative_to(ROOT).as_posix()))


# Older spellings `from tests.conftest import ROOT, ExporterProcess, ...` keep working.
__all__ = ["FIXTURES", "ROOT", "ExporterProcess", "free_port", "http_get"]

if TYPE_CHECKING:
    from exporter.simulated.kubelet import SimKubeletHandle


@pytest.fixture
def exporter() -> Iterator[type[ExporterProcess]]:
    """Factory: `exporter(args, env)` starts a process that is stopped after the test."""
    started: list[ExporterProcess] = []

    class _Tracked(ExporterProcess):
        def __init__(self, args: list[str], env: dict[str, str] | None = None, *,
                     launcher: Sequence[str] = PYTHON_EXPORTER, stdin: int | None = None,
                     cwd: str | os.PathLike[str] = ROOT) -> None:
            super().__init__(args, env, launcher=launcher, stdin=stdin, cwd=cwd)
            started.append(self)

    yield _Tracked
    for proc in started:
        proc.close()


@pytest.fixture
def api() -> Iterator[FakeApiServer]:
    """The fake Kubernetes API server, started; its `state` holds the pods it serves."""
    server = FakeApiServer().start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def kubeconfig(api: FakeApiServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A kubeconfig pointing at the fake API server, set as $KUBECONFIG for the test."""
    path = api.write_kubeconfig(tmp_path / "kubeconfig")
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("KUBECONFIG", path)
    return path


@pytest.fixture(scope="session")
def nvmlsim_lib() -> Path:
    """Directory holding the simulated `libnvidia-ml.so.1`, built once per session."""
    try:
        return build_library()
    except BuildError as exc:
        pytest.fail(f"cannot build the simulated NVML library: {exc}")


@pytest.fixture(scope="session")
def built_image() -> str:
    """The amd64 container image of this checkout, built once per session (minutes on a
    machine that has built none yet: mark tests using it with a long timeout)."""
    from tests.support.image import checkout_image

    return checkout_image("amd64")


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
    """Where the simulated kubelet's pod-resources socket listens (`kubelet` fixture)."""
    return str(socket_dir / "kubelet.sock")


@pytest.fixture
def kubelet(socket_path: str) -> Iterator[SimKubeletHandle]:
    """A real pod-resources gRPC server on `socket_path`, with no pods until the test sets them."""
    # Imported here: grpc is heavy, and most of the suite never needs it.
    from exporter.simulated.kubelet import serve_pod_resources

    handle = serve_pod_resources(socket_path)
    try:
        yield handle
    finally:
        handle.stop()

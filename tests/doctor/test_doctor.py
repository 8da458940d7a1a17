"""`gpu-exporter doctor`, shown each failure for real: absent/stale/wrong sockets, a kubelet
with unaccepted or unparseable allocations, an unreadable socket, a refusing API server."""

from __future__ import annotations

import ctypes.util
import io
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from exporter import doctor
from exporter.devices.enumerate import enumerate_devices
from exporter.devices.filter import ALL_DEVICES
from exporter.devices.model import Inventory
from exporter.simulated.kubelet import (
    SimKubeletHandle,
    allocatable_for,
    plan_allocations,
    pod_resources,
)
from tests.k8s.k8s_helpers import gpu_uuid
from tests.support.apiserver import FakeApiServer

ROOT = Path(__file__).resolve().parents[2]


def run_doctor(*argv: str) -> tuple[int, list[str]]:
    out = io.StringIO()
    rc = doctor.main(list(argv), out=out)
    return rc, out.getvalue().splitlines()


def lines_about(lines: list[str], check: str) -> list[str]:
    return [line for line in lines if line.split("] ", 1)[-1].startswith(check + ":")]


def sim_inventory(profile: str) -> Inventory:
    from exporter.simulated.node import SimNvml

    lib = SimNvml(profile)
    lib.nvmlInit()
    return enumerate_devices(lib, ALL_DEVICES).inventory


@pytest.fixture
def h200(kubelet: SimKubeletHandle) -> Inventory:
    inventory = sim_inventory("h200-mig")
    kubelet.servicer.set_pods(plan_allocations(inventory))
    kubelet.servicer.set_allocatable(allocatable_for(inventory))
    return inventory


SIM = ("--backend", "sim", "--sim.profile", "h200-mig")


@pytest.mark.usefixtures("h200")
def test_healthy_simulated_node(socket_path: str) -> None:
    rc, lines = run_doctor(*SIM, "--kubernetes.pod-resources-socket", socket_path)
    assert rc == 0, lines
    assert lines_about(lines, "GPUs") == ["[  OK] GPUs: 8 visible: 8x NVIDIA H200"]
    assert "11 GPU instances" in lines_about(lines, "MIG")[0]
    assert lines_about(lines, "resource nvidia.com/gpu")[0].startswith("[  OK]")
    assert lines_about(lines, "resource nvidia.com/mig-1g.18gb")[0].startswith("[  OK]")
    (attribution,) = lines_about(lines, "attribution")
    # Whole GPUs 2-5 and ten single-CI GPU instances exclusive; the time-sliced GPU 7 and the
    # 3g.71gb instance split between two pods shared; GPU 6 free. 4 + 12 MIG devices + 3 replicas.
    assert "all 19 allocated devices" in attribution
    assert "(14 held exclusively, 2 shared)" in attribution
    assert not [line for line in lines if line.startswith("[FAIL]")]


def test_socket_absent(socket_dir: Path) -> None:
    rc, lines = run_doctor(*SIM, "--kubernetes.pod-resources-socket", str(socket_dir / "k.sock"))
    assert rc == 1
    (line,) = lines_about(lines, "pod-resources socket")
    assert line.startswith("[FAIL]")
    assert "does not exist" in line
    assert "hostPath" in line
    assert "the directory, not the socket" in line


def test_directory_not_mounted(socket_dir: Path) -> None:
    rc, lines = run_doctor(*SIM, "--kubernetes.pod-resources-socket",
                           str(socket_dir / "missing" / "kubelet.sock"))
    assert rc == 1
    assert "is not mounted into this container" in lines_about(lines, "pod-resources socket")[0]


def test_regular_file_instead_of_socket(socket_dir: Path) -> None:
    path = socket_dir / "kubelet.sock"
    path.write_text("")
    rc, lines = run_doctor(*SIM, "--kubernetes.pod-resources-socket", str(path))
    assert rc == 1
    assert "is not a unix socket" in lines_about(lines, "pod-resources socket")[0]


def test_stale_socket_nobody_listening(socket_dir: Path) -> None:
    path = str(socket_dir / "kubelet.sock")
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stale.bind(path)
    stale.close()  # the file stays, nobody listens: what a restarted kubelet leaves behind
    rc, lines = run_doctor(*SIM, "--kubernetes.pod-resources-socket", path,
                           "--kubelet-timeout", "3")
    assert rc == 1
    (line,) = lines_about(lines, "kubelet List")
    assert line.startswith("[FAIL]")
    assert "UNAVAILABLE" in line
    assert "stale socket" in line


def test_unaccepted_renamed_resource_and_bad_ids(
    kubelet: SimKubeletHandle, socket_path: str
) -> None:
    inventory = sim_inventory("h100-8")
    kubelet.servicer.set_pods([
        pod_resources("a", "renamed", {"c": [("example.com/h100", [inventory.gpus[0].uuid])]}),
        pod_resources("a", "broken", {"c": [("nvidia.com/gpu", ["GPU-zz!"])]}),
        pod_resources("a", "foreign", {"c": [("nvidia.com/gpu", [gpu_uuid(99)])]}),
        pod_resources("a", "nic", {"c": [("rdma/ib", ["mlx5_0"])]}),
    ])
    rc, lines = run_doctor("--backend", "sim", "--sim.profile", "h100-8",
                           "--kubernetes.pod-resources-socket", socket_path)
    assert rc == 1
    (renamed,) = lines_about(lines, "resource example.com/h100")
    assert renamed.startswith("[FAIL]")
    assert "--kubernetes.resource-names example.com/h100" in renamed
    assert lines_about(lines, "resource rdma/ib")[0].startswith("[INFO]")
    ids = lines_about(lines, "device id")
    assert any("GPU-zz!" in line and "not understood" in line for line in ids)
    assert any(gpu_uuid(99) in line and "NVIDIA_VISIBLE_DEVICES=all" in line for line in ids)

    kubelet.servicer.set_pods([
        pod_resources("a", "renamed", {"c": [("example.com/h100", [inventory.gpus[0].uuid])]}),
    ])
    rc, lines = run_doctor("--backend", "sim", "--sim.profile", "h100-8",
                           "--kubernetes.pod-resources-socket", socket_path,
                           "--kubernetes.resource-names", "example.com/h100")
    assert rc == 0, lines
    assert lines_about(lines, "resource example.com/h100")[0].startswith("[  OK]")


def test_no_gpu_resources_warns(kubelet: SimKubeletHandle, socket_path: str) -> None:
    kubelet.servicer.set_pods([pod_resources("a", "web", {"c": []})])
    rc, lines = run_doctor(*SIM, "--kubernetes.pod-resources-socket", socket_path)
    assert rc == 0
    assert "device plugin" in lines_about(lines, "resources")[0]


@pytest.mark.usefixtures("h200")
def test_pod_scope_with_get_disabled(
    kubelet: SimKubeletHandle, socket_path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    kubelet.servicer.get_mode = "disabled"
    monkeypatch.setenv("POD_NAMESPACE", "research")
    monkeypatch.setenv("POD_NAME", "notebook-alice-0")
    rc, lines = run_doctor(*SIM, "--scope", "pod", "--kubernetes.pod-resources-socket", socket_path)
    assert rc == 0, lines
    (line,) = lines_about(lines, "pod scope")
    assert "holds 1 devices" in line
    assert "Get is disabled" in line
    monkeypatch.delenv("POD_NAME")
    rc, lines = run_doctor(*SIM, "--scope", "pod", "--kubernetes.pod-resources-socket", socket_path)
    assert rc == 1
    assert "POD_NAME / POD_NAMESPACE are not set" in lines_about(lines, "pod scope")[0]


@pytest.mark.drops_privileges
@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to become another user")
def test_socket_not_permitted_for_non_root(socket_dir: Path) -> None:
    os.chmod(socket_dir, 0o755)
    path = str(socket_dir / "kubelet.sock")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        listener.bind(path)
        listener.listen()
        os.chmod(path, 0o755)  # only root may write, i.e. connect
        read_end, write_end = os.pipe()
        child = os.fork()
        if child == 0:  # the doctor, as an unprivileged user
            rc = 2
            try:
                os.close(read_end)
                os.setgid(65534)
                os.setuid(65534)
                with os.fdopen(write_end, "w") as out:
                    rc = doctor.main([*SIM, "--kubernetes.pod-resources-socket", path], out=out)
            finally:
                os._exit(rc)
        os.close(write_end)
        with os.fdopen(read_end) as pipe:
            output = pipe.read()
        _, status = os.waitpid(child, 0)
    finally:
        listener.close()
    assert os.waitstatus_to_exitcode(status) == 1, output
    (line,) = lines_about(output.splitlines(), "pod-resources permission")
    assert line.startswith("[FAIL]")
    assert "uid 65534 may not connect" in line
    assert "runAsUser: 0" in line


def test_nvml_backend_explains_what_is_missing() -> None:
    rc, lines = run_doctor("--backend", "nvml", "--skip-kubernetes")
    (first, *_) = lines_about(lines, "NVML")
    if ctypes.util.find_library("nvidia-ml") is None:
        assert rc == 1
        assert first.startswith("[FAIL] NVML:")
        assert "LIBRARY_NOT_FOUND" in first
        assert "--backend sim" in first
        assert "NVIDIA_VISIBLE_DEVICES=all" in first
    else:  # a machine with the driver: the library loads (or says why it can't)
        assert first.startswith(("[  OK] NVML:", "[FAIL] NVML:"))


@pytest.mark.parametrize(("args", "verdict", "found"), [
    (("--sim.profile", "h200-mig"), "[  OK]", "GPM answers on 8 of 8 GPUs"),
    (("--sim.profile", "l4-1"), "[INFO]", "needs Hopper or newer"),
    (("--sim.profile", "h100-8", "--sim.fault", "gpm-admin-only"), "[WARN]",
     "restricted to administrators"),
])
def test_profiling(args: tuple[str, ...], verdict: str, found: str) -> None:
    rc, lines = run_doctor("--backend", "sim", *args, "--skip-kubernetes")
    assert rc == 0, lines
    (line,) = lines_about(lines, "profiling")
    assert line.startswith(verdict), line
    assert found in line, line
    if verdict == "[WARN]":
        assert "(all 8 GPUs)" in line
        assert "NO_PERMISSION" in line
        assert "fix: load the nvidia kernel module with NVreg_RestrictProfilingToAdminUsers=0" \
            in line


def test_unknown_sim_profile() -> None:
    rc, lines = run_doctor("--backend", "sim", "--sim.profile", "nope", "--skip-kubernetes")
    assert rc == 1
    (nvml,) = lines_about(lines, "NVML")
    assert "unknown --sim.profile 'nope'" in nvml
    assert "h100-8" in nvml


@pytest.mark.usefixtures("h200")
@pytest.mark.parametrize("needs_pods", [
    ("--kubernetes.pod-labels", "team"),
    # each holder's FB_USED and GPU_UTIL: processes joined to containers through the watch
    ("--kubernetes-virtual-gpus",),
])
def test_enrichment_rbac(
    socket_path: str, api: FakeApiServer, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch, needs_pods: tuple[str, ...],
) -> None:
    kubeconfig = api.write_kubeconfig(tmp_path / "kubeconfig")
    monkeypatch.setenv("NODE_NAME", "node-a")
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    args = (*SIM, "--kubernetes.pod-resources-socket", socket_path, *needs_pods,
            "--kubeconfig", kubeconfig)
    rc, lines = run_doctor(*args)
    assert rc == 0, lines
    assert lines_about(lines, "API server")[0].startswith("[  OK]")
    api.state.forbidden = True
    rc, lines = run_doctor(*args)
    assert rc == 1
    (line,) = lines_about(lines, "API server")
    assert "403" in line
    assert "get/list/watch on pods" in line
    monkeypatch.delenv("NODE_NAME")
    rc, lines = run_doctor(*args)
    assert "NODE_NAME is not set" in lines_about(lines, "API server")[0]


def test_cli_dispatches_to_doctor(socket_dir: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "exporter", "doctor", "--backend", "sim", "--sim.profile", "l4-1",
         "--kubernetes.pod-resources-socket", str(socket_dir / "none.sock")],
        cwd=ROOT, capture_output=True, text=True, timeout=60,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert proc.returncode == 1
    assert "[  OK] GPUs: 1 visible" in proc.stdout
    assert "some checks failed" in proc.stdout.splitlines()[-1]

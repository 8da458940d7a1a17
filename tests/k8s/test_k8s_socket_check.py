"""A pod-resources socket that no retry can reach stops the start with one line; a kubelet
that is not serving yet does not."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

from exporter.k8s.socket_check import unusable_socket
from exporter.serve import main as serve_main
from tests.support.privileges import run_as


def test_an_absent_socket_in_a_mounted_directory_is_retried_later(tmp_path: Path) -> None:
    assert unusable_socket(str(tmp_path / "kubelet.sock")) is None


def test_a_listening_socket_is_usable(tmp_path: Path) -> None:
    path = tmp_path / "kubelet.sock"
    with socket.socket(socket.AF_UNIX) as listener:
        listener.bind(str(path))
        assert unusable_socket(str(path)) is None


def test_a_directory_that_is_not_there_names_the_mount(tmp_path: Path) -> None:
    path = tmp_path / "pod-resource" / "kubelet.sock"
    problem = unusable_socket(str(path))
    assert problem is not None
    assert problem.startswith(f"--kubernetes.pod-resources-socket {path}: the directory "
                              f"{path.parent} does not exist")
    assert "/var/lib/kubelet/pod-resources" in problem


def test_a_file_that_is_not_a_socket(tmp_path: Path) -> None:
    path = tmp_path / "kubelet.sock"
    path.write_text("")
    assert unusable_socket(str(path)) == (
        f"--kubernetes.pod-resources-socket {path}: not a unix socket; point the flag at the "
        "kubelet's socket")


def test_serve_exits_2_with_that_line_before_touching_nvml(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    # No NVML library on this machine: reaching it would fail with another message.
    monkeypatch.setenv("LD_LIBRARY_PATH", "")
    path = tmp_path / "absent" / "kubelet.sock"
    code = serve_main(["-k", "--pod-resources-kubelet-socket", str(path),
                       "-a", "127.0.0.1:0"])
    assert code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"gpu-exporter: --kubernetes.pod-resources-socket {path}: the directory "
                   f"{path.parent} does not exist; mount the kubelet's pod-resources directory "
                   "there (hostPath /var/lib/kubelet/pod-resources, type Directory) or point "
                   "the flag at the socket inside it"]


@pytest.mark.drops_privileges
@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as another uid")
def test_a_root_only_socket_refuses_another_uid(tmp_path: Path) -> None:
    # The kubelet's modes: directory 0750, socket 0755, both root's. A child running as
    # uid 65532 (as a non-root container would) is told to run as root.
    directory = tmp_path / "pod-resources"
    directory.mkdir(mode=0o750)
    tmp_path.chmod(0o755)
    path = directory / "kubelet.sock"
    with socket.socket(socket.AF_UNIX) as listener:
        listener.bind(str(path))
        path.chmod(0o755)
        status, problem = run_as(65532, lambda: unusable_socket(str(path)) or "usable")
    assert status == 0, problem
    assert problem == (f"--kubernetes.pod-resources-socket {path}: permission denied on the "
                       "path for uid 65532; the kubelet lets only uid 0 reach it: run as root "
                       "(runAsUser: 0, no capability needed)")

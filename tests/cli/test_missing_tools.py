"""An installation without the libraries of the commands that do not run on a node (the
container image's) answers those commands with one line saying where to get them, exit
status 1, before anything runs; serve and doctor work as before.

The installation is this checkout with a `gpu-exporter` distribution record ahead of it on
the path whose required dependencies include libraries that are not installed, as the
image's record does (its wheel is installed without the tools' libraries).
"""

from __future__ import annotations

import os
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

from exporter.cli import COMMANDS, NODE_COMMANDS, absent_dependencies, tool_absent_message
from tests.conftest import ROOT

ABSENT = ("no-such-plotting-library", "no_such_frames")


def _record(site: Path, requires: list[str]) -> None:
    info = site / "gpu_exporter-0.1.0.dist-info"
    info.mkdir(parents=True)
    lines = ["Metadata-Version: 2.1", "Name: gpu-exporter", "Version: 0.1.0",
             *(f"Requires-Dist: {r}" for r in requires)]
    (info / "METADATA").write_text("\n".join(lines) + "\n", encoding="utf-8")


@pytest.fixture
def node_site(tmp_path: Path) -> Path:
    site = tmp_path / "site"
    installed = [r for r in metadata.requires("gpu-exporter") or []
                 if "extra ==" not in r]
    _record(site, [*installed, "no-such-plotting-library>=3.8", "no_such_frames>=2.1",
                   'also-absent-but-optional>=1 ; extra == "test"'])
    return site


def _run(site: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(ROOT)])}
    return subprocess.run([sys.executable, "-m", "exporter", *argv], cwd=site, env=env,
                          capture_output=True, text=True, timeout=120, check=False)


def test_absent_dependencies_are_the_required_ones_not_installed(node_site: Path) -> None:
    sys.path.insert(0, str(node_site))
    try:
        assert absent_dependencies() == list(ABSENT)
    finally:
        sys.path.remove(str(node_site))
    assert absent_dependencies("no-such-distribution-at-all") == []


@pytest.mark.parametrize("argv", [("report", "--help"), ("report", "--prometheus", "http://p"),
                                  ("generate", "all", "--out", "x"), ("generate", "keda")])
def test_a_tool_answers_one_line(node_site: Path, argv: tuple[str, ...]) -> None:
    result = _run(node_site, *argv)
    assert result.returncode == 1, result.stderr
    assert result.stdout == ""
    assert result.stderr == tool_absent_message(argv[0], list(ABSENT)) + "\n"
    assert result.stderr.count("\n") == 1
    assert "pip install gpu-exporter" in result.stderr
    assert "no-such-plotting-library, no_such_frames not installed" in result.stderr


def test_every_command_but_the_nodes_is_gated(node_site: Path) -> None:
    for command in sorted(set(COMMANDS) - NODE_COMMANDS):
        result = _run(node_site, command)
        assert (result.returncode, result.stderr) == (
            1, tool_absent_message(command, list(ABSENT)) + "\n"), command


@pytest.mark.parametrize("command", sorted(NODE_COMMANDS))
def test_the_node_commands_still_run(node_site: Path, command: str) -> None:
    result = _run(node_site, command, "--help")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"usage: gpu-exporter {command}")


def test_a_full_installation_runs_the_tools() -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    result = subprocess.run([sys.executable, "-m", "exporter", "report", "--help"], env=env,
                            capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("usage: gpu-exporter report")

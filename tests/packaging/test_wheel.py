"""The built wheel works with no repository on disk: it ships only what the build tools
generated, and `generate`, `doctor` and `report` run from it.

The wheel is built from a copy holding only what the Dockerfile's build stage copies
(pyproject.toml, README, licence files, exporter/), so neither tests/ nor tools/ can be
reached by it. It is installed into a fresh virtual environment in a temporary directory,
once per test run; the commands then run from another temporary directory with no
PYTHONPATH. The wheel's third-party dependencies are not downloaded again each run: the
fresh environment sees this environment's site-packages through a `.pth` line, which adds
the directory without running the `.pth` files in it, so the editable install of this
checkout stays out (the test proves `exporter` is the wheel's). That the package declares
every dependency it imports is `tests/packaging/test_dependencies.py`'s job.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.paths import ROOT
from tests.support.venvs import venv_with_our_dependencies

GENERATED_DIRS = ("dashboards", "alerts", "deploy/keda")
"""What `gpu-exporter generate all` writes, committed at the repository's root."""
SOURCES = ("pyproject.toml", "README.md", "LICENSE", "NOTICE", "exporter")


@dataclass(frozen=True)
class Installed:
    wheel: Path
    venv: Path
    elsewhere: Path
    """A directory with no repository in or above it, as the commands' working directory."""

    @property
    def bin(self) -> Path:
        return self.venv / "bin"

    def run(self, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
        env = {"PATH": f"{self.bin}:/usr/bin:/bin", "HOME": str(self.elsewhere),
               "LANG": "C.UTF-8"}
        return subprocess.run(list(args), cwd=cwd or self.elsewhere, env=env,
                              capture_output=True, text=True, timeout=300, check=False)


def _build_wheel(tmp: Path) -> Path:
    source = tmp / "source"
    source.mkdir()
    for name in SOURCES:
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, source / name,
                            ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy(ROOT / name, source / name)
    out = tmp / "wheels"
    # --no-build-isolation: the build backend (setuptools) comes from this environment, so
    # building needs no download.
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                    "--no-index", "-q", "-w", str(out), str(source)],
                   cwd=tmp, capture_output=True, text=True, timeout=300, check=True)
    (wheel,) = out.glob("gpu_exporter-*.whl")
    return wheel


def _fresh_venv(tmp: Path, wheel: Path) -> Path:
    venv = tmp / "venv"
    python = venv_with_our_dependencies(venv)
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q",
                    "--no-deps", "--no-index", str(wheel)],
                   capture_output=True, text=True, timeout=300, check=True)
    return venv


@pytest.fixture(scope="session")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Installed:
    tmp = tmp_path_factory.mktemp("wheel")
    wheel = _build_wheel(tmp)
    elsewhere = tmp / "elsewhere"
    elsewhere.mkdir()
    return Installed(wheel, _fresh_venv(tmp, wheel), elsewhere)


def _files(base: Path) -> dict[str, bytes]:
    out: dict[str, bytes] = {}
    for directory in GENERATED_DIRS:
        for path in sorted((base / directory).glob("*")):
            if path.suffix in (".json", ".yml", ".yaml"):
                out[str(path.relative_to(base))] = path.read_bytes()
    return out


def test_the_wheel_ships_the_generated_files_and_no_build_tools(installed: Installed) -> None:
    with zipfile.ZipFile(installed.wheel) as archive:
        names = set(archive.namelist())
    assert {"exporter/fields/dcgm-names.csv", "exporter/fields/default-collectors.csv",
            "exporter/fields/dcgm-exporter/default-counters.csv",
            "exporter/k8s/proto/api.proto", "exporter/py.typed"} <= names
    assert {n.split("/")[0] for n in names} == {
        "exporter", next(n.split("/")[0] for n in names if n.endswith(".dist-info/METADATA"))}
    assert not [n for n in names if n.startswith(("tools/", "tests/"))]


def test_exporter_is_imported_from_the_wheel_alone(installed: Installed) -> None:
    probe = installed.run(
        "python", "-c",
        "import importlib.util, json, sys, exporter; "
        "print(json.dumps([exporter.__file__, importlib.util.find_spec('tools') is None, "
        "importlib.util.find_spec('tests') is None, sys.path]))")
    assert probe.returncode == 0, probe.stderr
    module, no_tools, no_tests, path = json.loads(probe.stdout)
    assert Path(module).is_relative_to(installed.venv), module
    assert no_tools
    assert no_tests
    # '' is the working directory; this environment's site-packages may sit inside the
    # checkout (.venv/), but the checkout's root, which holds exporter/ and tools/, is not.
    assert ROOT not in {(installed.elsewhere / p).resolve() for p in path}


def test_generate_gives_the_committed_artifacts(installed: Installed) -> None:
    out = installed.elsewhere / "generated"
    for what in ("dashboards", "alerts", "keda"):
        result = installed.run("gpu-exporter", "generate", what, "--out", str(out))
        assert result.returncode == 0, result.stderr
        assert "Traceback" not in result.stderr
    fresh, committed = _files(out), _files(ROOT)
    assert sorted(fresh) == sorted(committed)
    assert len(committed) >= 10
    assert [name for name in fresh if fresh[name] != committed[name]] == []


def test_generate_writes_into_the_working_directory_by_default(installed: Installed) -> None:
    here = installed.elsewhere / "here"
    here.mkdir()
    result = installed.run("gpu-exporter", "generate", "dashboards", cwd=here)
    assert result.returncode == 0, result.stderr
    written = sorted(p.name for p in (here / "dashboards").glob("*.json"))
    assert written == sorted(p.name for p in (ROOT / "dashboards").glob("*.json"))


def test_doctor_checks_the_simulated_node(installed: Installed) -> None:
    result = installed.run("gpu-exporter", "doctor", "--backend", "sim", "--skip-kubernetes")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "[  OK] GPUs: 8 visible: 8x NVIDIA H200" in result.stdout
    assert "[FAIL]" not in result.stdout
    # With the kubelet checks on, the missing socket is a FAIL line with its fix, not a crash.
    with_kubelet = installed.run("gpu-exporter", "doctor", "--backend", "sim")
    assert with_kubelet.returncode == 1
    assert "[FAIL] pod-resources socket:" in with_kubelet.stdout
    assert "Traceback" not in with_kubelet.stdout + with_kubelet.stderr


def test_report_help(installed: Installed) -> None:
    result = installed.run("gpu-exporter", "report", "--help")
    assert result.returncode == 0, result.stderr
    assert "--prometheus URL" in result.stdout
    assert "--idle-below PERCENT" in result.stdout


def test_no_command_ends_in_a_missing_module(installed: Installed) -> None:
    # Every command's --help imports what the command needs first.
    for command in ("serve", "doctor", "generate", "report"):
        result = installed.run("gpu-exporter", command, "--help")
        assert result.returncode == 0, (command, result.stderr)
        assert "ModuleNotFoundError" not in result.stderr, command

"""An installation missing one of its libraries ends in one line that names the module and
the fix, exit status 1, never in a traceback."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from exporter.cli import missing_module_message
from tests.conftest import ROOT

HIDE_YAML = '''\
import importlib.abc
import sys


class HideYaml(importlib.abc.MetaPathFinder):
    """As if PyYAML had not been installed."""

    def find_spec(self, name, path=None, target=None):
        if name == "yaml" or name.startswith("yaml."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


sys.meta_path.insert(0, HideYaml())
'''


def run_without_yaml(tmp_path: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    hook = tmp_path / "hook"
    hook.mkdir()
    # site imports sitecustomize from the path at start-up, before any of the exporter.
    (hook / "sitecustomize.py").write_text(HIDE_YAML, encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(hook), str(ROOT)])}
    return subprocess.run([sys.executable, "-m", "exporter", *argv], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120, check=False)


def test_generate_keda_without_yaml_says_what_to_do(tmp_path: Path) -> None:
    result = run_without_yaml(
        tmp_path, "generate", "keda", "--namespace", "ml", "--deployment", "vllm",
        "--metric", "util", "--target", "70")
    assert result.returncode == 1, result.stderr
    assert result.stdout == ""
    assert result.stderr == (
        "gpu-exporter: the Python module 'yaml' is missing from this installation; reinstall "
        "gpu-exporter (e.g. `pip install --force-reinstall gpu-exporter`): every library it "
        "uses is a required dependency\n")


def test_the_hook_hides_nothing_else(tmp_path: Path) -> None:
    # Serving needs no yaml: the same installation still answers --help.
    result = run_without_yaml(tmp_path, "serve", "--help")
    assert result.returncode == 0, result.stderr
    assert "--use-old-namespace" in result.stdout


def test_the_message_falls_back_to_the_error_text() -> None:
    assert "'No module named x'" in missing_module_message(
        ModuleNotFoundError("No module named x"))

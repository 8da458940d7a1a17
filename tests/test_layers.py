"""The layer contract in pyproject.toml holds, and a back-edge breaks it."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def _lint(tree: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache", "--config", str(tree / "pyproject.toml")],
        cwd=tree, env={"PYTHONPATH": str(tree), "PATH": "/usr/bin:/bin"},
        capture_output=True, text=True, timeout=120, check=False,
    )


def _copy_tree(dest: Path) -> Path:
    shutil.copytree(ROOT / "exporter", dest / "exporter",
                    ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", dest / "pyproject.toml")
    return dest


def test_the_package_keeps_its_layers(tmp_path: Path) -> None:
    result = _lint(_copy_tree(tmp_path))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


def test_an_import_from_a_lower_layer_into_a_higher_one_fails(tmp_path: Path) -> None:
    tree = _copy_tree(tmp_path)
    # The field catalog reaching up into the web layer: the kind of shortcut the contract is
    # there to stop.
    (tree / "exporter" / "fields" / "shortcut.py").write_text(
        "from exporter.web.app import make_handler\n\nAPP = make_handler\n")
    result = _lint(tree)
    assert result.returncode != 0
    assert "BROKEN" in result.stdout
    assert "exporter.fields.shortcut -> exporter.web.app" in result.stdout

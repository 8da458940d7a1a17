"""The tests that drop privileges pass from a checkout that only root can enter.

A clone made by `mktemp -d`, or one under root's home, sits in a directory of mode 0700: a
test that re-ran Python as another user there could not import the package. This copies the
working tree (what git tracks, and what it would add) into such a directory, with a space in
its path, with a virtual environment of its own inside (as `scripts/test.sh` makes one), and
runs the tests marked `drops_privileges` from it with that environment's interpreter.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.paths import ROOT
from tests.support.venvs import venv_with_our_dependencies


@dataclass(frozen=True)
class Clone:
    checkout: Path
    python: Path
    """The interpreter of the checkout's own .venv."""


@pytest.fixture(scope="module")
def clone() -> Iterator[Clone]:
    """Yield a copy of the working tree inside a 0700 directory under root's home."""
    parent = Path(tempfile.mkdtemp(prefix="gpu exporter clone ", dir=Path.home()))
    try:
        listed = subprocess.run(
            ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            cwd=ROOT, capture_output=True, check=True).stdout.decode()
        target = parent / "checkout"
        for name in filter(None, listed.split("\0")):
            source = ROOT / name
            if not source.is_file():  # listed but deleted in the working tree
                continue
            destination = target / name
            destination.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, destination)
        yield Clone(target, venv_with_our_dependencies(target / ".venv"))
    finally:
        shutil.rmtree(parent, ignore_errors=True)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to become another user")
def test_the_clone_sits_where_nobody_can_enter(clone: Clone) -> None:
    assert " " in str(clone.checkout)
    assert clone.checkout.parent.stat().st_mode & 0o777 == 0o700
    imported = subprocess.run(
        [str(clone.python), "-c", "import exporter; print(exporter.__file__)"],
        cwd=clone.checkout, capture_output=True, text=True, check=True).stdout.strip()
    assert Path(imported).is_relative_to(clone.checkout)  # the copy's code runs, not ours


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to become another user")
def test_the_privilege_dropping_tests_pass_from_the_clone(clone: Clone) -> None:
    result = subprocess.run(
        [str(clone.python), "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m",
         "drops_privileges", "tests"],
        cwd=clone.checkout, capture_output=True, text=True, timeout=600, check=False)
    summary = result.stdout.strip().splitlines()[-1:] or [""]
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert summary[0].startswith("3 passed"), summary

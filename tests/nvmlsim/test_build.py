"""The build helper: one compile, then reuse until something that went into it changes."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.support.requirements import require_tool

from .build import LIBRARY_NAME, build_library


def test_builds_once_and_rebuilds_when_stale(tmp_path: Path) -> None:
    out = build_library(tmp_path)
    library = out / LIBRARY_NAME
    assert out == tmp_path
    assert library.is_file()
    first = library.stat().st_mtime_ns
    assert build_library(tmp_path) == tmp_path
    assert library.stat().st_mtime_ns == first  # unchanged inputs: no recompilation
    # a stamp that no longer matches the inputs (as after a source edit) forces a rebuild
    (tmp_path / (LIBRARY_NAME + ".sha256")).write_text("stale\n")
    build_library(tmp_path)
    assert library.stat().st_mtime_ns != first


def test_library_carries_the_nvml_soname(nvmlsim_lib: Path) -> None:
    readelf = require_tool("readelf", "binutils")
    dynamic = subprocess.run([readelf, "-d", str(nvmlsim_lib / LIBRARY_NAME)],
                             capture_output=True, text=True, check=True, timeout=30).stdout
    assert "Library soname: [libnvidia-ml.so.1]" in dynamic

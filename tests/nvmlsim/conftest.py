from __future__ import annotations

from pathlib import Path

import pytest

from .build import BuildError, build_library


@pytest.fixture(scope="session")
def nvmlsim_lib() -> Path:
    """Directory holding the simulated `libnvidia-ml.so.1`, built once per session."""
    try:
        return build_library()
    except BuildError as exc:
        pytest.fail(f"cannot build the simulated NVML library: {exc}")

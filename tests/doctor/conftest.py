"""Fixtures of the doctor tests: a fresh CA and server certificate for its web config checks."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.pki import Pki, make_pki


@pytest.fixture
def pki(tmp_path: Path) -> Pki:
    """A CA of the test's own, in `tmp_path`, to sign the certificates a web config names."""
    return make_pki(tmp_path)

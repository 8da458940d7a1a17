"""Where the repository and the in-repo test fixtures are."""

from __future__ import annotations

from pathlib import Path

from tests.support.requirements import require_file

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures"
"""Third-party files the compatibility tests rest on (see tests/fixtures/NOTICE)."""


def fixture_file(*parts: str) -> Path:
    """A file or folder under tests/fixtures; a missing one skips locally and fails in CI."""
    return require_file(FIXTURES.joinpath(*parts))

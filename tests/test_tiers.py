"""The quick tier's list of slow tests names what is there, and leaves real tests out; the
list of the longest modules names modules that are there."""

from __future__ import annotations

from tests.conftest import LONGEST_FIRST, SLOW_MODULES, SLOW_PATHS
from tests.support.paths import ROOT


def test_every_slow_path_and_module_exists() -> None:
    missing = [p for p in (*SLOW_PATHS, *SLOW_MODULES, *LONGEST_FIRST) if not (ROOT / p).exists()]
    assert missing == [], f"tests/conftest.py names what is gone: {missing}"


def test_slow_modules_are_test_modules_outside_the_slow_paths() -> None:
    assert all(m.endswith(".py") and m.rsplit("/", 1)[-1].startswith("test_")
               for m in SLOW_MODULES)
    assert not [m for m in SLOW_MODULES if m.startswith(SLOW_PATHS)]


def test_the_longest_modules_are_named_once() -> None:
    assert len(set(LONGEST_FIRST)) == len(LONGEST_FIRST)

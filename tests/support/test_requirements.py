"""A missing tool or fixture skips a test locally and fails it in CI; the wait helper returns
the condition's value or fails at its deadline."""

from __future__ import annotations

import threading

import pytest

from tests.support.clock import FakeClock
from tests.support.wait import wait_until

pytest_plugins = ["pytester"]

NEEDS_ABSENT_THINGS = """
from pathlib import Path
from tests.support.requirements import require_file, require_module, require_tool

def test_tool():
    require_tool("no-such-tool-gpu-exporter", "no-such-package")

def test_file():
    require_file(Path("/no/such/fixture.csv"))

def test_module():
    require_module("no_such_module_gpu_exporter")
"""


@pytest.mark.parametrize(("ci", "outcome"), [(None, "skipped"), ("true", "failed")])
def test_missing_requirements_skip_locally_and_fail_in_ci(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, ci: str | None, outcome: str
) -> None:
    if ci is None:
        monkeypatch.delenv("CI", raising=False)
    else:
        monkeypatch.setenv("CI", ci)
    pytester.makepyfile(test_needs=NEEDS_ABSENT_THINGS)
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider", "-p", "no:asyncio", "-rsf")
    result.assert_outcomes(**{outcome: 3})
    result.stdout.fnmatch_lines(["*no-such-tool-gpu-exporter is not installed*no-such-package*"])


def test_present_requirements_pass_through() -> None:
    from tests.support.paths import FIXTURES, ROOT, fixture_file
    from tests.support.requirements import require_module, require_tool

    assert require_tool("sh").endswith("/sh")
    assert fixture_file("crds") == FIXTURES / "crds"
    assert (ROOT / "pyproject.toml").is_file()
    assert require_module("json").dumps([]) == "[]"


def test_wait_until_returns_the_value_once_the_condition_holds() -> None:
    ready = threading.Event()
    worker = threading.Thread(target=ready.set)
    worker.start()
    assert wait_until(lambda: ready.is_set() and "done", timeout=10) == "done"
    worker.join()


def test_wait_until_fails_at_its_deadline_with_the_last_value() -> None:
    with pytest.raises(AssertionError, match=r"nothing not met within 0.05s; last value: 0"):
        wait_until(lambda: 0, timeout=0.05, interval=0.01, what="nothing")


def test_fake_clock_moves_only_when_told() -> None:
    clock = FakeClock(start=5.0)
    assert clock() == 5.0
    clock.advance(2.5)
    clock.now += 1
    assert clock() == clock.now == 8.5

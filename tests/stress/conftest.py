"""Fixtures of the fault matrix: the results of every case, and a running case's exporter."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.stress.harness import CaseResult
from tests.stress.results import CASES, write_results


class Matrix:
    """Collects each case's result; written out at the end when $STRESS_RESULTS names a file."""

    def __init__(self) -> None:
        self.results: dict[str, CaseResult] = {}

    def record(self, case_id: str, result: CaseResult) -> CaseResult:
        """Keep `result` for the table and return it; whether the case held is the test's
        own assertion (`result.ok`). Refuses a case the table does not list."""
        if case_id not in CASES:
            raise KeyError(f"unknown case {case_id!r}: add it to results.CASES")
        if result.name != CASES[case_id][0]:
            raise ValueError(f"case {case_id!r} is named {CASES[case_id][0]!r} in "
                             f"results.CASES, not {result.name!r}")
        self.results[case_id] = result
        return result


@pytest.fixture(scope="session")
def matrix() -> Iterator[Matrix]:
    collected = Matrix()
    yield collected
    target = os.environ.get("STRESS_RESULTS")
    if target and collected.results:
        write_results(collected.results, Path(target))

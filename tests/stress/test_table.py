"""The fault-matrix table of docs/testing.md is the suite's: rendered from the results file the
suite wrote, and what each row claims still holds when the matrix runs now.

The committed `results.json` is only what a past run recorded; on its own no code change
could make it wrong. So the rows are also compared with the cases this test run ran: the whole
matrix when the suite runs (this file comes after the case files), else one representative
case, run here as the suite runs it. A case that now fails, or ends with another `/ready`
sequence than its row shows, fails this test until the table is regenerated.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

from tests.stress.conftest import Matrix
from tests.stress.results import CASES, load_results, readme_block, render_table
from tests.support.paths import ROOT

SAMPLE = ("kubelet-absent",
          "tests/stress/test_kubelet_faults.py::test_kubelet_socket_absent_at_start")
"""Run when no case ran in this test run: a fault held, `/ready` followed, a recovery timed,
under the 25 Hz scraper, in about a minute."""


def test_readme_table_is_rendered_from_the_results() -> None:
    readme = (ROOT / "docs" / "testing.md").read_text()
    committed = load_results()
    assert list(committed["cases"]) == list(CASES)
    assert readme_block(readme) == render_table(committed), (
        "docs/testing.md's fault-matrix table is stale or edited by hand: run "
        "`python scripts/fault_matrix.py --run` (or --write)")


def _run_sample(tmp_path: Path) -> dict[str, Any]:
    results = tmp_path / "results.json"
    env = {**os.environ, "STRESS_RESULTS": str(results)}
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                          SAMPLE[1]], cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=600, check=False)
    assert results.exists(), run.stdout[-3000:] + run.stderr[-3000:]
    cases: dict[str, Any] = load_results(results)["cases"]
    return cases


def test_each_row_holds_for_the_cases_run_now(matrix: Matrix, tmp_path: Path) -> None:
    fresh = {case: asdict(result) for case, result in matrix.results.items()}
    if not fresh:
        fresh = _run_sample(tmp_path)
        assert list(fresh) == [SAMPLE[0]]
    committed = load_results()["cases"]
    for case, now in fresh.items():
        row = committed[case]
        assert now["failed"] == row["failed"] == 0, (case, now["examples"])
        assert now["problems"] == row["problems"] == [], case
        assert now["ready"] == row["ready"], (case, now["ready"], row["ready"])
        assert now["ready_expected"] == row["ready_expected"], case
        assert (now["recovery_s"] is None) == (row["recovery_s"] is None), case
        assert (now["fault_s"] is None) == (row["fault_s"] is None), case
        assert now["rate_hz"] >= 20, case
        assert now["scrapes"] > 0, case

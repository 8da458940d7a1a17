"""The README's fault-matrix table is the suite's: rendered from the results file the suite
wrote, covering every case, each with no failed scrape."""

from __future__ import annotations

from tests.stress.results import CASES, load_results, readme_block, render_table
from tests.support.paths import ROOT


def test_readme_table_is_rendered_from_the_results() -> None:
    readme = (ROOT / "README.md").read_text()
    assert readme_block(readme) == render_table(load_results()), (
        "README's fault-matrix table is stale or edited by hand: run "
        "`python scripts/fault_matrix.py --run` (or --write)")


def test_results_cover_every_case_and_all_passed() -> None:
    cases = load_results()["cases"]
    assert list(cases) == list(CASES)
    for case_id, result in cases.items():
        assert result["failed"] == 0, case_id
        assert not result["problems"], case_id
        assert result["ready"] == result["ready_expected"], case_id
        assert result["rate_hz"] >= 20, case_id

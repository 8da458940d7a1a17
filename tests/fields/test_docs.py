from __future__ import annotations

from exporter.fields.docs import render_markdown
from tests.support.paths import ROOT


def test_metrics_doc_is_generated_from_the_catalog() -> None:
    committed = (ROOT / "docs" / "metrics.md").read_text()
    assert committed == render_markdown(), \
        "docs/metrics.md drifted: run python -m exporter.fields.docs docs/metrics.md"

from __future__ import annotations

import pytest

from exporter.web.app import _accepts_gzip, _wants_openmetrics


@pytest.mark.parametrize(("accept", "om"), [
    # What Prometheus 2.x sends by default.
    ("application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;"
     "q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1", True),
    ("text/plain;version=0.0.4", False),
    ("", False),
    ("application/openmetrics-text;q=0", False),
    ("text/plain;q=1,application/openmetrics-text;q=0.5", False),
])
def test_openmetrics_negotiation(accept: str, om: bool) -> None:
    assert _wants_openmetrics(accept) is om


@pytest.mark.parametrize(("header", "gz"), [
    ("gzip", True), ("gzip, deflate", True), ("deflate", False), ("gzip;q=0", False),
    ("GZIP;q=0.5", True), ("", False),
])
def test_gzip_negotiation(header: str, gz: bool) -> None:
    assert _accepts_gzip(header) is gz

"""Which format a scraper gets: text 0.0.4 unless OpenMetrics was enabled and is preferred."""

from __future__ import annotations

import gzip

import pytest
from aiohttp import web
from aiohttp.test_utils import RawTestServer, TestClient

from exporter.exposition.render import Rendered
from exporter.sampling.snapshot import Snapshot
from exporter.web.app import _accepts_gzip, _wants_openmetrics, make_handler
from exporter.web.config import WebSettings

# The Accept headers Prometheus sends with its default scrape_protocols.
PROMETHEUS_2_48 = (  # before scrape_protocols existed (<= 2.48)
    "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;"
    "q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1")
PROMETHEUS_2_49 = (  # 2.49 to 2.55: OpenMetrics 1.0.0, OpenMetrics 0.0.1, text 0.0.4
    "application/openmetrics-text;version=1.0.0;q=0.5,application/openmetrics-text;"
    "version=0.0.1;q=0.4,text/plain;version=0.0.4;q=0.3,*/*;q=0.2")
PROMETHEUS_3 = (  # 3.x: PrometheusText1.0.0 added, UTF-8 escaping offered
    "application/openmetrics-text;version=1.0.0;escaping=allow-utf-8;q=0.6,"
    "application/openmetrics-text;version=0.0.1;q=0.5,"
    "text/plain;version=1.0.0;escaping=allow-utf-8;q=0.4,text/plain;version=0.0.4;q=0.3,"
    "*/*;q=0.2")
PROMETHEUS_DEFAULTS = (PROMETHEUS_2_48, PROMETHEUS_2_49, PROMETHEUS_3)


@pytest.mark.parametrize(("accept", "om"), [
    *((header, True) for header in PROMETHEUS_DEFAULTS),
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


TEXT = b"# HELP c c\n# TYPE c counter\nc 1\n"
OPENMETRICS = b"# HELP c c\n# TYPE c unknown\nc 1\n# EOF\n"


class _Published:
    """The sampler's side of /metrics: one fixed poll's bytes."""

    current = Rendered(TEXT, gzip.compress(TEXT), OPENMETRICS, gzip.compress(OPENMETRICS))
    snapshot: Snapshot | None = None
    reloading: bool = False

    def readiness(self) -> tuple[bool, str]:
        return True, "ok"

    def scrape_served(self) -> None:
        pass


async def _scrape(openmetrics: bool, accept: str, encoding: str = "",
                  published: _Published | None = None) -> tuple[str, bytes]:
    """(Content-Type, body as received) of one GET /metrics."""
    server = RawTestServer(make_handler(published or _Published(),
                                       WebSettings(openmetrics=openmetrics)))
    client: TestClient[web.BaseRequest, None] = TestClient(server, auto_decompress=False)
    await client.start_server()
    try:
        response = await client.get(
            "/metrics", headers={"Accept": accept, "Accept-Encoding": encoding})
        assert response.status == 200
        return response.headers["Content-Type"], await response.read()
    finally:
        await client.close()


@pytest.mark.parametrize("accept", [*PROMETHEUS_DEFAULTS, "application/openmetrics-text", ""])
async def test_text_by_default_whatever_the_scraper_prefers(accept: str) -> None:
    ctype, body = await _scrape(False, accept)
    assert ctype.startswith("text/plain; version=0.0.4")
    assert body == TEXT
    ctype, body = await _scrape(False, accept, "gzip")
    assert ctype.startswith("text/plain; version=0.0.4")
    assert gzip.decompress(body) == TEXT


@pytest.mark.parametrize("accept", PROMETHEUS_DEFAULTS)
async def test_enabled_openmetrics_goes_to_scrapers_that_prefer_it(accept: str) -> None:
    ctype, body = await _scrape(True, accept)
    assert ctype.startswith("application/openmetrics-text; version=1.0.0")
    assert body == OPENMETRICS
    ctype, body = await _scrape(True, accept, "gzip")
    assert gzip.decompress(body) == OPENMETRICS


async def test_enabled_openmetrics_still_gives_text_to_others() -> None:
    ctype, body = await _scrape(True, "text/plain;version=0.0.4")
    assert ctype.startswith("text/plain; version=0.0.4")
    assert body == TEXT


async def test_a_poll_rendered_without_openmetrics_serves_text_to_everyone() -> None:
    """With OpenMetrics off, polls render text only; the endpoint never serves a body it
    does not have, even if asked to negotiate."""
    text_only = _Published()
    text_only.current = Rendered(TEXT, gzip.compress(TEXT))
    for encoding in ("", "gzip"):
        ctype, body = await _scrape(True, PROMETHEUS_3, encoding, text_only)
        assert ctype.startswith("text/plain; version=0.0.4")
        assert (gzip.decompress(body) if encoding else body) == TEXT

"""Accept and Accept-Encoding negotiation, through the real web app on a real socket: any
header pair gets a 200 whose body is exactly what its Content-Type and Content-Encoding say,
and the format chosen is the one the header prefers."""

from __future__ import annotations

import asyncio
import gzip
import http.client
import threading
from collections.abc import Iterator

import pytest
from aiohttp import web
from hypothesis import given
from hypothesis import strategies as st

from exporter.exposition.render import (
    OPENMETRICS_CONTENT_TYPE,
    TEXT_CONTENT_TYPE,
    Rendered,
    render,
)
from exporter.sampling.snapshot import Snapshot
from exporter.series import Family, Sample
from exporter.web.app import make_handler
from exporter.web.config import WebSettings

OM = "application/openmetrics-text"
TEXT = "text/plain"


class FixedSource:
    """A poll's rendered exposition, as the sampler would hold it."""

    def __init__(self) -> None:
        self.current: Rendered = render([
            Family("gpu_exporter_demo", "counter", "A counter.", (Sample((("a", "b"),), 3.0),)),
            Family("DCGM_FI_DEV_GPU_TEMP", "gauge", "Temperature.",
                   (Sample((("gpu", "0"),), 41.0),)),
        ])
        self.snapshot: Snapshot | None = None
        self.reloading = False

    def readiness(self) -> tuple[bool, str]:
        return True, "ok"

    def scrape_served(self) -> None:
        pass


@pytest.fixture(scope="module")
def port() -> Iterator[int]:
    """The endpoints served by aiohttp from a thread of its own for the module's examples."""
    loop = asyncio.new_event_loop()
    # OpenMetrics on, so that negotiation is what is tested (off, text is always served).
    runner = web.ServerRunner(web.Server(make_handler(FixedSource(), WebSettings(openmetrics=True)),
                                         loop=loop, access_log=None))
    loop.run_until_complete(runner.setup())
    site = web.TCPSite(runner, "127.0.0.1", 0)
    loop.run_until_complete(site.start())
    bound = runner.addresses[0][1]
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    yield int(bound)
    asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(10)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(10)
    loop.close()


qvalue = st.one_of(st.none(), st.sampled_from(["0", "0.0", "0.5", "1", "1.0", "0.001"]),
                   st.text("0123456789.-e", max_size=5))
token_case = st.sampled_from([str.lower, str.upper, str.title])
blank = st.sampled_from(["", " ", "  "])


@st.composite
def entries(draw: st.DrawFn, names: list[str]) -> tuple[str, str, str | None]:
    """(header text of one entry, the media type or coding it names, its q text)."""
    name = draw(st.one_of(st.sampled_from(names), st.text("abcdefghijklmnopqrstuvwxyz/-*+.",
                                                          min_size=1, max_size=24)))
    q = draw(qvalue)
    params = draw(st.lists(st.sampled_from(["version=1.0.0", "version=0.0.4",
                                            "charset=utf-8", "escaping=allow-utf-8"]),
                           max_size=2))
    if q is not None:
        params.insert(draw(st.integers(0, len(params))), f"q={q}")
    b = draw(blank)
    text = draw(token_case)(name) + "".join(f"{b};{b}{p}" for p in params)
    return text, name.lower(), q


def _q(q: str | None) -> float:
    if q is None:
        return 1.0
    try:
        return float(q)
    except ValueError:
        return 0.0


def preference(parsed: list[tuple[str, str, str | None]], wanted: str) -> float:
    """The q the first entry naming `wanted` gives it (RFC 9110 §12.4.2); 0 when none does."""
    for _, name, q in parsed:
        if name == wanted:
            return _q(q)
    return 0.0


accepts = st.lists(entries([OM, TEXT, "*/*", "application/*", "text/*", "application/json"]),
                   max_size=5)
encodings = st.lists(entries(["gzip", "deflate", "br", "identity", "*"]), max_size=4)


@given(accepts, encodings, blank)
def test_every_header_gets_the_format_it_prefers(port: int, accept: list[tuple[str, str,
                                                                                str | None]],
                                                  encoding: list[tuple[str, str, str | None]],
                                                  b: str) -> None:
    headers = {"Accept": f"{b},{b}".join(e[0] for e in accept),
               "Accept-Encoding": f"{b},{b}".join(e[0] for e in encoding)}
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("GET", "/metrics", headers=headers)
        response = conn.getresponse()
        body = response.read()
    finally:
        conn.close()
    assert response.status == 200
    om_q, text_q = preference(accept, OM), preference(accept, TEXT)
    wants_om = om_q > 0 and om_q >= text_q
    assert response.headers["Content-Type"] == (OPENMETRICS_CONTENT_TYPE if wants_om
                                                else TEXT_CONTENT_TYPE)
    gzipped = preference(encoding, "gzip") > 0
    assert (response.headers.get("Content-Encoding") == "gzip") is gzipped
    plain = gzip.decompress(body) if gzipped else body
    assert plain.endswith(b"# EOF\n") is wants_om
    assert b"DCGM_FI_DEV_GPU_TEMP" in plain

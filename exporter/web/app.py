"""The HTTP surface: /metrics hands out bytes rendered by the last poll, nothing more.

/health answers while the process runs; /ready also checks that data is fresh (dcgm-exporter's
health check stays green over stale metrics); / is the node page for a person and /api/node
the same view as JSON (exporter.web.node_page), both from the last poll.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from aiohttp import web
from aiohttp.typedefs import Middleware

from exporter.exposition.render import (
    OPENMETRICS_CONTENT_TYPE,
    TEXT_CONTENT_TYPE,
    Rendered,
)
from exporter.sampling.snapshot import Snapshot
from exporter.web.node_page import NodePage


class Source(Protocol):
    """The sampler, as the web layer sees it."""

    @property
    def current(self) -> Rendered: ...
    @property
    def snapshot(self) -> Snapshot | None: ...
    def readiness(self) -> tuple[bool, str]: ...
    def scrape_served(self) -> None: ...


def _q(params: str) -> float:
    for param in params.split(";"):
        key, _, value = param.strip().partition("=")
        if key.strip().lower() == "q":
            try:
                return float(value)
            except ValueError:
                return 0.0
    return 1.0


def _accepted(header: str, wanted: str) -> float:
    """The q-value a client gives to `wanted` (a media type or coding); 0 if absent."""
    for part in header.split(","):
        name, _, params = part.strip().partition(";")
        if name.strip().lower() == wanted:
            return _q(params)
    return 0.0


def _wants_openmetrics(accept: str) -> bool:
    om = _accepted(accept, "application/openmetrics-text")
    return om > 0 and om >= _accepted(accept, "text/plain")


def _accepts_gzip(accept_encoding: str) -> bool:
    return _accepted(accept_encoding, "gzip") > 0


def make_app(source: Source, *, openmetrics: bool = False,
             middlewares: Sequence[Middleware] = (),
             node_page: NodePage | None = None) -> web.Application:
    """The five endpoints, and nothing else; `middlewares` carry the connection limits and
    the web config's rules (exporter.web.middleware). `openmetrics`: negotiate OpenMetrics
    by Accept. Off, every scrape gets text 0.0.4, as from dcgm-exporter: Prometheus prefers
    OpenMetrics when offered, and there the DCGM counters (named without `_total`) can only
    be typed `unknown`, so Prometheus would record them as untyped."""

    async def metrics(request: web.Request) -> web.Response:
        rendered = source.current
        source.scrape_served()
        om = openmetrics and _wants_openmetrics(request.headers.get("Accept", ""))
        gz = _accepts_gzip(request.headers.get("Accept-Encoding", ""))
        if om:
            body = rendered.openmetrics_gzip if gz else rendered.openmetrics
            ctype = OPENMETRICS_CONTENT_TYPE
        else:
            body = rendered.text_gzip if gz else rendered.text
            ctype = TEXT_CONTENT_TYPE
        headers = {"Content-Type": ctype, "Vary": "Accept, Accept-Encoding"}
        if gz:
            headers["Content-Encoding"] = "gzip"
        return web.Response(body=body, headers=headers)

    async def health(_request: web.Request) -> web.Response:
        return web.Response(text="ok\n")

    async def ready(_request: web.Request) -> web.Response:
        ok, reason = source.readiness()
        return web.Response(text=reason + "\n", status=200 if ok else 503)

    page = node_page if node_page is not None else NodePage()

    async def index(_request: web.Request) -> web.Response:
        return page.html(source.readiness())

    async def api_node(_request: web.Request) -> web.Response:
        return page.json(source.readiness())

    app = web.Application(middlewares=middlewares)
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/health", health)
    app.router.add_get("/ready", ready)
    app.router.add_get("/", index)
    app.router.add_get("/api/node", api_node)
    return app


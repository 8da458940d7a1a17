"""The HTTP surface: /metrics hands out bytes rendered by the last poll, nothing more.

/health answers while the process runs; /ready also checks that data is fresh (dcgm-exporter's
health check stays green over stale metrics); / is the node page for a person and /api/node
the same view as JSON (exporter.web.node_page), both from the last poll.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from typing import Protocol

from aiohttp import web

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


# A scraper sends the same two headers every time: each is parsed once. The caches are
# bounded, since any client can send any value.
@functools.lru_cache(maxsize=64)
def _wants_openmetrics(accept: str) -> bool:
    om = _accepted(accept, "application/openmetrics-text")
    return om > 0 and om >= _accepted(accept, "text/plain")


@functools.lru_cache(maxsize=64)
def _accepts_gzip(accept_encoding: str) -> bool:
    return _accepted(accept_encoding, "gzip") > 0


def _response_headers(openmetrics: bool, gz: bool) -> dict[str, str]:
    headers = {"Content-Type": OPENMETRICS_CONTENT_TYPE if openmetrics else TEXT_CONTENT_TYPE,
               "Vary": "Accept, Accept-Encoding"}
    if gz:
        headers["Content-Encoding"] = "gzip"
    return headers


_RESPONSE_HEADERS = {(om, gz): _response_headers(om, gz)
                     for om in (False, True) for gz in (False, True)}
"""Copied by each response (aiohttp takes a copy), never changed."""


Endpoint = Callable[[web.BaseRequest], Awaitable[web.StreamResponse]]
"""What aiohttp's low-level server calls for each request."""
Guard = Callable[[web.BaseRequest, Endpoint], Awaitable[web.StreamResponse]]
"""Rules around every request (the web config's: exporter.web.middleware)."""

PATHS = ("/metrics", "/health", "/ready", "/", "/api/node")
METHODS = ("GET", "HEAD")


def make_handler(source: Source, *, openmetrics: bool = False,
                 guard: Guard | None = None, node_page: NodePage | None = None) -> Endpoint:
    """The five endpoints (`PATHS`, GET and HEAD), and nothing else: other paths answer
    404, other methods 405. aiohttp's low-level server calls the result for each request:
    no application router, no middleware chain, so a scrape costs what this code does.
    `guard` wraps every request, 404s included (the web config's rules).

    `openmetrics`: negotiate OpenMetrics by Accept. Off, every scrape gets text 0.0.4, as
    from dcgm-exporter: Prometheus prefers OpenMetrics when offered, and there the DCGM
    counters (named without `_total`) can only be typed `unknown`, so Prometheus would
    record them as untyped."""

    async def metrics(request: web.BaseRequest) -> web.StreamResponse:
        rendered = source.current
        source.scrape_served()
        gz = _accepts_gzip(request.headers.get("Accept-Encoding", ""))
        om_body = rendered.openmetrics_gzip if gz else rendered.openmetrics
        if openmetrics and om_body is not None and _wants_openmetrics(
                request.headers.get("Accept", "")):
            return web.Response(body=om_body, headers=_RESPONSE_HEADERS[True, gz])
        body = rendered.text_gzip if gz else rendered.text
        return web.Response(body=body, headers=_RESPONSE_HEADERS[False, gz])

    async def health(_request: web.BaseRequest) -> web.StreamResponse:
        return web.Response(text="ok\n")

    async def ready(_request: web.BaseRequest) -> web.StreamResponse:
        ok, reason = source.readiness()
        return web.Response(text=reason + "\n", status=200 if ok else 503)

    page = node_page if node_page is not None else NodePage()

    async def index(_request: web.BaseRequest) -> web.StreamResponse:
        return page.html(source.readiness())

    async def api_node(_request: web.BaseRequest) -> web.StreamResponse:
        return page.json(source.readiness())

    endpoints: dict[str, Endpoint] = dict(zip(PATHS, (metrics, health, ready, index, api_node),
                                             strict=True))

    async def dispatch(request: web.BaseRequest) -> web.StreamResponse:
        endpoint = endpoints.get(request.path)
        if endpoint is None:
            raise web.HTTPNotFound()
        if request.method not in METHODS:
            raise web.HTTPMethodNotAllowed(request.method, METHODS)
        return await endpoint(request)

    if guard is None:
        return dispatch

    async def guarded(request: web.BaseRequest) -> web.StreamResponse:
        return await guard(request, dispatch)

    return guarded


"""The HTTP surface: /metrics hands out bytes rendered by the last poll, nothing more.

/health answers while the process runs (with `--health-require-gpus`, 503 while no GPU is
served); /ready also checks that data is fresh (dcgm-exporter's health check stays green over
stale metrics); / is the node page for a person and /api/node the same view as JSON
(exporter.nodepage.page), both from the last poll.
"""

from __future__ import annotations

import functools
import gzip
from collections.abc import Awaitable, Callable
from typing import Protocol

from aiohttp import web

from exporter.exposition.render import (
    GZIP_LEVEL,
    OPENMETRICS_CONTENT_TYPE,
    OPENMETRICS_EOF,
    TEXT_CONTENT_TYPE,
    Rendered,
    visible_entities,
)
from exporter.nodepage.page import NodePage
from exporter.sampling.snapshot import Snapshot
from exporter.web.config import DEFAULT_WEB_SETTINGS, WebSettings
from exporter.web.scrapes import AdmittedResponse, ScrapeSlots

NO_GPU_BODY = "not ok: no GPU collector registered (no GPU is served)\n"


class Source(Protocol):
    """The sampler, as the web layer sees it."""

    @property
    def current(self) -> Rendered:
        """Return the bodies rendered by the last poll, which /metrics hands out as they are."""
        ...

    @property
    def snapshot(self) -> Snapshot | None:
        """Return the last poll's readings (None before the first poll), for /health's GPU
        count."""
        ...

    @property
    def reloading(self) -> bool:
        """Return whether a reload of the collectors is under way (/health stays ok through
        it)."""
        ...

    def readiness(self) -> tuple[bool, str]:
        """Return whether /ready answers ok, and the line it shows."""
        ...

    def scrape_served(self) -> None:
        """Count one scrape served."""
        ...


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
    """Return the q-value a client gives to `wanted` (a media type or coding); 0 if absent."""
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


def _gpus_served(snapshot: Snapshot | None) -> int:
    """GPUs and MIG instances whose series the last poll exported (a device filter that
    selects none, or every GPU lost, leaves none)."""
    if snapshot is None:
        return 0
    values = snapshot.readings.values
    return sum(1 for e in visible_entities(snapshot) if values.get(e.key))


def _with_tail(rendered: Rendered, om: bool, gz: bool, tail: bytes) -> bytes:
    """Return the poll's body with `tail` (families of this scrape) after its other families."""
    if om:
        assert rendered.openmetrics is not None
        if gz:
            if rendered.openmetrics_open is not None:
                return rendered.openmetrics_open.finish(tail + OPENMETRICS_EOF)
            return gzip.compress(rendered.openmetrics[:-len(OPENMETRICS_EOF)] + tail +
                                 OPENMETRICS_EOF, GZIP_LEVEL, mtime=0)
        return rendered.openmetrics[:-len(OPENMETRICS_EOF)] + tail + OPENMETRICS_EOF
    if gz:
        if rendered.text_open is not None:
            return rendered.text_open.finish(tail)
        return gzip.compress(rendered.text + tail, GZIP_LEVEL, mtime=0)
    return rendered.text + tail


def _metrics_endpoint(source: Source, openmetrics: bool, admitted: ScrapeSlots,
                      exporter_metrics: bool) -> Endpoint:
    async def metrics(request: web.BaseRequest) -> web.StreamResponse:
        if not admitted.take():
            return admitted.refusal()
        rendered = source.current
        source.scrape_served()
        gz = _accepts_gzip(request.headers.get("Accept-Encoding", ""))
        om_body = rendered.openmetrics_gzip if gz else rendered.openmetrics
        om = openmetrics and om_body is not None and _wants_openmetrics(
            request.headers.get("Accept", ""))
        if exporter_metrics:
            body = _with_tail(rendered, om, gz, admitted.promhttp(om))
        elif om:
            body = om_body  # type: ignore[assignment]  # not None when om
        else:
            body = rendered.text_gzip if gz else rendered.text
        return AdmittedResponse(admitted, body=body, headers=_RESPONSE_HEADERS[om, gz])

    return metrics


def _health_endpoint(source: Source, require_gpus: bool) -> Endpoint:
    async def health(_request: web.BaseRequest) -> web.StreamResponse:
        return web.Response(text="ok\n")

    async def health_of_gpus(_request: web.BaseRequest) -> web.StreamResponse:
        gpus = _gpus_served(source.snapshot)
        # dcgm-exporter counts its GPU collectors: one, registered while it has a GPU.
        headers = {"X-GPU-Collectors": "1" if gpus else "0"}
        if gpus or source.reloading:
            return web.Response(text="ok\n", headers=headers)
        return web.Response(text=NO_GPU_BODY, status=503, headers=headers)

    return health_of_gpus if require_gpus else health


def make_handler(source: Source, settings: WebSettings = DEFAULT_WEB_SETTINGS, *,
                 guard: Guard | None = None, node_page: NodePage | None = None,
                 slots: ScrapeSlots | None = None) -> Endpoint:
    """Return the five endpoints (`PATHS`, GET and HEAD), and nothing else: other paths answer
    404, other methods 405. aiohttp's low-level server calls the result for each request:
    no application router, no middleware chain, so a scrape costs what this code does.
    `guard` wraps every request, 404s included (the web config's rules).

    `settings.openmetrics`: negotiate OpenMetrics by Accept. Off, every scrape gets text 0.0.4, as
    from dcgm-exporter: Prometheus prefers OpenMetrics when offered, and there the DCGM
    counters (named without `_total`) can only be typed `unknown`, so Prometheus would
    record them as untyped.

    `slots`: the scrapes admitted at once (`--max-concurrent-scrapes`, default 16); more
    are answered 503. `settings.exporter_metrics`: promhttp's families of this scrape after
    the poll's (the poll renders the process's own). `settings.health_require_gpus`:
    /health answers 503 while no GPU is served, except during a reload."""
    admitted = slots if slots is not None else ScrapeSlots(settings.max_concurrent_scrapes)
    metrics = _metrics_endpoint(source, settings.openmetrics, admitted,
                                settings.exporter_metrics)
    health = _health_endpoint(source, settings.health_require_gpus)

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


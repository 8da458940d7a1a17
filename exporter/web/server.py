"""The HTTP server as `serve` runs it: our endpoints on aiohttp's low-level server, its
protocol behind our listener, with the web config's rules, and the self-metrics of both."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from aiohttp import web

from exporter.exposition.publisher import Publisher as ExpositionPublisher
from exporter.exposition.render import Rendered
from exporter.nodepage.page import NodePage
from exporter.sampling.sampler import Publisher
from exporter.sampling.snapshot import Snapshot
from exporter.sampling.stats import PollStats
from exporter.selfmetrics import HTTP_CONNECTIONS_REFUSED, WEB_CONFIG_RELOADS
from exporter.series import Family
from exporter.web.app import Source, make_handler
from exporter.web.config import DEFAULT_WEB_SETTINGS, WebSettings
from exporter.web.limits import OneLinePerInterval, WebLimits
from exporter.web.listener import REFUSAL_REASONS, Listener
from exporter.web.middleware import enforce_web_config
from exporter.web.scrapes import ScrapeSlots

if TYPE_CHECKING:  # the web config's code loads only when a file is given
    from exporter.web.reload import LiveWebConfig

_AIOHTTP_SERVER_LOG = logging.getLogger("aiohttp.server")
"""Where aiohttp's protocol logs requests it could not parse."""


@dataclass(frozen=True, slots=True)
class _WithWebFamilies:
    """A publisher that adds the endpoint's self-metrics to each exposition, and hands each
    poll to the node page."""

    publish: Publisher[Rendered]
    families: Callable[[], list[Family]]
    node_page: NodePage
    process_families: Callable[[], list[Family]] | None = None
    """`--enable-exporter-metrics`: the process's own families, read here on the render
    thread, after every other family."""

    def __call__(self, snapshot: Snapshot | None, stats: PollStats,
                 extra: list[Family]) -> Rendered:
        families = [*extra, *self.families()]
        if self.process_families is not None:
            families += self.process_families()
        rendered = self.publish(snapshot, stats, families)
        self.node_page.record(snapshot, stats, families)
        return rendered


class WebServer:
    """The exporter's HTTP server: the five endpoints, started and stopped by `serve`.

    It owns the listener (connection limits and TLS), the scrape slots and the node page, and
    provides the publisher that adds its own self-metrics to each exposition.
    """

    def __init__(self, settings: WebSettings = DEFAULT_WEB_SETTINGS,
                 web_config: LiveWebConfig | None = None,
                 limits: WebLimits | None = None) -> None:
        """Serve as `settings` say, with the web config's rules when one is given. With
        `settings.exporter_metrics` the publisher must render appendable bodies
        (`Publisher.appendable`). `limits`: the settings' timeouts when left out."""
        self.settings = settings
        self.web_config = web_config
        self.limits = limits or WebLimits(header_timeout_s=settings.read_timeout_s,
                                          write_timeout_s=settings.write_timeout_s)
        self.scrapes = ScrapeSlots(settings.max_concurrent_scrapes)
        """Kept for the server's life: promhttp's counters survive reloads."""
        self._runner: web.ServerRunner | None = None
        self._quiet_malformed = OneLinePerInterval()
        current_tls = (lambda: web_config.current().tls) if web_config is not None else None
        self.listener = Listener(self._new_protocol, self.limits,
                                 current_tls or (lambda: None))
        self.node_page = NodePage(web_config)

    @property
    def scheme(self) -> str:
        """Return "https" when the web config turns TLS on, else "http" (for the logs)."""
        tls = self.web_config is not None and self.web_config.applied.tls is not None
        return "https" if tls else "http"

    def families(self) -> list[Family]:
        """Return the endpoint's self-metrics (read from the render thread: counters only)."""
        refused = self.listener.stats.refused
        families = [HTTP_CONNECTIONS_REFUSED.family(
            HTTP_CONNECTIONS_REFUSED.sample(float(refused[r]), reason=r)
            for r in REFUSAL_REASONS)]
        if self.web_config is not None:
            reloads = self.web_config.reloads
            families.append(WEB_CONFIG_RELOADS.family(
                WEB_CONFIG_RELOADS.sample(float(reloads[r]), result=r)
                for r in ("success", "failure")))
        return families

    def publishing(self, publish: ExpositionPublisher) -> Publisher[Rendered]:
        """`publish`, with the endpoint's self-metrics added to every exposition and each
        poll recorded for the node page (which names the exposition's backend)."""
        self.node_page.backend = publish.backend
        process_families = None
        if self.settings.exporter_metrics:
            from exporter.web.exporter_metrics import ProcessFamilies  # the option's only

            process_families = ProcessFamilies()
        return _WithWebFamilies(publish, self.families, self.node_page, process_families)

    async def start(self, source: Source) -> None:
        """Serve `source` on the settings' address; OSError when it cannot be bound."""
        guard = None if self.web_config is None else enforce_web_config(self.web_config)
        _AIOHTTP_SERVER_LOG.addFilter(self._quiet_malformed)
        # aiohttp's low-level server: our handler dispatches the five paths itself.
        server = web.Server(
            make_handler(source, self.settings, guard=guard, node_page=self.node_page,
                         slots=self.scrapes),
            access_log=None, keepalive_timeout=self.limits.idle_timeout_s,
            max_line_size=self.limits.max_line_size, max_field_size=self.limits.max_field_size,
            max_headers=self.limits.max_headers)
        # A graceful shutdown waits for responses being written, at most the write timeout
        # (which also cuts each of them).
        self._runner = web.ServerRunner(server, shutdown_timeout=self.limits.write_timeout_s)
        await self._runner.setup()
        try:
            await self.listener.start(self.settings.listen_host, self.settings.listen_port)
        except OSError:
            await self._runner.cleanup()
            self._runner = None
            raise

    async def stop(self) -> None:
        """Stop accepting connections and close the server, waiting at most the write timeout
        for responses being written."""
        await self.listener.close()
        if self._runner is not None:
            await self._runner.cleanup()
        _AIOHTTP_SERVER_LOG.removeFilter(self._quiet_malformed)

    def _new_protocol(self) -> web.RequestHandler:
        assert self._runner is not None
        assert self._runner.server is not None
        return self._runner.server()

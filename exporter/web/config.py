"""What the web layer is told at start-up: where to listen and how to answer."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

DEFAULT_MAX_CONCURRENT_SCRAPES = 16


@dataclass(frozen=True, slots=True)
class WebSettings:
    """The HTTP server's settings, filled from the serve options whose `fills` names
    `web.<field>` (exporter/options/serve_table.py)."""

    listen_host: str | None = None
    """None: every interface."""
    listen_port: int = 9400
    openmetrics: bool = False
    """Negotiate OpenMetrics by Accept; off: text 0.0.4 whatever the scraper asks for."""
    config_file: Path | None = None
    """exporter-toolkit's web config (TLS, basic auth); None: plain HTTP."""
    read_timeout_s: float = 10.0
    """Longest time to read a request."""
    write_timeout_s: float = 30.0
    """Longest time to write a response, and to finish serving at shutdown."""
    max_concurrent_scrapes: int = DEFAULT_MAX_CONCURRENT_SCRAPES
    """Scrapes served at once; more are answered 503. Always > 0."""
    exporter_metrics: bool = False
    """Also serve metrics about the exporter's own process and HTTP handler."""
    health_require_gpus: bool = False
    """`/health` answers 503 while no GPU is exported."""


DEFAULT_WEB_SETTINGS = WebSettings()
"""Every setting at its default (what tests and benchmarks serve with)."""

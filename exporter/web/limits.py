"""The bounds of the HTTP surface, and the two throttles that keep clients from costing more
than they should: a token bucket for `rate_limit`, and a log filter for malformed requests.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from aiohttp.http_exceptions import HttpProcessingError


@dataclass(frozen=True, slots=True)
class WebLimits:
    """The bounds on the HTTP server's connections and requests: time-outs, sizes and counts."""

    header_timeout_s: float = 10.0
    """From accepting a connection (or the first byte of a later request on it) to the end of
    the request's headers, TLS handshake included. Slow or silent clients are cut then
    (`--web-read-timeout`, Go's `ReadTimeout`: no endpoint reads a body)."""
    write_timeout_s: float = 30.0
    """From the end of a request's headers to the last byte of its response handed to the
    kernel (`--web-write-timeout`, Go's `WriteTimeout`): a client that stops reading a
    response is cut then. Also the longest a graceful shutdown waits for responses."""
    idle_timeout_s: float = 120.0
    """A kept-alive connection with no request in flight is closed after this long: longer
    than a one-minute scrape interval, so scrapers keep their connection."""
    max_connections: int = 256
    """Open connections at once; more are closed as soon as they are accepted. Prometheus
    needs one per scraping server; the rest is room for people and probes."""
    max_line_size: int = 8190
    """aiohttp's limits, stated: the request line, one header line, the number of headers.
    A request over them is answered 400 and the connection closed."""
    max_field_size: int = 8190
    max_headers: int = 128
    listen_backlog: int = 128


class TokenBucket:
    """`rate_limit`: one token every `interval_s`, holding at most `burst` (Go's
    `rate.Limiter`, which the toolkit uses: a burst of 0 admits nothing)."""

    def __init__(self, interval_s: float, burst: int,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._interval = interval_s
        self._burst = burst
        self._clock = clock
        self._tokens = float(burst)
        self._at = clock()

    def allow(self) -> bool:
        """Take a token and return True when one is available; return False when the request must be
        refused."""
        now = self._clock()
        self._tokens = min(float(self._burst), self._tokens + (now - self._at) / self._interval)
        self._at = now
        if self._tokens >= 1.0:
            self._tokens -= 1.0
            return True
        return False


class OneLinePerInterval(logging.Filter):
    """On aiohttp's server logger: a request the parser rejects (bad request line, header
    too long, binary junk) is logged as one line, not a traceback, and at most one such line
    per `interval_s`, with the count of those dropped since. An unauthenticated client can
    send any number of them; the log must not grow with it. Other errors (a failing handler,
    which is our bug) keep their traceback."""

    def __init__(self, interval_s: float = 10.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        self._interval = interval_s
        self._clock = clock
        self._next_at = 0.0
        self.suppressed = 0

    def filter(self, record: logging.LogRecord) -> bool:
        """Return whether this log record is written: a rejected request is written as one line at
        most once per interval, and other records always."""
        exc = record.exc_info[1] if record.exc_info else None
        if not isinstance(exc, HttpProcessingError):
            return True
        now = self._clock()
        if now < self._next_at:
            self.suppressed += 1
            return False
        self._next_at = now + self._interval
        # One line, bounded: the message quotes the client's bytes (escaped, as a repr).
        detail = " ".join(str(exc.message or type(exc).__name__).split())[:200]
        more = (f" ({self.suppressed} more since, not logged)" if self.suppressed else "")
        record.msg = f"{record.getMessage()}: malformed request: {detail}{more}"
        record.args = None
        record.exc_info = None
        record.exc_text = None
        record.levelno, record.levelname = logging.WARNING, "WARNING"
        self.suppressed = 0
        return True

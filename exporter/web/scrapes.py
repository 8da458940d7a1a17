"""Scrapes in flight: the admission limit (`--max-concurrent-scrapes`) and, with
`--enable-exporter-metrics`, promhttp's two families about them.

A scrape holds its slot from admission until aiohttp has handed the response's last byte to
the transport (or failed to): a client that does not read keeps its slot until the write
timeout cuts it. A scrape that finds every slot taken is answered 503 at once, never queued.
dcgm-exporter 4.8.4 also coalesces admitted scrapes onto one gather-and-render; here every
scrape is handed the bytes the last poll rendered, so concurrent scrapes share one render by
construction and the limit only bounds the connections writing at once.
"""

from __future__ import annotations

from aiohttp import web
from aiohttp.abc import AbstractStreamWriter

LIMIT_STATUS = 503
LIMIT_BODY = b"scrape concurrency limit reached\n"
"""As Go's `http.Error` writes dcgm-exporter's message: the text and a newline."""
LIMIT_HEADERS = {"Content-Type": "text/plain; charset=utf-8",
                 "X-Content-Type-Options": "nosniff"}

PROMHTTP_CODES = (200, 500, 503)
"""Codes promhttp's counter starts with, at 0 (promhttp.InstrumentMetricHandler)."""


class ScrapeSlots:
    """Admitted scrapes now, and scrapes finished by status code (on the event loop only)."""

    __slots__ = ("finished", "in_flight", "limit")

    def __init__(self, limit: int) -> None:
        if limit < 1:
            raise ValueError(f"the scrape limit must be at least 1, not {limit}")
        self.limit = limit
        self.in_flight = 0
        self.finished: dict[int, int] = dict.fromkeys(PROMHTTP_CODES, 0)

    def take(self) -> bool:
        """Admit one scrape, or count its refusal (False)."""
        if self.in_flight >= self.limit:
            self.finished[LIMIT_STATUS] += 1
            return False
        self.in_flight += 1
        return True

    def give_back(self, status: int) -> None:
        """Free a scrape's slot and count the scrape as finished with this status code."""
        self.in_flight -= 1
        self.finished[status] = self.finished.get(status, 0) + 1

    def refusal(self) -> web.Response:
        """Return the response sent to a scrape refused because too many are in flight."""
        return web.Response(body=LIMIT_BODY, status=LIMIT_STATUS, headers=LIMIT_HEADERS)

    def promhttp(self, openmetrics: bool) -> bytes:
        """Return promhttp_metric_handler_requests_in_flight and
        promhttp_metric_handler_requests_total as they stand (this scrape in flight, not yet
        counted), in the order Go's registry sorts them."""
        finished = self.finished
        return b"".join((
            _IN_FLIGHT_HEAD, str(self.in_flight).encode(),
            _TOTAL_HEAD_OPENMETRICS if openmetrics else _TOTAL_HEAD_TEXT,
            *(b'%s%d"} %d\n' % (_TOTAL_SAMPLE, code, finished[code])
              for code in sorted(finished)),
        ))


_IN_FLIGHT_HEAD = (b"# HELP promhttp_metric_handler_requests_in_flight Current number of "
                   b"scrapes being served.\n"
                   b"# TYPE promhttp_metric_handler_requests_in_flight gauge\n"
                   b"promhttp_metric_handler_requests_in_flight ")
_COUNTER_HELP = b"Total number of scrapes by HTTP status code.\n"
_TOTAL_HEAD_TEXT = (b"\n# HELP promhttp_metric_handler_requests_total " + _COUNTER_HELP +
                    b"# TYPE promhttp_metric_handler_requests_total counter\n")
_TOTAL_HEAD_OPENMETRICS = (b"\n# HELP promhttp_metric_handler_requests " + _COUNTER_HELP +
                           b"# TYPE promhttp_metric_handler_requests counter\n")
"""The OpenMetrics family is named without `_total`; its samples keep it."""
_TOTAL_SAMPLE = b'promhttp_metric_handler_requests_total{code="'


class AdmittedResponse(web.Response):
    """A scrape's response, which gives its slot back once written (or failed)."""

    def __init__(self, slots: ScrapeSlots, *, body: bytes, headers: dict[str, str]) -> None:
        super().__init__(body=body, headers=headers)
        self._slots: ScrapeSlots | None = slots

    def _give_back(self) -> None:
        if self._slots is not None:
            self._slots.give_back(self.status)
            self._slots = None

    async def prepare(self, request: web.BaseRequest) -> AbstractStreamWriter | None:
        """Send the headers; if that fails, give the slot back at once, since `write_eof` will not
        be called."""
        try:
            return await super().prepare(request)
        except BaseException:  # write_eof will not be called
            self._give_back()
            raise

    async def write_eof(self, data: bytes = b"") -> None:
        """Finish the response and give the slot back, whether or not writing succeeded."""
        try:
            await super().write_eof(data)
        finally:
            self._give_back()

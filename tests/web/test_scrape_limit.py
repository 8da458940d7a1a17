"""`--max-concurrent-scrapes`: scrapes beyond the limit are answered 503 at once, with
dcgm-exporter's body, never queued; a slot comes back when its response is written or its
client goes away."""

from __future__ import annotations

import gzip
import socket
import time
from contextlib import ExitStack

import pytest

from exporter.exposition.render import Rendered
from exporter.web.limits import WebLimits
from exporter.web.scrapes import ScrapeSlots
from tests.support.exporter_process import ExporterProcess, http_get
from tests.support.wait import wait_until
from tests.web.conftest import Client, Response, ServedInThread

BIG = b"x" * (24 << 20)
SCRAPE = b"GET /metrics HTTP/1.1\r\nHost: t\r\n\r\n"


def _limited(serve: type[ServedInThread], limit: int) -> ServedInThread:
    served = serve(None, WebLimits(write_timeout_s=60.0), max_concurrent_scrapes=limit)
    served.source.current = Rendered(BIG, gzip.compress(BIG[:1000]))
    return served


def _stalled(stack: ExitStack, port: int) -> socket.socket:
    """A scrape whose client reads nothing: it keeps its slot."""
    sock = stack.enter_context(socket.socket())
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect(("127.0.0.1", port))
    sock.sendall(SCRAPE)
    return sock


def test_a_scrape_over_the_limit_gets_503_at_once(serve: type[ServedInThread]) -> None:
    served = _limited(serve, 3)
    with ExitStack() as stack:
        stalled = [_stalled(stack, served.port) for _ in range(3)]
        wait_until(lambda: served.server.scrapes.in_flight == 3, 10.0, what="3 in flight")
        started = time.monotonic()
        refused = Client(served.port).get("/metrics")
        # Queued behind the three, it would wait for them forever (the client gives up at
        # 10 s); the bound leaves a loaded machine room.
        assert time.monotonic() - started < 5.0
        assert isinstance(refused, Response)
        assert refused.status == 503
        assert refused.body == b"scrape concurrency limit reached\n"
        assert refused.headers["Content-Type"] == "text/plain; charset=utf-8"
        assert refused.headers["X-Content-Type-Options"] == "nosniff"
        # The probes are no scrapes.
        health = Client(served.port).get("/health")
        assert isinstance(health, Response)
        assert health.status == 200
        # A client that goes away gives its slot back.
        stalled[0].close()
        wait_until(lambda: served.server.scrapes.in_flight == 2, 10.0, what="a slot freed")
        served.source.current = Rendered(b"small\n", gzip.compress(b"small\n"))
        admitted = Client(served.port).get("/metrics")
        assert isinstance(admitted, Response)
        assert admitted.status == 200
        assert admitted.body == b"small\n"
    wait_until(lambda: served.server.scrapes.in_flight == 0, 10.0, what="all slots back")
    assert served.server.scrapes.finished[503] == 1


def test_scrapes_within_the_limit_are_all_served(serve: type[ServedInThread]) -> None:
    served = _limited(serve, 4)
    with ExitStack() as stack:
        for _ in range(3):
            _stalled(stack, served.port)
        wait_until(lambda: served.server.scrapes.in_flight == 3, 10.0, what="3 in flight")
        served.source.current = Rendered(b"small\n", gzip.compress(b"small\n"))
        fourth = Client(served.port).get("/metrics")
        assert isinstance(fourth, Response)
        assert fourth.status == 200


@pytest.mark.parametrize("limit", [0, -1])
def test_a_limit_below_one_is_refused(limit: int) -> None:
    with pytest.raises(ValueError, match="at least 1"):
        ScrapeSlots(limit)


def test_the_flag_sets_the_limit(exporter: type[ExporterProcess]) -> None:
    proc = exporter(["--backend", "sim", "--sim.profile", "l4-1", "-c", "200ms",
                     "--max-concurrent-scrapes", "1"])
    proc.wait_ready()
    # One scrape at a time is still every scrape when they come one after another.
    for _ in range(5):
        status, _, _ = http_get(proc.base + "/metrics")
        assert status == 200


def test_a_flag_value_below_one_stops_the_start(exporter: type[ExporterProcess]) -> None:
    proc = exporter(["--backend", "sim", "--max-concurrent-scrapes", "0"])
    assert proc.proc.wait(30) != 0
    assert "max-concurrent-scrapes" in proc.output()

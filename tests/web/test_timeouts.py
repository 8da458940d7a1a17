"""`--web-read-timeout` and `--web-write-timeout` on the real listener: a client slower than
the read timeout with its request head is cut, a client that does not read its response is
cut at the write timeout, and a graceful shutdown waits at most the write timeout."""

from __future__ import annotations

import gzip
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager

from exporter.exposition.render import Rendered
from exporter.web.limits import WebLimits
from tests.support.exporter_process import ExporterProcess
from tests.support.wait import wait_until
from tests.web.conftest import Client, Response, ServedInThread

BIG = b"x" * (24 << 20)
"""Far more than a socket's buffers hold: a client that stops reading leaves most of it
unsent."""
SCRAPE = b"GET /metrics HTTP/1.1\r\nHost: t\r\n\r\n"


def _big_source(served: ServedInThread) -> None:
    served.source.current = Rendered(BIG, gzip.compress(b"x"))


@contextmanager
def _not_reading(port: int) -> Iterator[socket.socket]:
    """A connection that asks for /metrics and reads nothing (a tiny receive window)."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect(("127.0.0.1", port))
    sock.sendall(SCRAPE)
    try:
        yield sock
    finally:
        sock.close()


def _drain(sock: socket.socket, budget_s: float) -> tuple[int, bool]:
    """(bytes read, whether the server closed or reset the connection) within the budget."""
    sock.settimeout(budget_s)
    got = 0
    try:
        while chunk := sock.recv(1 << 20):
            got += len(chunk)
    except ConnectionResetError:
        return got, True
    except TimeoutError:
        return got, False
    return got, True


def test_a_client_that_does_not_read_is_cut_at_the_write_timeout(
        serve: type[ServedInThread]) -> None:
    served = serve(None, WebLimits(write_timeout_s=1.0))
    _big_source(served)
    with _not_reading(served.port) as sock:
        sent = time.monotonic()
        wait_until(lambda: served.refused("write_timeout") == 1, 10.0, what="cut")
        elapsed = time.monotonic() - sent
        got, closed = _drain(sock, 10.0)
    assert 0.9 <= elapsed < 5.0, elapsed
    assert closed
    assert got < len(BIG)
    # Other clients were served all along, whole.
    response = Client(served.port).get("/metrics")
    assert isinstance(response, Response)
    assert response.body == BIG


def test_a_client_that_reads_in_time_gets_the_whole_response(
        serve: type[ServedInThread]) -> None:
    served = serve(None, WebLimits(write_timeout_s=3.0))
    _big_source(served)
    with _not_reading(served.port) as sock:
        time.sleep(1.0)  # slow to start reading, but done well within the write timeout
        got, _ = _drain(sock, 1.5)
    assert got > len(BIG)  # the body and its head
    assert served.refused("write_timeout") == 0


def test_the_default_write_timeout_is_dcgm_exporters_30s(serve: type[ServedInThread]) -> None:
    served = serve(None)
    assert served.server.limits.write_timeout_s == 30.0
    assert served.server.limits.header_timeout_s == 10.0


def test_a_graceful_shutdown_waits_at_most_the_write_timeout(
        serve: type[ServedInThread]) -> None:
    served = serve(None, WebLimits(write_timeout_s=4.0))
    _big_source(served)
    with _not_reading(served.port):
        wait_until(lambda: served.server.scrapes.in_flight == 1, 10.0, what="in flight")
        started = time.monotonic()
        served.call(served.server.stop())
        took = time.monotonic() - started
    # It waited for the response being written, until the write timeout ended it; without
    # that end it would wait for a client that never reads.
    assert 3.0 <= took < 4.0 + 4.0, took


def test_a_shutdown_does_not_wait_for_idle_connections(serve: type[ServedInThread]) -> None:
    served = serve(None)  # write timeout 30 s
    idle = socket.create_connection(("127.0.0.1", served.port))
    try:
        idle.sendall(SCRAPE)
        idle.recv(1 << 16)  # answered; now kept alive and idle
        started = time.monotonic()
        served.call(served.server.stop())
        # Waiting on the idle connection would take the 30 s write timeout.
        assert time.monotonic() - started < 10.0
    finally:
        idle.close()


def test_the_flags_set_the_listeners_deadlines(exporter: type[ExporterProcess]) -> None:
    proc = exporter(["--backend", "sim", "--sim.profile", "l4-1", "-c", "200ms",
                     "--web-read-timeout", "700ms", "--web-write-timeout", "1s"])
    proc.wait_ready()
    slow = socket.create_connection(("127.0.0.1", proc.port))
    try:
        opened = time.monotonic()
        slow.sendall(b"GET /metrics HTTP/1.1\r\n")  # and the rest never comes
        slow.settimeout(10.0)
        assert slow.recv(100) == b""  # closed by the exporter
        # Without the flag, the default 10 s header timeout would close it.
        assert 0.6 <= time.monotonic() - opened < 6.0
    finally:
        slow.close()
    # Counted, in the exposition of a later poll.
    counted = 'gpu_exporter_http_connections_refused_total{reason="header_timeout"} 1'
    wait_until(lambda: counted in proc.metrics(), 10.0, what=counted)


def test_an_unparsable_timeout_falls_back_to_the_default_with_a_warning(
        exporter: type[ExporterProcess]) -> None:
    proc = exporter(["--backend", "sim", "--sim.profile", "l4-1", "-c", "200ms",
                     "--web-write-timeout", "soon"])
    proc.wait_ready()
    assert "web-write-timeout" in proc.output()

"""The hardened HTTP surface: header timeout, connection cap, header sizes, quiet logging of
malformed requests, and no endpoint beyond the four."""

from __future__ import annotations

import http.client
import logging
import re
import select
import socket
import ssl
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from exporter.web.app import METHODS, PATHS
from exporter.web.limits import WebLimits
from exporter.web.reload import LiveWebConfig
from tests.support.pki import Pki
from tests.support.wait import wait_until
from tests.web.conftest import REFUSED, Client, Response, ServedInThread

FAST = WebLimits(header_timeout_s=0.5)


def _closed_by_server(sock: socket.socket) -> bool:
    """Whether the server has closed this connection (EOF or reset); never blocks."""
    if not select.select([sock], [], [], 0)[0]:
        return False
    try:
        return sock.recv(1, socket.MSG_DONTWAIT | socket.MSG_PEEK) == b""
    except BlockingIOError:
        return False
    except ConnectionError:
        return True


@contextmanager
def _connections(port: int, count: int, first_bytes: bytes = b"") -> Iterator[list[socket.socket]]:
    socks = [socket.create_connection(("127.0.0.1", port)) for _ in range(count)]
    try:
        for s in socks:
            if first_bytes:
                s.sendall(first_bytes)
        yield socks
    finally:
        for s in socks:
            s.close()


def _scrape_ok(port: int) -> bool:
    answer = Client(port).get()
    return isinstance(answer, Response) and answer.status == 200


def _trickle(sock: socket.socket, stop: threading.Event) -> None:
    """A slowloris: a request head one byte every 50 ms, never finished."""
    head = b"GET /metrics HTTP/1.1\r\nHost: x\r\n" + b"X-Slow: " + b"a" * 10_000
    for byte in head:
        if stop.is_set() or _closed_by_server(sock):
            return
        try:
            sock.send(bytes([byte]))
        except OSError:
            return
        time.sleep(0.05)  # the client's pace, not a wait for the server


def test_silent_and_slow_clients_are_cut_while_scrapes_answer(
        serve: type[ServedInThread]) -> None:
    served = serve(None, FAST)
    stop = threading.Event()
    with _connections(served.port, 40) as silent, \
            _connections(served.port, 5, b"GET /metrics HTTP/1.1\r\nHost:") as partial, \
            _connections(served.port, 3) as slow:
        opened = time.monotonic()
        threads = [threading.Thread(target=_trickle, args=(s, stop)) for s in slow]
        for t in threads:
            t.start()
        try:
            assert _scrape_ok(served.port)  # served while all of them are held
            assert not any(_closed_by_server(s) for s in silent)
            wait_until(lambda: all(_closed_by_server(s) for s in silent + partial + slow),
                       10.0, what="every silent, partial and trickling client cut")
            assert time.monotonic() - opened >= FAST.header_timeout_s
            assert _scrape_ok(served.port)
        finally:
            stop.set()
            for t in threads:
                t.join(10)
    assert served.refused("header_timeout") == 48
    wait_until(lambda: served.server.listener.stats.open == 0, 10.0, what="slots released")


def test_silent_clients_are_cut_on_a_tls_port_too(pki: Pki,
                                                  serve: type[ServedInThread]) -> None:
    pki.ca.server().write(pki.folder, "server")
    config = pki.folder / "web.yml"
    config.write_text("tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n")
    served = serve(LiveWebConfig.load(config), FAST)
    # Silent before the handshake, and stalled inside it (a ClientHello record header only).
    with _connections(served.port, 10) as silent, \
            _connections(served.port, 10, b"\x16\x03\x01\x02\x00") as stalled:
        tls = Client(served.port, pki.ca_file())
        answer = tls.get()
        assert isinstance(answer, Response)
        assert answer.status == 200
        wait_until(lambda: all(_closed_by_server(s) for s in silent + stalled), 10.0,
                   what="silent and stalled TLS clients cut")
    assert served.refused("header_timeout") + served.refused("tls_handshake") == 20


def test_connections_over_the_cap_are_closed_at_once(serve: type[ServedInThread]) -> None:
    served = serve(None, WebLimits(max_connections=5, header_timeout_s=60.0))
    with _connections(served.port, 5) as held:
        wait_until(lambda: served.server.listener.stats.open == 5, 10.0, what="5 open")
        with _connections(served.port, 1) as (extra,):
            wait_until(lambda: _closed_by_server(extra), 10.0, what="the 6th closed")
        assert served.refused("connection_limit") == 1
        assert Client(served.port).get() == REFUSED  # a scrape is one more connection
        assert not any(_closed_by_server(s) for s in held)
    wait_until(lambda: served.server.listener.stats.open == 0, 10.0, what="all closed")
    assert _scrape_ok(served.port)


def _raw_exchange(port: int, request: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(request)
        chunks = []
        while chunk := s.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


@pytest.mark.parametrize(("head", "why"), [
    (b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 8191 + b"\r\n\r\n",
     b"Got more than 8190 bytes"),
    (b"GET /" + b"a" * 8190 + b" HTTP/1.1\r\nHost: x\r\n\r\n", b"Got more than 8190 bytes"),
    (b"GET /metrics HTTP/1.1\r\nHost: x\r\n" + b"".join(
        b"X-H%d: v\r\n" % i for i in range(128)) + b"\r\n", b"Too many headers"),
])
def test_oversized_request_heads_are_refused(head: bytes, why: bytes,
                                             serve: type[ServedInThread]) -> None:
    served = serve(None)
    answer = _raw_exchange(served.port, head)
    assert answer.split(b" ", 2)[1] == b"400", answer[:300]
    assert why in answer, answer[:300]
    assert _scrape_ok(served.port)


def test_request_heads_at_the_limits_are_served(serve: type[ServedInThread]) -> None:
    """The control: one byte or header less than each limit is a normal request."""
    served = serve(None)
    big_header = b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\nX-Big: " + \
        b"a" * (8190 - len(b"X-Big: ")) + b"\r\n\r\n"
    many = b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n" + b"".join(
        b"X-H%d: v\r\n" % i for i in range(125)) + b"\r\n"
    for head in (big_header, many):
        assert _raw_exchange(served.port, head).startswith(b"HTTP/1.1 200"), head[:60]


def test_malformed_requests_log_one_line_per_interval(
        serve: type[ServedInThread], caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="aiohttp.server")
    served = serve(None)
    junk = b"GET /metrics HTTP/1.1\r\nHost: x\r\nBroken header line\r\n\r\n"
    for _ in range(30):
        assert b" 400 " in _raw_exchange(served.port, junk)[:20]
    records = [r for r in caplog.records if r.name == "aiohttp.server"]
    assert len(records) == 1, [r.getMessage() for r in records]
    (record,) = records
    assert record.exc_info is None
    assert "\n" not in record.getMessage()
    assert "malformed request" in record.getMessage()
    assert _scrape_ok(served.port)


def test_only_the_five_endpoints_exist(serve: type[ServedInThread]) -> None:
    assert PATHS == ("/metrics", "/health", "/ready", "/", "/api/node")
    served = serve(None)
    for path in PATHS:
        for method in METHODS:
            raw = _raw_exchange(served.port, f"{method} {path} HTTP/1.1\r\nHost: x\r\n"
                                "Connection: close\r\n\r\n".encode())
            assert raw.startswith(b"HTTP/1.1 200"), (method, path, raw[:100])
            # HEAD answers the headers a GET would, and no body.
            body = raw.split(b"\r\n\r\n", 1)[1]
            assert (body == b"") == (method == "HEAD"), (method, path)
    for path in ("/debug/pprof/", "/metrics/", "/static/x", "/..%2fetc/passwd", "/Metrics",
                 "//metrics"):
        answer = Client(served.port).get(path)
        assert isinstance(answer, Response), path
        assert answer.status == 404, path
    for verb in (b"POST", b"PUT", b"DELETE", b"OPTIONS", b"PATCH"):
        raw = _raw_exchange(served.port, verb + b" /metrics HTTP/1.1\r\nHost: x\r\n"
                            b"Content-Length: 0\r\nConnection: close\r\n\r\n")
        assert raw.startswith(b"HTTP/1.1 405"), (verb, raw[:100])
        assert b"\r\nAllow: GET,HEAD\r\n" in raw, raw[:300]
    assert _scrape_ok(served.port)


@pytest.mark.parametrize("tls", [False, True])
def test_a_kept_alive_connection_outlives_the_header_timeout(
        tls: bool, pki: Pki, serve: type[ServedInThread]) -> None:
    """The deadline is for a request head, not for the connection: a scraper that keeps its
    connection between scrapes is not cut when it idles longer than the header timeout."""
    config = None
    if tls:
        pki.ca.server().write(pki.folder, "server")
        path = pki.folder / "web.yml"
        path.write_text("tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n")
        config = LiveWebConfig.load(path)
    served = serve(config, FAST)
    conn = (http.client.HTTPSConnection("127.0.0.1", served.port, timeout=10,
                                        context=ssl.create_default_context(
                                            cafile=str(pki.ca_file())))
            if tls else http.client.HTTPConnection("127.0.0.1", served.port, timeout=10))
    try:
        for _ in range(2):
            conn.request("GET", "/metrics")
            response = conn.getresponse()
            assert response.status == 200
            assert b"DCGM" in response.read()
            first_socket = conn.sock
            time.sleep(3 * FAST.header_timeout_s)  # idle, as between two scrapes
        assert conn.sock is first_socket  # the same connection served both
        conn.request("GET", "/health")
        assert conn.getresponse().status == 200
    finally:
        conn.close()
    assert served.refused("header_timeout") == 0


def _read_response(sock: socket.socket) -> bytes:
    """One response with a Content-Length body, read from a kept-alive connection."""
    data = b""
    while b"\r\n\r\n" not in data:
        data += sock.recv(65536)
    head, _, body = data.partition(b"\r\n\r\n")
    length = int(re.search(rb"\r\nContent-Length: (\d+)", head, re.I).group(1))  # type: ignore[union-attr]
    while len(body) < length:
        body += sock.recv(65536)
    return head


def test_a_head_split_anywhere_is_served_and_the_connection_kept(
        serve: type[ServedInThread]) -> None:
    """The deadline ends with the head, however its bytes arrive: here the blank line that
    ends it comes in two sends, then the connection idles past the deadline and is used
    again."""
    served = serve(None, FAST)
    with socket.create_connection(("127.0.0.1", served.port), timeout=10) as sock:
        sock.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r")
        time.sleep(0.1)  # the client's pace: two reads on the server's side
        sock.sendall(b"\n")
        assert _read_response(sock).startswith(b"HTTP/1.1 200")
        time.sleep(3 * FAST.header_timeout_s)  # idle, as between two scrapes
        assert not _closed_by_server(sock)
        sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        assert _read_response(sock).startswith(b"HTTP/1.1 200")
    assert served.refused("header_timeout") == 0


@pytest.mark.parametrize(("sent", "answers"), [
    # A complete request and the start of the next, in one send (pipelined).
    (b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\nGET /metrics HTTP/1.1\r\nHo", 1),
    # Empty lines: no request begins, whatever their number.
    (b"\r\n\r\n\r\n\r\n", 0),
    # A request body (no endpoint reads one) is bytes of no complete head.
    (b"POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello", 1),
])
def test_bytes_that_begin_no_complete_head_are_cut_at_the_deadline(
        sent: bytes, answers: int, serve: type[ServedInThread]) -> None:
    served = serve(None, FAST)
    with socket.create_connection(("127.0.0.1", served.port), timeout=10) as sock:
        sock.sendall(sent)
        for _ in range(answers):
            assert _read_response(sock).split(b" ", 2)[1] in (b"200", b"405")
        opened = time.monotonic()
        wait_until(lambda: _closed_by_server(sock), 10.0, what="the connection cut")
        assert time.monotonic() - opened < 9 * FAST.header_timeout_s
    wait_until(lambda: served.refused("header_timeout") == 1, 10.0, what="counted")
    assert _scrape_ok(served.port)

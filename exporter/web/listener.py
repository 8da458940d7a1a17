"""Accepting connections, before aiohttp's protocol sees them.

Each accepted connection takes a slot (at most `max_connections`), then:

1. With TLS configured, the first byte tells TLS (a handshake record) from plain HTTP. Plain
   HTTP stays allowed on the same port, for `/health` and `/ready` only (the web config's
   middleware answers anything else 400): kubelet probes cannot present a client
   certificate, and the GPU Operator's probes are plain `httpGet` on the metrics port.
2. The TLS handshake, with the context current at that moment (files re-read on change),
   and `client_allowed_sans` checked on the verified certificate.
3. aiohttp's protocol serves requests; `_Connection` wraps it to cut a client that has not
   sent a complete request head `header_timeout_s` after the connection opened (or after the
   first byte of a later request). The whole of 1-3 shares that one deadline.
4. A response must be handed to the kernel within `write_timeout_s` of the end of its
   request head (Go's `WriteTimeout`), or the connection is cut.

The deadline is kept here, on the bytes as they arrive, not per request in the app (where
its bookkeeping cost a fifth of the scrape throughput): a request head ends at its first
blank line (aiohttp's parser takes CRLF line ends only), so `HeadWatch` tells from the bytes
alone whether a head is unfinished; a scrape's read, one whole head, costs it one
`bytes.endswith`. Bytes after a head's end begin the next head. No endpoint reads a request
body: one that a client sends anyway counts as the start of the next head, so a connection
left idle after it is cut at the deadline rather than at the idle timeout.

The write deadline costs a scrape one clock read (when its head ends): a response that fits
the transport's buffer never pauses writing, and only a pause (the client reads slower than
we write) arms a timer, at the end of that request's head plus `write_timeout_s`. When it
fires with bytes still unsent, the client has not taken the response in time.

Public asyncio APIs only: the listening sockets are ours, and each accepted socket is handed
to `loop.connect_accepted_socket`, with or without TLS.
"""

from __future__ import annotations

import asyncio
import logging
import re
import socket
import ssl
from collections import Counter
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, cast

from exporter.web.limits import WebLimits

if TYPE_CHECKING:
    # The TLS code is loaded only when a web config turns TLS on (serve's memory floor).
    from exporter.web.tls import ServerTls

log = logging.getLogger(__name__)

TLS_HANDSHAKE_RECORD = b"\x16"
RefusalReason = Literal["connection_limit", "header_timeout", "tls_handshake", "client_san",
                        "write_timeout"]
REFUSAL_REASONS: tuple[RefusalReason, ...] = (
    "connection_limit", "header_timeout", "tls_handshake", "client_san", "write_timeout")


@dataclass
class ConnectionStats:
    """Read by the self-metrics; changed on the event loop only."""

    open: int = 0
    refused: Counter[str] = field(default_factory=Counter)


class _Slot:
    """One of `max_connections`; released once, by whoever ends the connection."""

    def __init__(self, stats: ConnectionStats) -> None:
        self._stats = stats
        self._held = True
        stats.open += 1

    def release(self) -> None:
        if self._held:
            self._held = False
            self._stats.open -= 1


HEAD_END = b"\r\n\r\n"
_HEAD_BYTE = re.compile(rb"[^\r\n]")
"""A byte that begins a request: empty lines before a request line are no request (the
parser skips them), so a client sending only those is cut at the deadline."""


class HeadWatch:
    """Whether a connection's byte stream stops short of a complete request head. A head is
    what follows the previous head's end, up to the first blank line after its first byte
    other than CR or LF. Fed every read; a head may be split across reads anywhere, and one
    read may hold several (pipelined)."""

    __slots__ = ("_begun", "_carry", "open")

    def __init__(self) -> None:
        self.open = False
        """Bytes have arrived since the last complete head."""
        self._begun = False
        """The unfinished head has its first byte other than CR or LF."""
        self._carry = b""
        """The unfinished head's last bytes: the start of an end marker split by a read."""

    def feed(self, data: bytes) -> bool:
        """Take in one read and return whether a request head ended in it."""
        if len(data) > len(HEAD_END) and data.endswith(HEAD_END) and \
                data[-len(HEAD_END) - 1] not in b"\r\n":
            # A scrape's read: the head holding that last byte ends with the read.
            self.open, self._begun, self._carry = False, False, b""
            return True
        if not data:
            return False
        window = self._carry + data if self._carry else data
        pos, last_end = 0, -1
        while True:
            if not self._begun:
                first = _HEAD_BYTE.search(window, pos)
                if first is None:
                    break
                self._begun, pos = True, first.start()
            end = window.find(HEAD_END, pos)
            if end < 0:
                break
            pos = last_end = end + len(HEAD_END)
            self._begun = False
        self.open = last_end < len(window)
        # Keep what a marker split by this read needs: no more than its first three bytes,
        # none from before the head's first byte (a head cannot borrow a previous one's CRLFs).
        self._carry = window[max(pos, len(window) - len(HEAD_END) + 1):] if self._begun \
            else b""
        return last_end >= 0


class _Connection(asyncio.Protocol):
    """aiohttp's protocol for one connection, behind the header deadline and the SAN check."""

    def __init__(self, listener: Listener, inner: asyncio.Protocol, slot: _Slot,
                 deadline: float, allowed_sans: tuple[str, ...] | None) -> None:
        self._listener = listener
        self._inner = inner
        self._slot = slot
        self._deadline = deadline
        self._allowed_sans = allowed_sans
        self._transport: asyncio.Transport | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._heads = HeadWatch()
        self._started = False
        self._head_end_at = deadline
        """When the last complete request head arrived: its response's write deadline
        counts from there."""
        self._write_timer: asyncio.TimerHandle | None = None

    # --- asyncio's calls ----------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # Stream transports (plain or TLS) are what connect_accepted_socket makes.
        transport = self._transport = cast("asyncio.Transport", transport)
        if self._allowed_sans is not None and not _san_allowed(
                transport.get_extra_info("peercert"), self._allowed_sans):
            self._listener.refuse("client_san", transport.get_extra_info("peername"))
            transport.abort()
            return
        self._started = True
        self._inner.connection_made(transport)
        # From the accept: the first head's deadline covers the handshake too.
        self._arm(self._deadline)

    def data_received(self, data: bytes) -> None:
        heads = self._heads
        ended = heads.feed(data)
        if ended:
            self._head_end_at = asyncio.get_running_loop().time()
            if self._write_timer is not None and self._transport is not None and \
                    not self._transport.get_write_buffer_size():
                # The last response was handed over: the next one has its own deadline.
                self._write_timer.cancel()
                self._write_timer = None
        if not heads.open:
            if self._timer is not None:  # heads complete: aiohttp's idle timeout applies
                self._disarm()
        elif ended or self._timer is None:
            # The bytes after the last complete head (or after idling) begin the next head.
            # The first head keeps the deadline armed at the accept.
            loop = asyncio.get_running_loop()
            self._arm(loop.time() + self._listener.limits.header_timeout_s)
        self._inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self._inner.eof_received() if self._started else None

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        if self._write_timer is not None:
            self._write_timer.cancel()
            self._write_timer = None
        self._slot.release()
        if self._started:
            self._inner.connection_lost(exc)

    def pause_writing(self) -> None:
        if self._write_timer is None:
            self._write_timer = asyncio.get_running_loop().call_at(
                self._head_end_at + self._listener.limits.write_timeout_s, self._write_expire)
        self._inner.pause_writing()

    def resume_writing(self) -> None:
        self._inner.resume_writing()

    @property
    def opened(self) -> bool:
        """Return whether asyncio has taken the connection: from then on it owns the socket and
        the slot."""
        return self._transport is not None

    # --- the deadline ---------------------------------------------------------------

    def _arm(self, at: float) -> None:
        self._disarm()
        self._timer = asyncio.get_running_loop().call_at(at, self._expire)

    def _disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _write_expire(self) -> None:
        self._write_timer = None
        transport = self._transport
        if transport is None or transport.is_closing():
            return
        if transport.get_write_buffer_size() > 0:
            self._listener.refuse("write_timeout", transport.get_extra_info("peername"))
            transport.abort()

    def _expire(self) -> None:
        self._timer = None
        if self._transport is not None:
            self._listener.refuse("header_timeout", self._transport.get_extra_info("peername"))
            self._transport.abort()


class Listener:
    """The listening sockets and the accept loop in front of aiohttp's protocol factory."""

    def __init__(self, protocol_factory: Callable[[], asyncio.Protocol], limits: WebLimits,
                 current_tls: Callable[[], ServerTls | None] = lambda: None) -> None:
        self._factory = protocol_factory
        self.limits = limits
        self._current_tls = current_tls
        """Called once per connection: the TLS settings a new connection gets (None: plain
        HTTP only)."""
        self.stats = ConnectionStats()
        self._sockets: list[socket.socket] = []
        self._tasks: set[asyncio.Task[None]] = set()
        self._last_refusal_log = -1e9
        self._unlogged_refusals = 0

    @property
    def ports(self) -> list[int]:
        """Return the ports the listener is bound to (useful when it was asked for port 0)."""
        return [int(s.getsockname()[1]) for s in self._sockets]

    async def start(self, host: str | None, port: int) -> None:
        """Bind every address of `host` (all interfaces when None), as asyncio's `create_server`
        does; raise OSError when one cannot be bound."""
        loop = asyncio.get_running_loop()
        infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM,
                                       flags=socket.AI_PASSIVE)
        try:
            for family, kind, proto, _, address in dict.fromkeys(infos):
                sock = socket.socket(family, kind, proto)
                self._sockets.append(sock)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                if family == socket.AF_INET6:
                    sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
                sock.bind(address)
                sock.listen(self.limits.listen_backlog)
                sock.setblocking(False)
        except OSError:
            self._close_sockets()
            raise
        for sock in self._sockets:
            self._spawn(self._accept(sock))

    async def close(self) -> None:
        """Stop accepting and drop the connections not yet handed to aiohttp (those that were are
        shut down by aiohttp's runner)."""
        self._close_sockets()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    def refuse(self, reason: RefusalReason, peer: object) -> None:
        """Count a refused connection and log it, at most one line per 10 s, so that a flood of
        refusals does not become a flood of log lines."""
        self.stats.refused[reason] += 1
        now = asyncio.get_running_loop().time()
        if now - self._last_refusal_log < 10.0:
            self._unlogged_refusals += 1
            return
        more = (f" ({self._unlogged_refusals} more refusals since, not logged)"
                if self._unlogged_refusals else "")
        self._last_refusal_log, self._unlogged_refusals = now, 0
        log.warning("closed connection from %s: %s%s", _peer_text(peer),
                    reason.replace("_", " "), more)

    # --- accepting ------------------------------------------------------------------

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _close_sockets(self) -> None:
        for sock in self._sockets:
            sock.close()
        self._sockets.clear()

    async def _accept(self, listening: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        while True:
            try:
                sock, peer = await loop.sock_accept(listening)
            except OSError as exc:  # EMFILE and the like: keep listening
                log.warning("accept failed: %s", exc)
                await asyncio.sleep(0.1)
                continue
            if self.stats.open >= self.limits.max_connections:
                self.refuse("connection_limit", peer)
                sock.close()
                continue
            self._spawn(self._open(sock, peer, _Slot(self.stats)))

    async def _open(self, sock: socket.socket, peer: object, slot: _Slot) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.limits.header_timeout_s
        connection: _Connection | None = None
        context: ssl.SSLContext | None = None
        try:
            tls = self._current_tls()
            if tls is not None:
                first = await _first_byte(sock, deadline)
                if not first:
                    return  # closed before saying anything
                if first == TLS_HANDSHAKE_RECORD:
                    context = tls.context
            sans = tls.allowed_sans if tls is not None and context is not None else None
            connection = _Connection(self, self._factory(), slot, deadline, sans)
            made = connection
            await loop.connect_accepted_socket(
                lambda: made, sock, ssl=context,
                ssl_handshake_timeout=max(deadline - loop.time(), 0.001) if context else None)
        except TimeoutError:
            self.refuse("header_timeout", peer)
        except (ssl.SSLError, ConnectionError) as exc:
            if isinstance(exc, ssl.SSLError) or context is not None:
                self.refuse("tls_handshake", peer)
        except OSError:
            pass  # the client went away before we got to it
        finally:
            if connection is None or not connection.opened:
                slot.release()
                sock.close()


async def _first_byte(sock: socket.socket, deadline: float) -> bytes:
    """Return the connection's first byte, leaving it in the socket for whoever reads next; b""
    when the client closed first. Raise TimeoutError at the deadline."""
    loop = asyncio.get_running_loop()
    readable: asyncio.Future[None] = loop.create_future()
    fd = sock.fileno()

    def ready() -> None:
        if not readable.done():
            readable.set_result(None)

    loop.add_reader(fd, ready)
    try:
        await asyncio.wait_for(readable, max(deadline - loop.time(), 0.0))
    finally:
        loop.remove_reader(fd)
    return sock.recv(1, socket.MSG_PEEK)


def _peer_text(peer: object) -> str:
    if isinstance(peer, tuple) and len(peer) >= 2:
        return f"{peer[0]}:{peer[1]}"
    return str(peer)


def _san_allowed(peercert: Any, allowed: Any) -> bool:
    from exporter.web.tls import san_allowed

    return san_allowed(peercert, allowed)

"""The web layer served for real in a thread of the test process: our listener, aiohttp and
TLS on a loopback port, in front of fixed metrics; and real clients to talk to it."""

from __future__ import annotations

import asyncio
import base64
import http.client
import ssl
import threading
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from exporter.exposition.render import Rendered, render
from exporter.sampling.snapshot import Snapshot
from exporter.series import Family, Sample
from exporter.web.config import WebSettings
from exporter.web.limits import WebLimits
from exporter.web.reload import LiveWebConfig
from exporter.web.server import WebServer
from tests.support.pki import Pki, make_pki

REFUSED = "refused"
"""What `Client.get` returns when the server would not talk: handshake failed or reset."""


class FixedSource:
    """The sampler as the web layer sees it, serving one fixed family."""

    def __init__(self) -> None:
        self.current: Rendered = render([Family("DCGM_FI_DEV_GPU_TEMP", "gauge", "temp",
                                                (Sample((("gpu", "0"),), 40.0),))])
        self.snapshot: Snapshot | None = None
        self.reloading = False
        self.scrapes = 0

    def readiness(self) -> tuple[bool, str]:
        return True, "ok: fixed"

    def scrape_served(self) -> None:
        self.scrapes += 1


class ServedInThread:
    """A `WebServer` on its own event loop in a thread; blocking clients in the test."""

    def __init__(self, web_config: LiveWebConfig | None,
                 limits: WebLimits | None = None, **options: Any) -> None:
        """`options`: WebSettings' fields (the address is always 127.0.0.1, any port)."""
        settings = WebSettings(listen_host="127.0.0.1", listen_port=0, **options)
        self.server = WebServer(settings, web_config, limits)
        self.source = FixedSource()
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()
        self.call(self.server.start(self.source))
        self.port = self.server.listener.ports[0]

    def call(self, coro: object) -> object:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(30)  # type: ignore[arg-type]

    def refused(self, reason: str) -> int:
        return self.server.listener.stats.refused[reason]

    def stop(self) -> None:
        self.call(self.server.stop())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)
        self.loop.close()


@dataclass
class Response:
    status: int
    headers: dict[str, str]
    body: bytes
    server_serial: int | None


class Client:
    """http.client over a fresh connection per request, TLS when `ca` is given."""

    def __init__(self, port: int, ca: Path | None = None,
                 cert: tuple[Path, Path] | None = None,
                 max_version: ssl.TLSVersion | None = None) -> None:
        self.port, self.ca, self.cert, self.max_version = port, ca, cert, max_version

    def context(self) -> ssl.SSLContext:
        context = ssl.create_default_context(cafile=str(self.ca))
        if self.cert is not None:
            context.load_cert_chain(*self.cert)
        if self.max_version is not None:
            with warnings.catch_warnings():  # an old version is what the test is about
                warnings.simplefilter("ignore", DeprecationWarning)
                context.maximum_version = self.max_version
                if self.max_version < ssl.TLSVersion.TLSv1_2:
                    context.minimum_version = ssl.TLSVersion.TLSv1
                    context.set_ciphers("DEFAULT:@SECLEVEL=0")
        return context

    def get(self, path: str = "/metrics", auth: tuple[str, str] | None = None,
            headers: dict[str, str] | None = None) -> Response | str:
        """The response, or REFUSED."""
        sent = dict(headers or {})
        if auth is not None:
            sent["Authorization"] = "Basic " + base64.b64encode(
                f"{auth[0]}:{auth[1]}".encode()).decode()
        conn: http.client.HTTPConnection
        if self.ca is None:
            conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        else:
            conn = http.client.HTTPSConnection("127.0.0.1", self.port, timeout=10,
                                               context=self.context())
        try:
            conn.request("GET", path, headers=sent)
            response = conn.getresponse()
            body = response.read()
            serial = None
            if isinstance(conn.sock, ssl.SSLSocket):
                der = conn.sock.getpeercert(binary_form=True)
                serial = _serial(der) if der else None
            return Response(response.status, dict(response.headers), body, serial)
        except (ssl.SSLError, ConnectionError, http.client.RemoteDisconnected):
            return REFUSED
        finally:
            conn.close()


def _serial(der: bytes) -> int:
    from cryptography import x509

    return int(x509.load_der_x509_certificate(der).serial_number)


@pytest.fixture
def pki(tmp_path: Path) -> Pki:
    return make_pki(tmp_path)


@pytest.fixture
def serve() -> Iterator[type[ServedInThread]]:
    """Factory: `serve(web_config, limits, **WebSettings fields)`, stopped after the test."""
    started: list[ServedInThread] = []

    class _Tracked(ServedInThread):
        def __init__(self, web_config: LiveWebConfig | None,
                     limits: WebLimits | None = None, **options: Any) -> None:
            super().__init__(web_config, limits, **options)
            started.append(self)

    yield _Tracked
    for served in started:
        served.stop()

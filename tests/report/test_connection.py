"""What the report sends to reach a guarded server: bearer token (from a file), basic auth,
extra headers such as Mimir's tenant, TLS checked against a CA file or not at all.

The server is a small HTTPS endpoint answering the query API with one sample and keeping
the headers it was sent; its certificate comes from `openssl`, made for the test."""

from __future__ import annotations

import base64
import json
import ssl
import subprocess
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from exporter.options import ConfigError, Resolution, parse_command_line
from exporter.report.connection import Connection, ReportError
from exporter.report.prometheus_api import PrometheusClient
from exporter.report.request import build
from tests.support.requirements import require_tool

ANSWER = {"status": "success", "data": {"resultType": "vector", "result": [
    {"metric": {"namespace": "ml"}, "value": [1700000000, "2.5"]}]}}


class _Handler(BaseHTTPRequestHandler):
    seen: list[dict[str, str]]
    """Headers of each request, names in lower case."""

    def log_message(self, format: str, *args: object) -> None:
        pass

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", "0")))
        self.seen.append({k.lower(): v for k, v in self.headers.items()})
        body = json.dumps(ANSWER).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


class GuardedServer:
    def __init__(self, tmp: Path) -> None:
        openssl = require_tool("openssl", "openssl")
        self.cert, key = tmp / "server.pem", tmp / "server.key"
        subprocess.run([openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                        "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
                        "-keyout", str(key), "-out", str(self.cert)],
                       check=True, capture_output=True, timeout=60)
        self.seen: list[dict[str, str]] = []
        handler = type("Handler", (_Handler,), {"seen": self.seen})
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(str(self.cert), str(key))
        self._server.socket = context.wrap_socket(self._server.socket, server_side=True)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        self.url = f"https://127.0.0.1:{self._server.server_address[1]}"

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


@pytest.fixture
def server(tmp_path: Path) -> Iterator[GuardedServer]:
    running = GuardedServer(tmp_path)
    try:
        yield running
    finally:
        running.stop()


def connection_from(settings: Resolution) -> Connection:
    connection, _ = build(settings, 1_700_000_000.0, "flags")
    return connection


def _client(*argv: str, env: dict[str, str] | None = None) -> PrometheusClient:
    return PrometheusClient(connection_from(parse_command_line("report", argv, env or {})))


def test_bearer_token_file_tenant_header_and_ca_file(server: GuardedServer,
                                                     tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("s3cret\n")
    client = _client("--prometheus", server.url, "--bearer-token-file", str(token),
                     "--header", "X-Scope-OrgID: team-a", "--ca-file", str(server.cert))
    assert client.query("up", 1.0) == [({"namespace": "ml"}, [(1700000000.0, 2.5)])]
    sent = server.seen[-1]
    assert sent["authorization"] == "Bearer s3cret"
    assert sent["x-scope-orgid"] == "team-a"
    assert (client.stats.queries, client.stats.points) == (1, 1)


def test_basic_auth_from_the_environment(server: GuardedServer) -> None:
    client = _client("--prometheus", server.url, "--basic-auth-user", "alice",
                     "--insecure-skip-verify", env={"GPU_EXPORTER_PROMETHEUS_PASSWORD": "pw"})
    client.query("up", 1.0)
    assert server.seen[-1]["authorization"] == "Basic " + base64.b64encode(b"alice:pw").decode()


def test_an_unknown_certificate_is_refused_clearly(server: GuardedServer) -> None:
    with pytest.raises(ReportError, match=r"cannot reach Prometheus at .*CERTIFICATE_VERIFY"):
        _client("--prometheus", server.url).query("up", 1.0)
    assert server.seen == []


def test_conflicting_or_incomplete_credentials_are_refused() -> None:
    for argv, message in (
            (["--bearer-token", "t", "--basic-auth-user", "u"], "not both"),
            (["--basic-auth-password", "p"], "needs --basic-auth-user"),
            (["--key-file", "k.pem"], "--key-file needs --cert-file"),
            (["--header", "no-colon"], "expected 'NAME: VALUE'"),
            (["--bearer-token-file", "/nonexistent/token"], "--bearer-token-file")):
        with pytest.raises(ConfigError, match=message):
            connection_from(parse_command_line("report", ["--prometheus", "https://p", *argv],
                                               {}))

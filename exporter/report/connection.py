"""How to reach a Prometheus-compatible query API: URL, authentication, TLS, extra headers.

Built once from the options (secrets read from their files here), then handed to the HTTP
client, which only sends requests.
"""

from __future__ import annotations

import base64
import ssl
from dataclasses import dataclass, field
from pathlib import Path

from exporter.options import ConfigError, Resolution
from exporter.options import report_table as opt


class ReportError(Exception):
    """A failure the report explains in one message; nothing has been written."""


@dataclass(frozen=True, slots=True)
class Connection:
    url: str
    """Base URL; `/api/v1/...` is appended."""
    headers: tuple[tuple[str, str], ...] = ()
    """Sent with every request: authentication and the extra headers."""
    timeout_s: float = 120.0
    ca_file: Path | None = None
    cert_file: Path | None = None
    key_file: Path | None = None
    insecure_skip_verify: bool = False
    secret_headers: frozenset[str] = field(default_factory=frozenset)
    """Header names never shown in messages."""

    def ssl_context(self) -> ssl.SSLContext | None:
        if not self.url.startswith("https:"):
            return None
        context = ssl.create_default_context(cafile=str(self.ca_file) if self.ca_file else None)
        if self.insecure_skip_verify:
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        if self.cert_file is not None:
            context.load_cert_chain(str(self.cert_file),
                                    str(self.key_file) if self.key_file else None)
        return context


def _read_secret(path: Path, what: str) -> str:
    try:
        return path.read_text(encoding="utf-8").strip()
    except OSError as exc:
        raise ConfigError(f"{what} {path}: {exc.strerror}") from None


def parse_header(text: str) -> tuple[str, str]:
    name, sep, value = text.partition(":")
    if not sep or not name.strip():
        raise ConfigError(f"--header {text!r}: expected 'NAME: VALUE'")
    return name.strip(), value.strip()


def connection_from(settings: Resolution) -> Connection:
    """The connection the options describe; ConfigError names what is missing or wrong."""
    url = settings[opt.PROMETHEUS]
    if not url:
        raise ConfigError("--prometheus URL is required (or $GPU_EXPORTER_PROMETHEUS_URL)")
    if not url.startswith(("http://", "https://")):
        raise ConfigError(f"--prometheus {url!r}: expected an http:// or https:// URL")
    headers: list[tuple[str, str]] = []
    token = settings[opt.BEARER_TOKEN]
    token_file = settings[opt.BEARER_TOKEN_FILE]
    if token_file is not None:
        token = _read_secret(token_file, "--bearer-token-file")
    user = settings[opt.BASIC_AUTH_USER]
    password = settings[opt.BASIC_AUTH_PASSWORD]
    password_file = settings[opt.BASIC_AUTH_PASSWORD_FILE]
    if password_file is not None:
        password = _read_secret(password_file, "--basic-auth-password-file")
    if token and user:
        raise ConfigError("give a bearer token or basic authentication, not both")
    if token:
        headers.append(("Authorization", f"Bearer {token}"))
    elif user:
        pair = base64.b64encode(f"{user}:{password or ''}".encode()).decode()
        headers.append(("Authorization", f"Basic {pair}"))
    elif password:
        raise ConfigError("a basic authentication password needs --basic-auth-user")
    headers += [parse_header(h) for h in settings[opt.HEADERS]]
    if settings[opt.KEY_FILE] is not None and settings[opt.CERT_FILE] is None:
        raise ConfigError("--key-file needs --cert-file")
    return Connection(
        url=url.rstrip("/"), headers=tuple(headers), timeout_s=settings[opt.TIMEOUT],
        ca_file=settings[opt.CA_FILE], cert_file=settings[opt.CERT_FILE],
        key_file=settings[opt.KEY_FILE], insecure_skip_verify=settings[opt.INSECURE],
        secret_headers=frozenset({"Authorization"}),
    )

"""How to reach a Prometheus-compatible query API: URL, authentication, TLS, extra headers.

Built once from the options (`exporter.report.request`, which reads the secrets from their
files), then handed to the HTTP client, which only sends requests.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass, field
from pathlib import Path


class ReportError(Exception):
    """A failure the report explains in one message; nothing has been written."""


@dataclass(frozen=True, slots=True)
class Connection:
    """How to reach a Prometheus-compatible server: its base URL, the headers sent with every
    request (authentication among them), the timeout, and the TLS files and settings."""

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
        """Return the TLS context for an `https:` URL, with the CA, client certificate and
        verification settings asked for, or None for a plain `http:` URL."""
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

"""Requests to the API server over plain HTTP(S), with the credentials of
`exporter.k8s.apiclient` (in-cluster ServiceAccount token and CA, else a kubeconfig).

The writer needs a handful of verbs on a few paths (get, patch, create, list) with JSON
bodies and explicit patch types; speaking HTTP directly keeps that independent of the
generated client's version, whose method signatures and body types change between
releases. Each request has its own timeout and a fresh connection, so a dead API server
costs one refused connect, and a request never outlives its deadline.
"""

from __future__ import annotations

import http.client
import json
import ssl
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode, urlsplit

from exporter.k8s.apiclient import api_client

JSON = "application/json"
STRATEGIC_MERGE = "application/strategic-merge-patch+json"
MERGE = "application/merge-patch+json"


class ApiError(Exception):
    """A request that did not succeed: the status it got (None when there was no answer)."""

    def __init__(self, status: int | None, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True, slots=True)
class Credentials:
    """Where the API server is and how to authenticate to it."""

    host: str
    """`https://10.0.0.1:443` or `http://127.0.0.1:8080`."""
    auth_headers: Callable[[], Mapping[str, str]]
    """Return the authorization headers; called before each request, so a rotated token is
    picked up."""
    ssl_context: ssl.SSLContext | None


def credentials(kubeconfig: str | None = None) -> Credentials:
    """Return the API server's address and credentials as the pod watch finds them."""
    api = api_client(kubeconfig)
    configuration = api.configuration
    api.close()

    def auth_headers() -> dict[str, str]:
        headers: dict[str, str] = {}
        for setting in configuration.auth_settings().values():
            if setting.get("in") == "header" and setting.get("value"):
                headers[str(setting["key"])] = str(setting["value"])
        return headers

    context: ssl.SSLContext | None = None
    if str(configuration.host).startswith("https"):
        context = ssl.create_default_context(cafile=configuration.ssl_ca_cert)
        if configuration.cert_file:
            context.load_cert_chain(configuration.cert_file, configuration.key_file)
        if not configuration.verify_ssl:
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
    return Credentials(str(configuration.host), auth_headers, context)


class ApiHttp:
    """JSON requests to one API server; each raises `ApiError` unless answered 2xx."""

    def __init__(self, creds: Credentials, timeout_s: float = 10.0) -> None:
        self._creds = creds
        self._timeout_s = timeout_s
        parts = urlsplit(creds.host)
        self._https = parts.scheme == "https"
        self._netloc = parts.netloc
        self._prefix = parts.path.rstrip("/")

    def request(self, method: str, path: str, body: Any = None, *,
                content_type: str = JSON, query: Mapping[str, str] | None = None
                ) -> dict[str, Any]:
        """Return the decoded answer of `method path` (an empty dict for an empty body)."""
        headers = {"Accept": JSON, "User-Agent": "gpu-exporter"}
        headers.update(self._creds.auth_headers())
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = content_type
        url = self._prefix + path + (f"?{urlencode(query)}" if query else "")
        connection: http.client.HTTPConnection
        if self._https:
            connection = http.client.HTTPSConnection(self._netloc, timeout=self._timeout_s,
                                                     context=self._creds.ssl_context)
        else:
            connection = http.client.HTTPConnection(self._netloc, timeout=self._timeout_s)
        try:
            connection.request(method, url, body=data, headers=headers)
            response = connection.getresponse()
            raw = response.read()
        except (OSError, http.client.HTTPException) as exc:
            raise ApiError(None, f"{method} {path}: {exc}") from None
        finally:
            connection.close()
        try:
            answer = json.loads(raw) if raw else {}
        except ValueError:
            answer = {}
        if not 200 <= response.status < 300:
            detail = answer.get("message") if isinstance(answer, dict) else None
            raise ApiError(response.status,
                           f"{method} {path}: HTTP {response.status}"
                           f"{': ' + str(detail) if detail else ''}")
        return answer if isinstance(answer, dict) else {}

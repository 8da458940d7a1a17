"""Per-request rules: the web config's checks, present only when a file is given (the
connection limits and the header deadline are the listener's, per connection).

`/health` and `/ready` are the probes' endpoints: they say whether the process runs and
whether its data is fresh, nothing about the GPUs. A kubelet cannot present a client
certificate, and a password in a probe's `httpHeaders` would sit in clear text in the pod
spec, so these two paths need no credentials, are not rate-limited (a limited probe would
restart the pod), and are also answered over plain HTTP on a TLS port (the GPU Operator's
probes are plain `httpGet`). Every other path requires what the file configures.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from aiohttp import web

from exporter.web.app import Endpoint, Guard

if TYPE_CHECKING:  # the web config's code loads only when a file is given
    from exporter.web.reload import LiveWebConfig

PROBE_PATHS = frozenset({"/health", "/ready"})
USERS_RECHECK_S = 1.0
"""How often requests look for a changed file (new connections always do)."""


def enforce_web_config(live: LiveWebConfig) -> Guard:
    """Return the guard that applies the web config to each request before its endpoint runs:
    rate limit, TLS-only paths, basic authentication, and the configured response headers."""

    async def enforced(request: web.BaseRequest, handler: Endpoint) -> web.StreamResponse:
        applied = live.current(at_most_every_s=USERS_RECHECK_S)
        headers = applied.config.http.headers
        probe = request.path in PROBE_PATHS
        refusal: web.Response | None = None
        if not probe:
            if applied.bucket is not None and not applied.bucket.allow():
                refusal = web.Response(status=429, text="Too Many Requests\n")
            elif applied.tls is not None and not request.secure:
                refusal = web.Response(status=400, text="Client sent an HTTP request to an "
                                                        "HTTPS server.\n")
                refusal.force_close()
            elif applied.auth is not None and not await applied.auth.check(
                    request.headers.get("Authorization")):
                refusal = web.Response(status=401, text="Unauthorized\n",
                                       headers={"WWW-Authenticate":
                                                'Basic realm="gpu-exporter"'})
        if refusal is not None:
            return _with_headers(refusal, headers)
        try:
            response = await handler(request)
        except web.HTTPException as exc:  # 404, 405: the headers go on those too
            _with_headers(exc, headers)
            raise
        return _with_headers(response, headers)

    return enforced


def _with_headers(response: web.StreamResponse,
                  headers: tuple[tuple[str, str], ...]) -> web.StreamResponse:
    for name, value in headers:
        response.headers[name] = value
    return response

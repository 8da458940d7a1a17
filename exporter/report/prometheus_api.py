"""A small client for the Prometheus HTTP query API (`/api/v1/query`, `/api/v1/query_range`),
which Thanos and Mimir serve too.

Queries are POSTed as forms (long PromQL stays out of URLs and their length limits). Every
failure becomes a ReportError that says what happened and what to try; the client counts the
queries it sent and the points it pulled, for the benchmark and `--progress`.
"""

from __future__ import annotations

import json
import socket
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from exporter.promql import duration
from exporter.report.connection import Connection, ReportError

Labels = dict[str, str]
Points = list[tuple[float, float]]
Series = tuple[Labels, Points]

NETWORK_SLACK_S = 5.0
"""The socket waits this much longer than the server's own deadline, so a server-side
timeout arrives as the server's answer rather than as a cut connection."""


@dataclass
class QueryStats:
    """What the client has asked of the server so far: the queries sent and the points received,
    so the report can say what it cost."""

    queries: int = 0
    points: int = 0
    warnings: list[str] = field(default_factory=list)


def _shorten(expr: str, limit: int = 300) -> str:
    flat = " ".join(expr.split())
    return flat if len(flat) <= limit else flat[:limit] + " ..."


class PrometheusClient:
    """A client of the Prometheus HTTP query API (Thanos and Mimir serve it too), counting its
    queries and points and turning every failure into a ReportError that says what to do."""

    def __init__(self, connection: Connection,
                 on_query: Callable[[QueryStats], None] | None = None) -> None:
        self.connection = connection
        self.stats = QueryStats()
        self._on_query = on_query
        handlers: list[urllib.request.BaseHandler] = []
        context = connection.ssl_context()
        if context is not None:
            handlers.append(urllib.request.HTTPSHandler(context=context))
        self._opener = urllib.request.build_opener(*handlers)

    def query(self, expr: str, at: float) -> list[Series]:
        """Return the series an instant query of `expr` answers at Unix time `at`."""
        return self._call("query", {"query": expr, "time": f"{at:.3f}"}, expr)

    def query_range(self, expr: str, start: float, end: float, step_s: float) -> list[Series]:
        """Return a range query's series from `start` to `end` at one point every `step_s`
        seconds."""
        return self._call("query_range", {"query": expr, "start": f"{start:.3f}",
                                          "end": f"{end:.3f}", "step": duration(step_s)}, expr)

    def _call(self, endpoint: str, form: dict[str, str], expr: str) -> list[Series]:
        c = self.connection
        form = {**form, "timeout": duration(c.timeout_s)}
        request = urllib.request.Request(
            f"{c.url}/api/v1/{endpoint}", data=urllib.parse.urlencode(form).encode(),
            headers={"Content-Type": "application/x-www-form-urlencoded",
                     "Accept": "application/json", "User-Agent": "gpu-exporter-report",
                     **dict(c.headers)},
            method="POST")
        self.stats.queries += 1
        try:
            with self._opener.open(request, timeout=c.timeout_s + NETWORK_SLACK_S) as answer:
                body = answer.read()
        except urllib.error.HTTPError as exc:
            raise _http_error(exc, c, expr) from None
        except TimeoutError:
            raise _timeout(c) from None
        except urllib.error.URLError as exc:
            if isinstance(exc.reason, TimeoutError | socket.timeout):
                raise _timeout(c) from None
            raise ReportError(f"cannot reach Prometheus at {c.url}: {exc.reason}") from None
        except OSError as exc:
            raise ReportError(f"cannot reach Prometheus at {c.url}: {exc}") from None
        series = _parse(body, c.url)
        self.stats.points += sum(len(points) for _, points in series)
        if self._on_query is not None:
            self._on_query(self.stats)
        return series


def _timeout(c: Connection) -> ReportError:
    return ReportError(
        f"a query to {c.url} timed out after {duration(c.timeout_s)}: raise --timeout, shorten "
        "--chunk, or load the usage recording rules (alerts/gpu-exporter.usage-rules.yml) so the "
        "report reads their hourly series")


def _http_error(exc: urllib.error.HTTPError, c: Connection, expr: str) -> ReportError:
    try:
        payload = json.loads(exc.read())
        kind, message = payload.get("errorType", ""), payload.get("error", "")
    except (ValueError, OSError):
        kind, message = "", ""
    if kind == "timeout" or exc.code == 504:
        return _timeout(c)
    if exc.code in (401, 403):
        return ReportError(f"{c.url} refused the credentials (HTTP {exc.code}): check "
                           "--bearer-token(-file), --basic-auth-* or the tenant header")
    if exc.code in (400, 422):
        return ReportError(f"{c.url} rejected a query (HTTP {exc.code} {kind}): {message}\n"
                           f"  query: {_shorten(expr)}")
    detail = f": {message}" if message else ""
    return ReportError(f"{c.url} answered HTTP {exc.code} {exc.reason}{detail}")


def _parse(body: bytes, url: str) -> list[Series]:
    try:
        payload = json.loads(body)
        data: dict[str, Any] = payload["data"]
        kind, result = data["resultType"], data["result"]
    except (ValueError, KeyError, TypeError):
        raise ReportError(f"{url} did not answer like a Prometheus query API "
                          "(is the URL the server's base, e.g. http://prometheus:9090?)") from None
    if kind == "vector":
        return [(dict(r["metric"]), [(float(r["value"][0]), float(r["value"][1]))])
                for r in result]
    if kind == "matrix":
        return [(dict(r["metric"]), [(float(t), float(v)) for t, v in r.get("values", [])])
                for r in result]
    if kind == "scalar":
        return [({}, [(float(result[0]), float(result[1]))])]
    raise ReportError(f"{url} answered a {kind} where a vector or matrix was expected")

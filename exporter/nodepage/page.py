"""The node page (`/`) and its machine-readable form (`/api/node`), from the last poll only.

The publisher hands each poll to `NodePage.record` on the render thread: a reference and a
copy of the poll counters, nothing built. The first request after a poll builds the view
(`exporter.nodepage.build`), and its HTML or JSON once asked for; later requests
for the same poll reuse them and fill in only what changes by the second: the poll's age,
readiness, and when the page should reload. A poll nobody looks at costs nothing more, and
the page makes no NVML or kubelet call.

Both answers pass the same rules as `/metrics` (TLS, client certificates, basic auth, rate
limit: `exporter.web.middleware`), and under `--scope pod` both show only the pod's own
devices, as the snapshot's attribution says.
"""

from __future__ import annotations

import collections
import dataclasses
import json
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from aiohttp import web

from exporter.nodepage.build import node_view
from exporter.nodepage.render import PollHtml, WebRows, duration, esc, poll_html
from exporter.nodepage.style import CONTENT_SECURITY_POLICY
from exporter.nodepage.view import NodeView
from exporter.sampling.snapshot import Snapshot
from exporter.sampling.stats import PollStats
from exporter.series import Family

Readiness = tuple[bool, str]

NO_WEB_CONFIG: WebRows = (("web config", "none (--web.config.file not set)"),
                          ("TLS", "off (plain HTTP)"), ("basic auth", "off"))
"""What the page shows of the web config when `--web.config.file` is not set."""


class AppliedWebConfig(Protocol):
    """One reading of the web config files (`exporter.web.reload.Applied`), as the page
    shows it."""

    def rows(self) -> WebRows:
        """Return the settings in force as (setting, value) rows, without secrets."""
        ...


class WebConfigInForce(Protocol):
    """The web config the server applies now (`exporter.web.reload.LiveWebConfig`): a new
    `applied` each time its files are read again. A protocol, so that the page does not
    import the web layer that serves it."""

    @property
    def applied(self) -> AppliedWebConfig:
        """Return the last reading of the web config files."""
        ...

HTML_HEADERS = {
    "Content-Type": "text/html; charset=utf-8",
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "Cache-Control": "no-store",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}
JSON_HEADERS = {
    "Content-Type": "application/json; charset=utf-8",
    "Cache-Control": "no-store",
    "X-Content-Type-Options": "nosniff",
}


@dataclass(frozen=True, slots=True)
class _Poll:
    snapshot: Snapshot | None
    stats: PollStats
    families: list[Family]
    backend: str


@dataclass(slots=True)
class _Built:
    """One poll's view, and its HTML and JSON once asked for."""

    poll: _Poll | None
    applied: AppliedWebConfig | None
    view: NodeView
    rows: WebRows
    html: PollHtml | None = None
    json: str | None = None


_FIELDS: dict[type, tuple[str, ...]] = {}


def plain(value: object) -> object:
    """Return a view as JSON-able dicts, lists and scalars (`dataclasses.asdict` without its deep
    copies: the view is immutable)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        kind = type(value)
        names = _FIELDS.get(kind)
        if names is None:
            names = _FIELDS[kind] = tuple(f.name for f in dataclasses.fields(value))
        return {name: plain(getattr(value, name)) for name in names}
    if isinstance(value, tuple | list):
        return [plain(v) for v in value]
    return value


def _view_json(view: NodeView, web: WebRows) -> str:
    body = plain(view)
    assert isinstance(body, dict)
    body["web"] = dict(web)
    return json.dumps(body, separators=(",", ":"))


class NodePage:
    """Records each poll and answers `/` and `/api/node` from the last one recorded."""

    def __init__(self, web_config: WebConfigInForce | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        self.web_config = web_config
        self.backend = ""
        self._clock = clock
        self._poll: _Poll | None = None
        self._built: _Built | None = None

    def record(self, snapshot: Snapshot | None, stats: PollStats,
               families: list[Family]) -> None:
        """From the publisher, on the render thread: keep this poll (the counters copied,
        since the poll loop goes on changing them)."""
        counters = dataclasses.replace(stats, errors=collections.Counter(stats.errors),
                                       reloads=collections.Counter(stats.reloads))
        self._poll = _Poll(snapshot, counters, families, self.backend)

    def _current(self) -> _Built:
        poll = self._poll
        applied = self.web_config.applied if self.web_config is not None else None
        built = self._built
        if built is not None and built.poll is poll and built.applied is applied:
            return built
        if poll is None:
            view = node_view(None, PollStats(collect_interval_s=0.0), [], self.backend)
        else:
            view = node_view(poll.snapshot, poll.stats, poll.families, poll.backend)
        rows = NO_WEB_CONFIG if applied is None else applied.rows()
        built = _Built(poll, applied, view, rows)
        self._built = built
        return built

    def _refresh_s(self, view: NodeView, now: float) -> int:
        """Seconds until just after the next poll is due (the interval while none is)."""
        interval = view.exporter.interval_s or 15.0
        taken = view.exporter.taken_at
        due = interval if taken is None else taken + interval - now
        if due <= 0:  # late: the poll is stuck or failing; look again an interval on
            due = interval
        return max(1, min(math.ceil(due + 0.5), math.ceil(interval) + 1))

    def html(self, readiness: Readiness) -> web.Response:
        """Return the node page for the last poll, with its age, readiness and a reload timed
        for just after the next poll."""
        built = self._current()
        now = self._clock()
        ok, reason = readiness
        taken = built.view.exporter.taken_at
        age = f"last poll {duration(now - taken)} ago" if taken else "no poll yet"
        state = "ready" if ok else "not ready"
        status = (f'<p class="poll" id="poll-status" data-ready="{str(ok).lower()}">'
                  f'{age} · <span class="{"up" if ok else "down"}">{state}</span>: '
                  f"{esc(reason)}</p></header>")
        if not ok:
            status += (f'<div class="banner" role="alert" id="stale">The values below are '
                       f"from the last poll and may be out of date: {esc(reason)}</div>")
        refresh = f'<meta http-equiv="refresh" content="{self._refresh_s(built.view, now)}">'
        if built.html is None:
            built.html = poll_html(built.view, built.rows)
        text = built.html.head + refresh + built.html.top + status + built.html.body
        return web.Response(text=text, headers=HTML_HEADERS)

    def json(self, readiness: Readiness) -> web.Response:
        """Return `/api/node`: readiness and the poll's age, with the last poll's view under
        `node`."""
        built = self._current()
        ok, reason = readiness
        now = self._clock()
        taken = built.view.exporter.taken_at
        status = json.dumps({"ready": ok, "reason": reason, "served_at": now,
                             "poll_age_s": None if taken is None else now - taken})
        if built.json is None:
            built.json = _view_json(built.view, built.rows)
        return web.Response(text=status[:-1] + ',"node":' + built.json + "}",
                            headers=JSON_HEADERS)

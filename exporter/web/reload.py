"""The web config in force, re-read when its files change on disk.

cert-manager and Secret volumes replace certificates in place (a Secret volume swaps a
symlink, so the files' inode changes); the next connection must get the new ones without a
restart. Before each new connection (and at most once a second from requests, for users
and headers), the file and the files it names are stat'ed; when any changed, all are read
again and the result replaces the running configuration whole. A result that cannot be used
(a half-written file, a key that does not match its certificate) is counted and logged, and
the running configuration stays until the files change again.
"""

from __future__ import annotations

import logging
import os
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from exporter.web.auth import BasicAuth
from exporter.web.limits import TokenBucket
from exporter.web.tls import ServerTls, build_server_tls
from exporter.web.webconfig import WebConfig, WebConfigError, load_web_config

log = logging.getLogger(__name__)

FileState = tuple[int, int, int, int] | None
"""(device, inode, size, mtime in ns) of a file, None when it cannot be stat'ed."""


@dataclass(frozen=True, slots=True)
class Applied:
    """One reading of the files, ready to serve with."""

    config: WebConfig
    tls: ServerTls | None
    auth: BasicAuth | None
    bucket: TokenBucket | None

    @classmethod
    def build(cls, config: WebConfig) -> Applied:
        """Return the TLS context, authentication and rate limit that this web config asks for."""
        tls = build_server_tls(config.tls) if config.tls is not None else None
        auth = BasicAuth(config.users) if config.users else None
        bucket = (TokenBucket(config.rate_limit.interval_s, config.rate_limit.burst)
                  if config.rate_limit is not None else None)
        return cls(config, tls, auth, bucket)

    def describe(self) -> str:
        """Return a one-line description for the log and for `doctor`."""
        parts = []
        tls = self.config.tls
        if tls is None:
            parts.append("plain HTTP")
        else:
            parts.append(f"TLS {tls.min_version}-{tls.max_version}, client certificates: "
                         f"{tls.client_auth_type}")
            if tls.client_allowed_sans is not None:
                parts.append(f"{len(tls.client_allowed_sans)} allowed SANs")
        if self.config.users:
            parts.append(f"basic auth ({len(self.config.users)} users)")
        if self.config.http.headers:
            parts.append("headers " + ", ".join(n for n, _ in self.config.http.headers))
        if self.config.rate_limit is not None:
            rate = self.config.rate_limit
            parts.append(f"rate limit 1 per {rate.interval_s:g}s, burst {rate.burst}")
        return "; ".join(parts)

    def rows(self) -> list[tuple[str, str]]:
        """Return the configuration as (setting, value) rows for the node page, without secrets:
        no password hashes, no user names, no inline keys or certificates (only that they
        are inline)."""
        config = self.config
        rows = [("web config", str(config.path))]
        tls = config.tls
        if tls is None:
            rows.append(("TLS", "off (plain HTTP)"))
        else:
            rows += [
                ("TLS", f"{tls.min_version} to {tls.max_version}"),
                ("certificate", str(tls.cert_file) if tls.cert_file else "inline"),
                ("client certificates", tls.client_auth_type),
            ]
            if tls.client_ca_file is not None or tls.client_ca is not None:
                rows.append(("client CA", str(tls.client_ca_file) if tls.client_ca_file
                             else "inline"))
            if tls.client_allowed_sans is not None:
                rows.append(("allowed client SANs", ", ".join(tls.client_allowed_sans) or
                             "none (no certificate matches)"))
        users = len(config.users)
        rows.append(("basic auth", f"on ({users} user{'s' if users != 1 else ''})" if users
                     else "off"))
        if config.rate_limit is not None:
            rows.append(("rate limit", f"1 per {config.rate_limit.interval_s:g} s, burst "
                                       f"{config.rate_limit.burst}"))
        for name, value in config.http.headers:
            rows.append((f"header {name}", value))
        return rows


def _file_state(path: Path) -> FileState:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


def _states(paths: Iterable[Path]) -> dict[Path, FileState]:
    return {p: _file_state(p) for p in paths}


class LiveWebConfig:
    """What the server applies now; `current()` re-reads first when a file changed."""

    def __init__(self, applied: Applied, clock: Callable[[], float] = time.monotonic) -> None:
        self._applied = applied
        self._clock = clock
        self._watched = _states(applied.config.files())
        self._checked_at = clock()
        self.reloads: Counter[str] = Counter({"success": 0, "failure": 0})

    @classmethod
    def load(cls, path: Path) -> LiveWebConfig:
        """Load the web config at start-up; raise WebConfigError (naming the file and key) when
        it cannot be used."""
        applied = Applied.build(load_web_config(path))
        _log_warnings(applied)
        log.info("web config %s: %s", path, applied.describe())
        return cls(applied)

    @property
    def applied(self) -> Applied:
        """Return the configuration as last loaded, without looking at the files."""
        return self._applied

    def current(self, at_most_every_s: float = 0.0) -> Applied:
        """Return the configuration that a new connection or request gets, re-reading the files
        first when a watched file changed (checked no more often than every `at_most_every_s`)."""
        now = self._clock()
        if at_most_every_s and now - self._checked_at < at_most_every_s:
            return self._applied
        self._checked_at = now
        seen = _states(self._watched)
        if seen != self._watched:
            self._reload(seen)
        return self._applied

    def _reload(self, seen: dict[Path, FileState]) -> None:
        path = self._applied.config.path
        # Remember what was seen first: a change while reading is caught by the next look.
        self._watched = seen
        try:
            config = load_web_config(path)
            # The files the new text names are watched from now on, even if unusable yet.
            self._watched = {**seen, **_states(config.files())}
            if (config.tls is None) != (self._applied.config.tls is None):
                raise WebConfigError(f"web config {path}: tls_server_config: turning TLS on "
                                     f"or off needs a restart")
            applied = Applied.build(config)
        except WebConfigError as exc:
            self.reloads["failure"] += 1
            log.error("web config reload failed, keeping the running configuration: %s", exc)
            return
        self._watched = {p: self._watched[p] for p in config.files()}
        self._applied = applied
        self.reloads["success"] += 1
        _log_warnings(applied)
        log.info("web config %s reloaded: %s", path, applied.describe())


def _log_warnings(applied: Applied) -> None:
    """Log what the file asks for that is not done as asked, each time it is loaded."""
    tls = applied.tls.warnings if applied.tls is not None else ()
    for warning in (*applied.config.warnings(), *tls):
        log.warning("web config %s: %s", applied.config.path, warning)

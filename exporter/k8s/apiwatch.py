"""Reading one kind of API-server object and following it, in a background thread.

The loop reads the current state once (a list, or a get), then watches from the
resourceVersion that read returned, and reads again after a watch fails or its history
expired (410 Gone). A watch the ServiceAccount may not make (403 on the watch after the read
succeeded: RBAC granting get/list without watch, as the GPU Operator grants on ConfigMaps) is
replaced by reading again every `poll_s`. Readers on other threads only see what the
subclass publishes; nothing here runs on the event loop that serves scrapes.

The `kubernetes` package is imported inside the thread (the client comes from
`exporter.k8s.apiclient`, which imports it lazily), so neither the import (most of a second)
nor reading credentials delays the caller.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Mapping
from typing import Any

from exporter.k8s.apiclient import api_client

log = logging.getLogger(__name__)

WatchCall = tuple[Callable[..., Any], dict[str, Any]]
"""A list function of the generated client and its arguments; `watch=True` is added."""


class WatchEventError(Exception):
    """The watch stream carried an ERROR event (its object is a Status)."""

    def __init__(self, status: Mapping[str, Any]) -> None:
        super().__init__(str(status.get("message") or status))
        code = status.get("code")
        self.status = code if isinstance(code, int) else None


class WatchLoop:
    """Read one kind of API-server object and follow it in a background thread; subclasses
    implement `_setup`, `_read`, `_watch_call` and `_apply`."""

    def __init__(
        self,
        what: str,
        *,
        api_factory: Callable[[], Any] = api_client,
        retry_s: float = 5.0,
        poll_s: float = 60.0,
        watch_timeout_s: int = 300,
    ) -> None:
        self.what = what
        """What is watched, for log lines."""
        self._api_factory = api_factory
        self._retry_s = retry_s
        self._poll_s = poll_s
        self._watch_timeout_s = watch_timeout_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._api: Any = None
        self._watch: Any = None
        self.synced = threading.Event()
        """Set after the first successful read."""
        self.attempted = threading.Event()
        """Set after the first read, successful or not (startup waits on it)."""
        self.up = False
        self.errors = 0
        self.polling = False
        """True once the watch was refused: the state is read again every `poll_s`."""

    # -- what a subclass provides ----------------------------------------------------------

    def _setup(self, api: Any) -> None:
        """Build the typed API objects from the client (runs in the thread)."""
        raise NotImplementedError

    def _read(self) -> str | None:
        """Read and publish the whole current state; the resourceVersion to watch from."""
        raise NotImplementedError

    def _watch_call(self) -> WatchCall:
        raise NotImplementedError

    def _apply(self, kind: str, obj: Mapping[str, Any]) -> None:
        """Apply one ADDED, MODIFIED or DELETED event."""
        raise NotImplementedError

    def _failed(self, exc: Exception) -> None:
        """Handle a failed read or watch (already counted); the state published so far is kept."""

    # -- life cycle ------------------------------------------------------------------------

    def start(self) -> None:
        """Start the background thread that lists and then watches the objects (once only)."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name=f"watch-{self.what}",
                                            daemon=True)
            self._thread.start()

    def close(self) -> None:
        """Stop the watch, ending a read that is waiting for the next event."""
        self._stop.set()
        watch = self._watch
        if watch is not None:
            watch.stop()
            # stop() takes effect at the next event; closing the response ends a read that
            # waits for one.
            response = getattr(watch, "_resp", None)
            if response is not None:
                with contextlib.suppress(Exception):
                    getattr(response, "shutdown", response.close)()
        if self._thread is not None:
            self._thread.join(timeout=5)
        if self._api is not None:
            with contextlib.suppress(Exception):
                self._api.close()

    # -- the loop --------------------------------------------------------------------------

    def _run(self) -> None:
        try:
            self._api = self._api_factory()
            self._setup(self._api)
        except Exception as exc:
            self.errors += 1
            log.error("%s: no API server client (%s); run in a pod with a ServiceAccount "
                      "token or set KUBECONFIG", self.what, exc)
            self.attempted.set()
            return
        resource_version: str | None = None
        have_state = False
        while not self._stop.is_set():
            try:
                if not have_state:
                    resource_version = self._read()
                    have_state = True
                    if not self.up and self.errors:
                        log.info("%s: API server answers again", self.what)
                    self.up = True
                    self.synced.set()
                    self.attempted.set()
                if self.polling:
                    self._stop.wait(self._poll_s)
                    have_state = False
                    continue
                resource_version = self._stream(resource_version)
            except Exception as exc:
                if self._stop.is_set():
                    break
                status = getattr(exc, "status", None)
                if have_state and status == 403 and not self.polling:
                    log.warning("%s: the API server refused the watch (403); reading again "
                                "every %.0fs instead (grant the 'watch' verb to follow "
                                "changes at once)", self.what, self._poll_s)
                    self.polling = True
                    continue
                self.errors += 1
                if self.up or self.errors == 1:
                    log.warning("%s: %s failed (%s); retrying every %.0fs", self.what,
                                "watch" if have_state else "read", exc, self._retry_s)
                self.up = False
                self.attempted.set()
                self._failed(exc)
                have_state = False
                if status != 410:  # 410 Gone: the history expired, an ordinary re-read
                    self._stop.wait(self._retry_s)

    def _stream(self, resource_version: str | None) -> str | None:
        from kubernetes import watch as k8s_watch

        func, kwargs = self._watch_call()
        if resource_version:
            kwargs["resource_version"] = resource_version
        self._watch = k8s_watch.Watch()  # type: ignore[no-untyped-call]
        for event in self._watch.stream(
            func,
            **kwargs,
            timeout_seconds=self._watch_timeout_s,
            allow_watch_bookmarks=True,
            deserialize=False,
            _request_timeout=self._watch_timeout_s + 30,
        ):
            if self._stop.is_set():
                break
            kind = str(event.get("type") or "")
            obj = event.get("object") or {}
            if kind == "ERROR":
                raise WatchEventError(obj)
            version = (obj.get("metadata") or {}).get("resourceVersion")
            if kind in ("ADDED", "MODIFIED", "DELETED"):
                self._apply(kind, obj)
            if version:
                resource_version = str(version)
        return resource_version

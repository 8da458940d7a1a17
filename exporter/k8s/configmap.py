"""The collectors CSV from a ConfigMap (dcgm-exporter's `-m/--configmap-data <ns>:<name>`).

The ConfigMap's key `metrics` holds the CSV. It is read through the API server and followed
(watch), and written to a private file; the sampler is handed a private path that points
(a symlink) either at that file or at the collectors file (`-f`), and its file-change reload
applies every change with its usual guarantees: a bad CSV keeps the running configuration
and is counted in `gpu_exporter_config_reloads_total{result="failure"}`.

The collectors file is used while the ConfigMap cannot be read: before the first answer
(bounded wait at startup), when the ConfigMap or its `metrics` key does not exist, when the
API server refuses or cannot be reached at startup. Each switch is logged once with the
reason. Later failures to reach the API server keep whatever is in use. At startup a CSV in
the ConfigMap that does not parse falls back to the file too (dcgm-exporter exits instead,
as it does whenever it cannot read the ConfigMap), so that a bad edit cannot keep a
restarted exporter down; the next change of the ConfigMap is tried again. (dcgm-exporter
reads the ConfigMap at startup and at each reload, and never follows it.)

RBAC, in the ConfigMap's namespace: `get` (the read) and `watch` (to follow changes at once;
without it, the GPU Operator's Role grants get/list only, the ConfigMap is read again every
minute):

    rules:
      - apiGroups: [""]
        resources: ["configmaps"]
        verbs: ["get", "watch"]
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from exporter.fields.csv import Collectors, CollectorsError, load_collectors, require_servable
from exporter.k8s.apiclient import api_client
from exporter.k8s.apiwatch import WatchCall, WatchLoop

log = logging.getLogger(__name__)

METRICS_KEY = "metrics"
FIRST_READ_TIMEOUT_S = 10.0
"""How long startup waits for the first answer before serving the collectors file."""

CONFIGMAP = "configmap"
FILE = "file"


def _private_dir() -> Path | None:
    """Return a new directory that only this process writes: in the temporary directory, or in
    /dev/shm when the root filesystem (and so /tmp) is read-only; None when neither can be
    written."""
    for parent in (None, "/dev/shm"):
        with contextlib.suppress(OSError):
            return Path(tempfile.mkdtemp(prefix="gpu-exporter-collectors-", dir=parent))
    return None


class ConfigMapCollectors(WatchLoop):
    """Follow the ConfigMap that holds the collectors CSV and point the sampler's collectors path at
    its contents, or at the collectors file while the ConfigMap cannot be read."""

    def __init__(
        self,
        namespace: str,
        name: str,
        fallback: Path,
        directory: Path,
        *,
        api_factory: Callable[[], Any] = api_client,
        retry_s: float = 30.0,
        poll_s: float = 60.0,
        watch_timeout_s: int = 300,
    ) -> None:
        super().__init__(f"configmap-{namespace}-{name}", api_factory=api_factory,
                         retry_s=retry_s, poll_s=poll_s, watch_timeout_s=watch_timeout_s)
        self.namespace = namespace
        self.name = name
        self.fallback = Path(os.path.abspath(fallback))  # the symlink's target
        self.directory = directory
        self.path = directory / "collectors.csv"
        """What the sampler reads and watches: a symlink to the file in use."""
        self._content = directory / "configmap.csv"
        self._lock = threading.Lock()
        self._core: Any = None
        self._text: str | None = None
        """The ConfigMap's CSV last written to `_content`."""
        self._rejected: str | None = None
        """A CSV refused at startup: not used again until the ConfigMap changes."""
        self._last_mtime_ns = 0
        self.source = ""
        """CONFIGMAP or FILE once decided; the file is linked from the start."""
        self._link(fallback)

    @classmethod
    def open(cls, ref: tuple[str, str], fallback: Path, **options: Any
             ) -> ConfigMapCollectors | None:
        """Return a follower of the ConfigMap, or None (logged) when no private directory can be
        made, in which case the collectors file is used."""
        directory = _private_dir()
        if directory is None:
            log.error("ConfigMap %s/%s: no writable directory for its CSV (mount an emptyDir "
                      "on /tmp); using %s", ref[0], ref[1], fallback)
            return None
        return cls(ref[0], ref[1], fallback, directory, **options)

    def load_initial(self, timeout_s: float = FIRST_READ_TIMEOUT_S) -> Collectors:
        """Start following the ConfigMap, wait (bounded) for its first answer and load what
        is then in use (a CSV that enables no field is not usable). Raises CollectorsError
        only when the collectors file is bad."""
        self.start()
        answered = self.attempted.wait(timeout_s)
        if self.source != CONFIGMAP:
            self._use_file("it could not be read" if answered else
                           f"no answer from the API server within {timeout_s:.0f}s")
        try:
            return require_servable(load_collectors(self.path))
        except CollectorsError as exc:
            with self._lock:
                if self.source != CONFIGMAP:
                    raise
                self._rejected = self._text
                self._point_at(FILE, f"its CSV is not usable ({exc})")
            return load_collectors(self.path)

    def close(self) -> None:
        """Stop following the ConfigMap and remove the private directory."""
        super().close()
        shutil.rmtree(self.directory, ignore_errors=True)

    # -- the watch -------------------------------------------------------------------------

    def _setup(self, api: Any) -> None:
        from kubernetes import client as k8s_client

        self._core = k8s_client.CoreV1Api(api)

    def _read(self) -> str | None:
        try:
            response = self._core.read_namespaced_config_map(
                self.name, self.namespace, _preload_content=False, _request_timeout=30)
        except Exception as exc:
            if getattr(exc, "status", None) != 404:
                raise
            self._use_file("it does not exist")
            return None  # The watch then starts at "now", and so reports its creation.
        obj = json.loads(response.data)
        self._use(obj)
        return str((obj.get("metadata") or {}).get("resourceVersion") or "") or None

    def _watch_call(self) -> WatchCall:
        return self._core.list_namespaced_config_map, {
            "namespace": self.namespace, "field_selector": f"metadata.name={self.name}"}

    def _apply(self, kind: str, obj: Mapping[str, Any]) -> None:
        if kind == "DELETED":
            self._use_file("it was deleted")
        else:
            self._use(obj)

    def _failed(self, exc: Exception) -> None:
        # Until the ConfigMap has been read once, the file is used; a later failure keeps
        # whatever is in use.
        if not self.synced.is_set():
            self._use_file(f"it could not be read ({exc})")

    # -- switching -------------------------------------------------------------------------

    def _use(self, obj: Mapping[str, Any]) -> None:
        data = obj.get("data") or {}
        text = data.get(METRICS_KEY)
        if not isinstance(text, str):
            self._use_file(f"it has no '{METRICS_KEY}' key")
            return
        with self._lock:
            if text == self._rejected or (text == self._text and self.source == CONFIGMAP):
                return  # The text is unchanged (a re-read while polling), so nothing reloads.
            self._rejected = None
            self._write(text)
            self._point_at(CONFIGMAP, "")

    def _use_file(self, why: str) -> None:
        with self._lock:
            self._text = None
            self._point_at(FILE, why)

    def _write(self, text: str) -> None:
        temporary = self._content.with_suffix(".tmp")
        temporary.write_text(text)
        # The sampler reloads when the modification time changes: make it differ from the
        # previous version's even when both land within one coarse clock tick.
        mtime_ns = max(time.time_ns(), self._last_mtime_ns + 1000)
        os.utime(temporary, ns=(mtime_ns, mtime_ns))
        os.replace(temporary, self._content)
        self._last_mtime_ns = mtime_ns
        self._text = text

    def _link(self, target: Path) -> None:
        link = self.path.with_suffix(".link")
        with contextlib.suppress(FileNotFoundError):
            link.unlink()
        link.symlink_to(target)
        os.replace(link, self.path)  # Atomic, so the sampler always finds a file.

    def _point_at(self, source: str, why: str) -> None:
        self._link(self._content if source == CONFIGMAP else self.fallback)
        if source == self.source:
            return
        if source == CONFIGMAP:
            log.info("collectors from ConfigMap %s/%s (key '%s')", self.namespace, self.name,
                     METRICS_KEY)
        else:
            log.warning("ConfigMap %s/%s: %s; using the collectors file %s", self.namespace,
                        self.name, why, self.fallback)
        self.source = source

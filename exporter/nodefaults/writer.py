"""The node fault writer: a thread that makes the node's condition, Events and taint match
the faults of the latest published snapshot.

The render thread hands each snapshot over with `offer` (a reference swap and an append,
never a request), so `/metrics` is never slowed by the API server. The thread writes only
what changed. A request that fails (no answer, 5xx, 403) is counted, and everything still
to do is tried again after a backoff that doubles up to a cap; a 409 Conflict (the node was
written since it was read) is read again and retried at once. Nothing is written before the
node has been read once: the condition it holds is the durable record of the faults held
before a restart, handed to `restore` before it can be overwritten.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from exporter.fields.faults import GpuFault
from exporter.nodefaults.apihttp import STRATEGIC_MERGE, ApiError, ApiHttp
from exporter.nodefaults.condition import condition_patch, recorded_faults, rfc3339
from exporter.nodefaults.config import NodeFaultsConfig
from exporter.nodefaults.events import (
    EventCache,
    PendingEvent,
    event_body,
    events_for,
    new_event_name,
)
from exporter.nodefaults.taints import breaker_holds, taint_patch, taint_value, tainted_share
from exporter.sampling.snapshot import Snapshot
from exporter.selfmetrics import NODE_FAULT_API_UP, NODE_FAULT_WRITES
from exporter.series import Family

log = logging.getLogger(__name__)

CONFLICT_RETRIES = 5
"""409s in a row before a write counts as failed (and waits for the backoff)."""
RESYNC_S = 300.0
"""Unchanged faults are written again (if the node differs) this often: a condition or
taint changed by hand or by another tool is put back."""
PENDING_EVENTS = 256
"""Events waiting while the API server is away; the oldest go first beyond this."""
_RESULTS = {"condition": ("success", "failure", "conflict", "dry_run"),
            "event": ("success", "failure", "dry_run"),
            "taint": ("success", "failure", "conflict", "dry_run", "held_back")}

Restore = Callable[[tuple[GpuFault, ...]], None]


def holders_by_gpu(snapshot: Snapshot) -> dict[int, tuple[tuple[str, str], ...]]:
    """Return, per GPU index, the (namespace, pod) of every pod holding it or one of its MIG
    devices, from the snapshot's attribution: its holders are an owner, a virtual GPU's
    sharers, and the pods taking turns on a time-sliced GPU alike."""
    found: dict[int, set[tuple[str, str]]] = {}
    for (gpu, _), pods in snapshot.attribution.holders.items():
        found.setdefault(gpu, set()).update(pods)
    return {gpu: tuple(sorted(pods)) for gpu, pods in found.items()}


class _Restored(Exception):
    """Faults were just restored: nothing is written until a snapshot holds them."""


class NodeFaultWriter:
    """Writes this node's fault state; `offer` from any thread, `families` for the scrape."""

    def __init__(self, config: NodeFaultsConfig, http: Callable[[], ApiHttp], *,
                 backoff_s: tuple[float, float] = (0.5, 30.0),
                 clock: Callable[[], float] = time.time) -> None:
        if not config.node_name:
            raise ValueError("the node fault writer needs NODE_NAME (downward API "
                             "spec.nodeName)")
        self.config = config
        self.node_name = config.node_name
        self._http_factory = http
        self._http: ApiHttp | None = None
        self._restore: Restore | None = None
        self._restore_lock = threading.Lock()
        self._restored = not config.node_condition
        self._hold_until: float | None = None
        """After faults were restored: no write until a snapshot taken since then, which
        holds them (an older one would overwrite the record with less)."""
        self._taken_at = 0.0
        self._initial_s, self._cap_s = backoff_s
        self._clock = clock
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._offered: Snapshot | None = None
        self._faults: tuple[GpuFault, ...] = ()
        self._events: deque[PendingEvent] = deque(maxlen=PENDING_EVENTS)
        self._event_cache = EventCache()
        self._synced_key: tuple[GpuFault, ...] | None = None
        self._resync_at = 0.0
        self._breaker_logged = False
        self.counts = {(kind, result): 0 for kind in self._kinds() for result in _RESULTS[kind]}
        self.api_up = True
        self.idle = threading.Event()
        """Set while nothing is left to write (tests and shutdown wait on it)."""

    def _kinds(self) -> list[str]:
        c = self.config
        return [k for k, on in (("condition", c.node_condition), ("event", c.events),
                                ("taint", c.taint)) if on]

    # -- the render thread's side ---------------------------------------------------------

    def offer(self, snapshot: Snapshot | None) -> None:
        """Hand over a published snapshot (cheap: no request is made here). The same snapshot
        published again (a poll that failed republishes the last one) adds nothing."""
        if snapshot is None or snapshot is self._offered:
            return
        self._offered = snapshot
        with self._lock:
            self._faults = snapshot.faults
            self._taken_at = snapshot.taken_at
            if self.config.events and snapshot.fault_events:
                holders = holders_by_gpu(snapshot)
                for fault in snapshot.fault_events:
                    self._events.extend(events_for(fault, self.node_name,
                                                   holders.get(fault.gpu, ())))
        self.idle.clear()
        self._wake.set()

    def families(self) -> list[Family]:
        """Return the writer's self-metrics: writes by kind and result, and API server up."""
        return [
            NODE_FAULT_WRITES.family(NODE_FAULT_WRITES.sample(float(n), kind=k, result=r)
                                     for (k, r), n in list(self.counts.items())),
            NODE_FAULT_API_UP.single(1.0 if self.api_up else 0.0),
        ]

    # -- life cycle -----------------------------------------------------------------------

    def start(self) -> None:
        """Start the thread that writes to the API server (once; a second call does nothing)."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="node-faults", daemon=True)
            self._thread.start()

    def close(self, timeout_s: float = 1.0) -> None:
        """Stop the thread; a request under way is left to its own timeout (daemon)."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout_s)

    def restore_to(self, restore: Restore) -> None:
        """Hand the faults the node's condition records to `restore` (the sampler's
        `restore_faults`) once, when the node is first read; nothing is written before."""
        self._restore = restore

    def restore_now(self) -> int:
        """Read the node and restore what its condition records, unless done already; return
        how many faults were restored (ApiError when the node cannot be read). serve calls it
        before the first poll, so that poll already holds them."""
        return self._restore_from(self._api().request("GET", self._node_path(status=True)))

    def _restore_from(self, node: dict[str, Any]) -> int:
        with self._restore_lock:
            if self._restored or self._restore is None or not self.config.node_condition:
                self._restored = True
                return 0
            faults = recorded_faults(node, self.config.condition_type)
            if faults:
                log.info("node faults: %d fault(s) restored from the node's %s condition",
                         len(faults), self.config.condition_type)
                self._hold_until = self._clock()
                self._restore(faults)
            self._restored = True
            return len(faults)

    # -- the thread -----------------------------------------------------------------------

    def _api(self) -> ApiHttp:
        if self._http is None:
            try:
                self._http = self._http_factory()
            except Exception as exc:  # no in-cluster token, no kubeconfig, a bad one
                raise ApiError(None, f"no API server credentials ({exc}); run in a pod with "
                                     "a ServiceAccount token or set KUBECONFIG") from None
        return self._http

    def _node_path(self, status: bool = False) -> str:
        return f"/api/v1/nodes/{self.node_name}" + ("/status" if status else "")

    def _run(self) -> None:
        delay = self._initial_s
        retry_in: float | None = None
        backoff_until = 0.0
        while not self._stop.is_set():
            self._wake.wait(retry_in)
            # After a failure a new snapshot does not cut the backoff short: it is taken up
            # when the backoff ends.
            if self._stop.wait(max(0.0, backoff_until - time.monotonic())):
                break
            self._wake.clear()
            try:
                retry_in = self._sync()
                if not self.api_up:
                    log.info("node faults: the API server answers again; writes resumed")
                self.api_up = True
                delay = self._initial_s
                backoff_until = 0.0
            except _Restored:
                retry_in = None
                continue
            except ApiError as exc:
                if self.api_up:
                    log.warning("node faults: %s; retrying with backoff up to %.0fs", exc,
                                self._cap_s)
                self.api_up = False
                retry_in = 0.0
                backoff_until = time.monotonic() + delay
                delay = min(delay * 2, self._cap_s)
            except Exception:
                # A bug must not end the thread: the next snapshot tries again.
                log.exception("node faults: unexpected error")
                retry_in = 0.0
                backoff_until = time.monotonic() + self._cap_s
            if retry_in is None:
                self.idle.set()

    def _sync(self) -> float | None:
        """Make every write still due; return when to look again without a new snapshot
        (the breaker's recheck), or None."""
        with self._lock:
            faults, taken_at = self._faults, self._taken_at
        if self._hold_until is not None and taken_at < self._hold_until and self._restored:
            return None  # the next snapshot holds the restored faults: write from it
        key = faults  # sorted and frozen: equal when the same faults are held
        due = key != self._synced_key or time.monotonic() >= self._resync_at
        recheck: float | None = None
        failed: list[ApiError] = []
        # Each kind is tried even when another failed: a refused taint must not keep the
        # condition or the Events from being written.
        if (due and (self.config.node_condition or self.config.taint)) or not self._restored:
            if self.config.node_condition:
                try:
                    node = self._read_node()
                    self._patch_node("condition", node, lambda n: condition_patch(
                        n, self.config.condition_type, faults, self._clock()), status=True)
                except ApiError as exc:
                    failed.append(exc)
            if self.config.taint:
                try:
                    recheck = self._write_taint(faults)
                except ApiError as exc:
                    failed.append(exc)
            if not failed:
                self._synced_key = key
                self._resync_at = time.monotonic() + (recheck or RESYNC_S)
        try:
            self._send_events()
        except ApiError as exc:
            failed.append(exc)
        if failed:
            raise failed[0]
        return recheck

    def _get(self, kind: str, path: str, query: dict[str, str] | None = None
             ) -> dict[str, Any]:
        """Return a read's answer; a failed read counts as a failed write of `kind`."""
        try:
            return self._api().request("GET", path, query=query)
        except ApiError:
            self._count(kind, "failure")
            raise

    def _read_node(self) -> dict[str, Any]:
        node = self._get("condition", self._node_path(status=True))
        if not self._restored and self._restore_from(node):
            raise _Restored
        return node

    def _count(self, kind: str, result: str) -> None:
        self.counts[(kind, result)] = self.counts.get((kind, result), 0) + 1

    def _dry(self, kind: str, method: str, path: str, body: Any) -> None:
        log.info("node faults: dry run, would %s %s %s", method, path,
                 json.dumps(body, sort_keys=True, separators=(",", ":")))
        self._count(kind, "dry_run")

    def _patch_node(self, kind: str, node: dict[str, Any], build: Callable[[dict[str, Any]],
                    dict[str, Any] | None], *, status: bool) -> None:
        """Patch the node with what `build` makes of it, reading it again after a 409."""
        path = self._node_path(status)
        for _ in range(CONFLICT_RETRIES):
            body = build(node)
            if body is None:
                return
            if self.config.dry_run:
                self._dry(kind, "PATCH", path, body)
                return
            try:
                self._api().request("PATCH", path, body, content_type=STRATEGIC_MERGE)
            except ApiError as exc:
                if exc.status != 409:
                    self._count(kind, "failure")
                    raise
                self._count(kind, "conflict")
                node = self._get(kind, path)
                continue
            self._count(kind, "success")
            return
        self._count(kind, "failure")
        raise ApiError(409, f"PATCH {path}: still conflicting after {CONFLICT_RETRIES} reads")

    def _write_taint(self, faults: tuple[GpuFault, ...]) -> float | None:
        value = taint_value(faults)
        key = self.config.taint_key
        node = self._get("taint", self._node_path())
        if value is not None and taint_patch(node, key, value) is not None:
            listed = self._get("taint", "/api/v1/nodes",
                               query={"labelSelector": self.config.node_selector})
            tainted, total = tainted_share(listed.get("items") or [], key)
            if breaker_holds(tainted, total, self.config.taint_max_share):
                self._count("taint", "held_back")
                if not self._breaker_logged:
                    log.warning("node faults: taint %s held back: %d of %d GPU nodes (%s) "
                                "carry it already, at or over the limit of %.0f%%; the "
                                "condition still says the fault", key, tainted, total,
                                self.config.node_selector, 100 * self.config.taint_max_share)
                    self._breaker_logged = True
                return self._cap_s
        self._breaker_logged = False
        self._patch_node("taint", node, lambda n: taint_patch(n, key, value), status=False)
        return None

    def _send_events(self) -> None:
        while True:
            with self._lock:
                if not self._events:
                    return
                event = self._events[0]
            self._send_event(event)
            with self._lock:
                if self._events and self._events[0] is event:
                    self._events.popleft()

    def _send_event(self, event: PendingEvent) -> None:
        namespace = event.target.event_namespace
        now = self._clock()
        seen = self._event_cache.seen(event)
        if seen is not None:
            name, count = seen
            path = f"/api/v1/namespaces/{namespace}/events/{name}"
            body: dict[str, Any] = {"count": count + 1, "lastTimestamp": rfc3339(now)}
            if self.config.dry_run:
                self._dry("event", "PATCH", path, body)
                self._event_cache.made(event, name, count + 1)
                return
            try:
                self._api().request("PATCH", path, body, content_type=STRATEGIC_MERGE)
            except ApiError as exc:
                if exc.status != 404:
                    self._count("event", "failure")
                    raise
                self._event_cache.forget(event)  # expired on the server: make it anew
            else:
                self._event_cache.made(event, name, count + 1)
                self._count("event", "success")
                return
        name = new_event_name(event.target)
        path = f"/api/v1/namespaces/{namespace}/events"
        body = event_body(event, name, self.node_name, now)
        if self.config.dry_run:
            self._dry("event", "POST", path, body)
        else:
            try:
                self._api().request("POST", path, body)
            except ApiError:
                self._count("event", "failure")
                raise
            self._count("event", "success")
        self._event_cache.made(event, name, 1)

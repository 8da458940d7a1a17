"""The poll loop: read devices in a worker thread, attribute, render once, swap atomically.

The scrape path only ever reads `Sampler.current`, a reference replaced in one assignment on
the event loop, so a scrape never sees a half-built body and never waits on NVML or the
kubelet.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Generic, Protocol, TypeVar

from exporter.devices.model import Inventory, Readings
from exporter.fields.catalog import FieldSpec
from exporter.fields.csv import Collectors, CollectorsError, load_collectors
from exporter.fields.faults import GpuFault
from exporter.k8s.types import NO_ATTRIBUTION, Attribution, AttributionSource
from exporter.sampling.config import SamplerSettings
from exporter.sampling.fault_tracker import FaultTracker, FaultUpdate
from exporter.sampling.snapshot import Snapshot
from exporter.sampling.stats import PollStats
from exporter.sampling.worker import DaemonExecutor
from exporter.selfmetrics import NVML_UP
from exporter.series import Family

log = logging.getLogger(__name__)


class DeviceBackend(Protocol):
    """What the sampler needs of a backend; every method runs in the worker thread."""

    @property
    def up(self) -> bool:
        """Return whether NVML is initialised and the devices can be read."""
        ...

    @property
    def inventory(self) -> Inventory:
        """Return the devices found by the latest enumeration (empty before the first one)."""
        ...

    @property
    def last_init_error(self) -> str | None:
        """Return why NVML could not be initialised, or None while it is up; /ready shows it."""
        ...

    def poll(self) -> Readings:
        """Read every enabled field of every device once, without raising for NVML errors."""
        ...

    def families(self) -> list[Family]:
        """Return the backend's own metric families (NVML up, failed calls, GPUs lost)."""
        ...

    def set_fields(self, fields: tuple[FieldSpec, ...]) -> None:
        """Switch to the reloaded field set `fields`, read from the next poll on."""
        ...

    def close(self) -> None:
        """Release the devices and shut NVML down, at exit."""
        ...


Published = TypeVar("Published")
"""What a publisher makes of a poll (the exposition layer's rendered bytes); the sampler only
holds it for scrapes."""
_Published_co = TypeVar("_Published_co", covariant=True)


class Publisher(Protocol[_Published_co]):
    """Turns a poll's result into what scrapes get (the exposition layer); called in the
    worker thread. `snapshot` is None before the first poll."""

    def __call__(self, snapshot: Snapshot | None, stats: PollStats,
                 extra: list[Family]) -> _Published_co:
        """Return what scrapes get for `snapshot`, with the poll's `stats` and the `extra`
        families (the backend's and the attribution's own metrics)."""
        ...


@dataclass(frozen=True, slots=True)
class _DeviceResult:
    readings: Readings
    inventory: Inventory
    families: list[Family]
    up: bool
    error: str | None
    faults: FaultUpdate


class Sampler(Generic[Published]):
    """Poll the devices every interval, attribute them to pods and publish the result.

    Each poll's body is rendered off the event loop and swapped into `current` whole, so a
    scrape is always answered at once from the last complete poll. It also reloads the
    collectors file when it changes or on SIGHUP, and tells /ready whether data is fresh.
    """

    def __init__(
        self,
        backend: DeviceBackend,
        collectors: Collectors,
        settings: SamplerSettings,
        publish: Publisher[Published],
        attribution: AttributionSource | None = None,
        wall_clock: Callable[[], float] = time.time,
        poll_worker: DaemonExecutor | None = None,
        faults: FaultTracker | None = None,
    ) -> None:
        self._backend = backend
        self._faults = faults or FaultTracker()
        self._collectors = collectors
        self._settings = settings
        self._attribution = attribution
        self._publish = publish
        self._clock = wall_clock
        # One poll thread: NVML calls serialise on the driver lock anyway, and a second poll
        # must never start while a slow one is still inside the driver. Other poll-time NVML
        # reads (per-process attribution) are given the same thread as `poll_worker`.
        # Rendering has its own thread so that the self-metrics still move while a poll is
        # stuck.
        self._executor = poll_worker or DaemonExecutor("poll")
        self._renderer = DaemonExecutor("render")
        self._extra: list[Family] = []
        self._inflight: asyncio.Future[_DeviceResult] | None = None
        self._refreshing: asyncio.Future[Attribution] | None = None
        self._reload_requested = False
        self.reloading = False
        """A reload of the collectors is under way (/health stays green through it)."""
        self._wake = asyncio.Event()
        self._csv_mtime = self._mtime()
        self.stats = PollStats(collect_interval_s=settings.interval_s)
        self.nvml_error: str | None = None
        self._fresh_at: float | None = None
        self.snapshot: Snapshot | None = None
        self.current: Published = publish(None, self.stats, [])
        """The published exposition; replaced whole, never mutated."""

    # --- status for /ready ----------------------------------------------------------

    def readiness(self) -> tuple[bool, str]:
        """Return whether /ready should answer ok, with the line it shows: not ready before
        the first successful poll, stale when that poll is older than three intervals."""
        last = self._fresh_at
        if last is None:
            reason = self.nvml_error or "no successful poll yet"
            return False, f"not ready: {reason}"
        age = self._clock() - last
        limit = 3 * self._settings.interval_s
        if age > limit:
            why = f"; NVML: {self.nvml_error}" if self.nvml_error else ""
            return False, f"stale: last successful poll {age:.1f}s ago (limit {limit:.1f}s){why}"
        return True, f"ok: last successful poll {age:.1f}s ago"

    def scrape_served(self) -> None:
        """Count one scrape served, for the exporter's own scrape counter."""
        self.stats.scrapes += 1

    # --- reload ---------------------------------------------------------------------

    def request_reload(self) -> None:
        """Reload now, not at the next interval (called from the SIGHUP handler, on the loop)."""
        self._reload_requested = True
        self._wake.set()

    def _mtime(self) -> float | None:
        path = self._settings.collectors_path
        try:
            return os.stat(path).st_mtime if path is not None else None
        except OSError:
            return None

    async def _maybe_reload(self) -> None:
        mtime = self._mtime()
        changed = mtime is not None and mtime != self._csv_mtime
        if not (self._reload_requested or changed) or self._settings.collectors_path is None:
            return
        self._reload_requested = False
        self._csv_mtime = mtime
        self.reloading = True
        try:
            await self._reload(self._settings.collectors_path)
        finally:
            self.reloading = False

    async def _reload(self, path: Path) -> None:
        try:
            collectors = await asyncio.to_thread(load_collectors, path)
        except CollectorsError as exc:
            self.stats.reloads["failure"] += 1
            log.error("reload failed, keeping the running configuration: %s", exc)
            return
        if not collectors.fields:
            # Never meant: a file caught mid-write (truncated, not yet filled) reads as empty,
            # and taking it would blank every scrape until the next change.
            self.stats.reloads["failure"] += 1
            log.error("reload failed, keeping the running configuration: %s enables no "
                      "field", collectors.source)
            return
        for warning in collectors.warnings:
            log.warning("%s", warning)
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(self._executor, self._backend.set_fields, collectors.specs)
        self._collectors = collectors
        self.stats.reloads["success"] += 1
        self.stats.last_reload_success = self._clock()
        log.info("reloaded %s: %d fields", collectors.source, len(collectors.fields))

    # --- the loop -------------------------------------------------------------------

    def restore_faults(self, faults: Iterable[GpuFault]) -> None:
        """Hold these faults (read back from the node) from the next poll on, each until its
        clearing event; one whose boot id is not the node's current one is dropped, the
        node having rebooted since. Safe from any thread."""
        self._faults.restore(faults)

    def _poll_devices(self) -> _DeviceResult:
        readings = self._backend.poll()
        inventory, up = self._backend.inventory, self._backend.up
        # On the poll thread: the tracker may list a GPU's processes through NVML.
        faults = self._faults.update(readings, inventory, up, self._clock())
        return _DeviceResult(readings, inventory, self._backend.families(), up,
                             self._backend.last_init_error, faults)

    async def poll_once(self) -> None:
        """Run one poll: read the devices within the deadline, attribute, render, publish.

        When the devices do not answer in time, or the previous poll is still stuck in the
        driver, the last readings are published again with the failure counted, so scrapes
        keep getting an answer and /ready turns stale."""
        loop = asyncio.get_running_loop()
        started = time.monotonic()
        if self._inflight is not None and not self._inflight.done():
            # The previous poll is still stuck in the driver: keep the last readings.
            self.stats.errors["busy"] += 1
            await self._republish()
            return
        await self._maybe_reload()
        self._inflight = loop.run_in_executor(self._executor, self._poll_devices)
        deadline = self._settings.deadline_s or self._settings.interval_s
        try:
            result = await asyncio.wait_for(asyncio.shield(self._inflight), deadline)
        except TimeoutError:
            self.stats.errors["deadline"] += 1
            log.error("device poll exceeded its %.3gs deadline", deadline)
            await self._republish()
            return
        except Exception:
            self.stats.errors["exception"] += 1
            log.exception("device poll failed")
            await self._republish()
            return
        self.nvml_error = None if result.up else (result.error or "NVML not initialised")
        attribution = NO_ATTRIBUTION
        extra: list[Family] = []
        if self._attribution is not None:
            attribution = await self._attribute(self._attribution, result.inventory, started)
            extra = self._attribution.families()
        snapshot = Snapshot(
            inventory=result.inventory,
            readings=result.readings,
            collectors=self._collectors,
            host=self._settings.host,
            attribution=attribution,
            taken_at=self._clock(),
            faults=result.faults.held,
            fault_events=result.faults.raised,
        )
        if result.up:
            self.stats.last_success = snapshot.taken_at
        else:
            self.stats.errors["nvml_down"] += 1
        self.stats.last_duration_s = time.monotonic() - started
        families = result.families
        if attribution.visible is not None:
            # A per-tenant view shows no node-wide error counts (they describe other
            # tenants' devices too); NVML's up/down state is the tenant's business.
            families = [f for f in families if f.name == NVML_UP.name]
        self._extra = [*families, *extra]
        self.current = await loop.run_in_executor(
            self._renderer, self._publish, snapshot, self.stats, self._extra)
        self.snapshot = snapshot
        if result.up:
            # Only now is the fresh data what a scrape gets: /ready may say so.
            self._fresh_at = snapshot.taken_at

    async def _attribute(self, source: AttributionSource, inventory: Inventory,
                         started: float) -> Attribution:
        """Return this poll's attribution, waited for only until the poll's deadline: a slow kubelet
        must delay neither fresh device data nor /ready. A refresh that takes longer goes on
        (the source bounds it) and a later poll uses its answer; until then the last
        attribution stays. The first poll waits for its answer: there is nothing to keep."""
        latest = self.snapshot.attribution if self.snapshot is not None else None
        finished = self._refreshing
        if finished is not None and finished.done():
            # A refresh that ended between two polls is the newest answer there is: when
            # every refresh outlasts a poll's budget, keeping only the last poll's
            # attribution would never show a kubelet or API server answer at all.
            self._refreshing = None
            if not finished.cancelled():
                if finished.exception() is None:
                    latest = finished.result()
                else:
                    log.warning("attribution refresh failed: %r; keeping the last",
                                finished.exception())
        if self._refreshing is None:
            self._refreshing = asyncio.ensure_future(source.refresh(inventory))
        if latest is None:
            return await asyncio.shield(self._refreshing)
        deadline = self._settings.deadline_s or self._settings.interval_s
        budget = max(deadline - (time.monotonic() - started), deadline / 10)
        try:
            return await asyncio.wait_for(asyncio.shield(self._refreshing), budget)
        except TimeoutError:
            log.debug("attribution refresh still running after %.2fs; keeping the last", budget)
            return latest

    async def _republish(self) -> None:
        """Publish the last readings again, with the failure just counted (they stay stale for
        /ready, which keys on fresh data only)."""
        loop = asyncio.get_running_loop()
        self.current = await loop.run_in_executor(
            self._renderer, self._publish, self.snapshot, self.stats, self._extra)

    async def run(self, stop: asyncio.Event) -> None:
        """Poll once per interval until `stop` is set; a reload request wakes it early. A
        failed poll is logged and counted, never ends the loop."""
        while not stop.is_set():
            started = time.monotonic()
            try:
                await self.poll_once()
            except Exception:
                self.stats.errors["exception"] += 1
                log.exception("poll cycle failed")
            delay = max(0.0, self._settings.interval_s - (time.monotonic() - started))
            waits = {asyncio.ensure_future(stop.wait()), asyncio.ensure_future(self._wake.wait())}
            _, pending = await asyncio.wait(waits, timeout=delay,
                                            return_when=asyncio.FIRST_COMPLETED)
            for task in pending:
                task.cancel()
            self._wake.clear()

    async def close(self, budget_s: float = 2.0) -> None:
        """Close the attribution and the backend, best effort within `budget_s`: a stuck driver or
        kubelet never delays exit."""
        loop = asyncio.get_running_loop()
        if self._refreshing is not None and not self._refreshing.done():
            self._refreshing.cancel()
        if self._attribution is not None:
            try:
                await asyncio.wait_for(self._attribution.close(), budget_s / 2)
            except (TimeoutError, Exception) as exc:
                log.warning("attribution close did not finish cleanly: %r", exc)
        try:
            await asyncio.wait_for(
                loop.run_in_executor(self._executor, self._backend.close), budget_s / 2)
        except (TimeoutError, Exception) as exc:
            log.warning("backend close did not finish cleanly: %r", exc)
        self._executor.shutdown(wait=False)
        self._renderer.shutdown(wait=False)

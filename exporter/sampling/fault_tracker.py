"""The faults held on each GPU, from one poll to the next, and the events that end them.

`FaultTracker.update` runs on the poll thread after each device poll. It raises a fault for
each new XID (the ledger's total for a GPU and code grew) and for each health code that
fails now (the health rules over NVML values; XID rules left out, see
`health_rules.failing_codes`), with the catalog's action (`exporter.fields.fault_catalog`),
and holds it until the event its action names:

- HOLDER_EXIT: the processes that ran on the GPU when the fault was seen have all exited
  (a fault whose holders are unknown, e.g. restored, waits for the GPU to run none);
- GPU_RESET: the GPU was seen gone and back (lost, then enumerated again) or its volatile
  ECC counters went down, both only while NVML was up and this process ran;
- HEALTH_PASS: the health watch that failed no longer reports the code (a GPU without
  health reads this poll is not taken to pass);
- REBOOT: the node's boot id differs from the fault's; a reboot also ends every other kind.

A fault already held (same GPU, source and code) is not raised again. `restore` takes the
faults an earlier process held (read back from the node); they are held from the next poll,
and as no reset or holder exit can be seen across a restart, a restored GPU_RESET fault
stays held until a reset this process sees or a reboot: a false hold, never a false clear.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from exporter.devices.model import Entity, Inventory, Readings
from exporter.fields.fault_catalog import CatalogEntry, health_entry, xid_entry
from exporter.fields.faults import ClearedBy, FaultSource, GpuFault

log = logging.getLogger(__name__)

BOOT_ID_PATH = Path("/proc/sys/kernel/random/boot_id")
VOLATILE_ECC_FIELDS = ("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL")
"""The volatile ECC counters whose fall witnesses a GPU reset (read when the collectors
enable them; both are in the default set)."""

FaultKey = tuple[str, FaultSource, str]
"""(GPU UUID, source, code): one fault, however often it is seen while held."""
ProcessIds = Callable[[str], frozenset[int] | None]
"""A function that returns the pids of a GPU's running processes by GPU UUID, or None when they
cannot be read."""


def read_boot_id(path: Path = BOOT_ID_PATH) -> str:
    """Return the node's boot id from `path` (the kernel's, by default), or "" when
    unreadable (no reboot is then ever seen)."""
    try:
        return path.read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError):
        return ""


@dataclass(slots=True)
class _Held:
    fault: GpuFault
    holders: frozenset[int] | None
    """HOLDER_EXIT faults: the pids on the GPU when seen; None when unknown."""


@dataclass(frozen=True, slots=True)
class FaultUpdate:
    """What one poll leaves: the faults held after it and those first raised in it."""

    held: tuple[GpuFault, ...] = ()
    raised: tuple[GpuFault, ...] = ()


def _key(fault: GpuFault) -> FaultKey:
    return (fault.uuid, fault.source, fault.code)


class FaultTracker:
    """The held faults of one node; `update` runs on the poll thread only, `restore` from any
    thread."""

    def __init__(self, process_ids: ProcessIds | None = None,
                 boot_id: Callable[[], str] | None = None) -> None:
        """Hold the two ways the tracker learns about the node. `process_ids` lists a GPU's
        processes (with None, holders are never known, so a HOLDER_EXIT fault waits for a reset
        or a reboot); `boot_id` answers the node's boot id at each poll ("" when unknown). By
        default the node's boot id is read once, here: it cannot change while this process
        runs, as a reboot ends it."""
        self._process_ids = process_ids
        if boot_id is None:
            this_boot = read_boot_id()

            def boot_id() -> str:
                return this_boot
        self._read_boot_id = boot_id
        self._running: dict[str, frozenset[int] | None] = {}
        """The processes on each GPU asked about in the current poll, by GPU UUID."""
        self._held: dict[FaultKey, _Held] = {}
        self._xid_totals: dict[tuple[int, int], int] = {}
        self._failing: dict[str, frozenset[str]] = {}
        """The health codes failing at the last poll that read each GPU's health, by GPU UUID."""
        self._seen: dict[str, bool] = {}
        """Whether each GPU was present at the last poll with NVML up, by GPU UUID (a key means
        the GPU was seen present once)."""
        self._ecc: dict[str, float] = {}
        self._lock = threading.Lock()
        self._restored: list[GpuFault] = []
        self._warned_boot_id = False

    def restore(self, faults: Iterable[GpuFault]) -> None:
        """Hold these faults from the next poll on (each until its own clearing event)."""
        with self._lock:
            self._restored.extend(faults)

    def update(self, readings: Readings, inventory: Inventory, up: bool,
               now: float) -> FaultUpdate:
        """Return the faults held after this poll and those it raised."""
        self._running = {}
        boot_id = self._boot_id()
        self._take_restored(boot_id)
        if boot_id:
            self._clear(lambda h: h.fault.boot_id != boot_id)
        present = {g.uuid: g for g in inventory.gpus}
        reset = self._resets(readings, present, up)
        self._clear(lambda h: h.fault.uuid in reset
                    and h.fault.cleared_by in (ClearedBy.GPU_RESET, ClearedBy.HOLDER_EXIT))
        self._clear_holder_exits(present)
        by_index = {g.gpu: g for g in inventory.gpus}
        by_index.update((k[0], e) for k, e in readings.known.items()
                        if k[1] == -1 and k[0] not in by_index)
        self._clear_health_passes(readings, by_index)
        raised = [*self._new_xids(readings, by_index, boot_id, now),
                  *self._new_health(readings, by_index, boot_id, now)]
        held = sorted((h.fault for h in self._held.values()),
                      key=lambda f: (f.gpu, f.source, f.code))
        return FaultUpdate(tuple(held), tuple(raised))

    # --- clearing ---------------------------------------------------------------------

    def _boot_id(self) -> str:
        boot_id = self._read_boot_id()
        if not boot_id and not self._warned_boot_id:
            self._warned_boot_id = True
            log.warning("cannot read the node's boot id (%s): faults that a reboot clears "
                        "stay held", BOOT_ID_PATH)
        return boot_id

    def _take_restored(self, boot_id: str) -> None:
        with self._lock:
            restored, self._restored = self._restored, []
        for fault in restored:
            if fault.cleared_by is ClearedBy.NEVER_HELD:
                continue
            if boot_id and fault.boot_id != boot_id:
                log.info("fault %s %s on GPU %s cleared: the node rebooted since", fault.source,
                         fault.code, fault.uuid)
                continue
            self._held.setdefault(_key(fault), _Held(fault, None))

    def _clear(self, ends: Callable[[_Held], bool]) -> None:
        for key in [k for k, h in self._held.items() if ends(h)]:
            fault = self._held.pop(key).fault
            log.info("fault %s %s on GPU %d cleared (%s)", fault.source, fault.code, fault.gpu,
                     fault.cleared_by.value)

    def _resets(self, readings: Readings, present: dict[str, Entity], up: bool) -> set[str]:
        """Return the UUIDs of the GPUs this poll shows were reset: seen, then gone, now back;
        or a volatile ECC counter lower than at the last poll. Nothing while NVML is down,
        which says nothing about any GPU."""
        if not up:
            return set()
        reset = {u for u, was in self._seen.items() if u in present and not was}
        for uuid in self._seen:
            self._seen[uuid] = uuid in present
        for uuid in present:
            self._seen[uuid] = True
        for uuid, gpu in present.items():
            values = readings.values.get(gpu.key, {})
            counts = [values[n] for n in VOLATILE_ECC_FIELDS if n in values]
            if not counts:
                continue
            total = sum(counts)
            if total < self._ecc.get(uuid, 0.0):
                reset.add(uuid)
            self._ecc[uuid] = total
        return reset

    def _clear_holder_exits(self, present: dict[str, Entity]) -> None:
        if self._process_ids is None:
            return

        def exited(held: _Held) -> bool:
            if held.fault.cleared_by is not ClearedBy.HOLDER_EXIT \
                    or held.fault.uuid not in present:
                return False
            now = self._processes_on(held.fault.uuid)
            if now is None:
                return False
            return not now if held.holders is None else not held.holders & now
        self._clear(exited)

    def _clear_health_passes(self, readings: Readings, by_index: dict[int, Entity]) -> None:
        failing = {by_index[i].uuid: codes for i, codes in readings.health_codes.items()
                   if i in by_index}
        self._clear(lambda h: h.fault.cleared_by is ClearedBy.HEALTH_PASS
                    and h.fault.uuid in failing and h.fault.code not in failing[h.fault.uuid])

    def _processes_on(self, uuid: str) -> frozenset[int] | None:
        """Return the processes on this GPU now (None when unknown), asking NVML at most once
        per GPU in a poll, however many faults on it need them."""
        if self._process_ids is None:
            return None
        if uuid not in self._running:
            self._running[uuid] = self._process_ids(uuid)
        return self._running[uuid]

    # --- raising ----------------------------------------------------------------------

    def _raise(self, entry: CatalogEntry, gpu: Entity, boot_id: str, now: float
               ) -> GpuFault | None:
        """Hold a fault of this code on this GPU (unless held already) and return it; None when
        nothing is raised (a silent action, or held already)."""
        if not entry.raised:
            return None
        fault = GpuFault(gpu.gpu, gpu.uuid, entry.source, entry.code, entry.name,
                         entry.action, entry.fatal, entry.cleared_by, now, boot_id)
        if fault.cleared_by is ClearedBy.NEVER_HELD:
            return fault
        if _key(fault) in self._held:
            return None
        holders = None
        if fault.cleared_by is ClearedBy.HOLDER_EXIT:
            holders = self._processes_on(gpu.uuid)
        self._held[_key(fault)] = _Held(fault, holders)
        log.warning("fault %s %s (%s) on GPU %d: %s, held until %s", fault.source, fault.code,
                    fault.name, fault.gpu, fault.action, fault.cleared_by.value)
        return fault

    def _new_xids(self, readings: Readings, by_index: dict[int, Entity], boot_id: str,
                  now: float) -> list[GpuFault]:
        totals: dict[tuple[int, int], int] = {}
        # An XID on a MIG instance counts for its GPU.
        for total in readings.xid_totals:
            key = (total.entity_key[0], total.xid)
            totals[key] = totals.get(key, 0) + total.total
        raised = []
        for (index, xid), count in sorted(totals.items()):
            if count <= self._xid_totals.get((index, xid), 0) or index not in by_index:
                continue
            self._xid_totals[(index, xid)] = count
            fault = self._raise(xid_entry(xid), by_index[index], boot_id, now)
            if fault is not None:
                raised.append(fault)
        return raised

    def _new_health(self, readings: Readings, by_index: dict[int, Entity], boot_id: str,
                    now: float) -> list[GpuFault]:
        raised = []
        for index, codes in sorted(readings.health_codes.items()):
            gpu = by_index.get(index)
            if gpu is None:
                continue
            before = self._failing.get(gpu.uuid, frozenset())
            self._failing[gpu.uuid] = codes
            for code in sorted(codes):
                entry = health_entry(code)
                if entry.cleared_by is ClearedBy.NEVER_HELD and code in before:
                    continue  # An Event-only code is raised once each time it starts failing.
                fault = self._raise(entry, gpu, boot_id, now)
                if fault is not None:
                    raised.append(fault)
        return raised


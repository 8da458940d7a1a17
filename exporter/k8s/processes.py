"""Per-container use of shared GPUs (`--kubernetes.process-attribution`).

On a time-sliced or otherwise shared device the device series can't say who uses what, so
this takes the device layer's per-process reads (framebuffer per process, SM % per process),
finds each process's container through `/proc/<pid>/cgroup` (pod UID + container runtime id;
needs `hostPID: true`, since NVML reports host PIDs), and names the container through the
API-server watch. Per-container framebuffer is scaled down if needed so that its sum never
exceeds the device's used memory.

The NVML reads run on the poll thread (see `exporter.devices.processes`); at most one is in
flight: while one is stuck in the driver, later polls keep the last figures rather than
queueing more. Only the /proc reads and the sums happen here.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import re
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from exporter.devices.model import Entity
from exporter.devices.processes import EntityProcesses, ProcessReads

log = logging.getLogger(__name__)

_UID = r"[0-9a-fA-F]{8}[-_][0-9a-fA-F]{4}[-_][0-9a-fA-F]{4}[-_][0-9a-fA-F]{4}[-_][0-9a-fA-F]{12}"
_POD = re.compile(rf"pod({_UID})")
_CONTAINER = re.compile(r"([0-9a-f]{64})(?:\.scope)?$")

ContainerKey = tuple[str, str, str]
"""(namespace, pod, container)."""
Resolver = Callable[[str, str], ContainerKey | None]
"""(pod UID, container id) -> the container, from the API-server watch."""


def container_of_pid(pid: int, proc_root: Path) -> tuple[str, str] | None:
    """(pod UID, container id) from a process's cgroup path, cgroup v1 or v2, systemd or
    cgroupfs driver, containerd / CRI-O / docker runtimes; None outside a pod."""
    try:
        text = (proc_root / str(pid) / "cgroup").read_text()
    except OSError:
        return None
    for line in text.splitlines():
        path = line.split(":", 2)[-1]
        pod = _POD.search(path)
        container = _CONTAINER.search(path)
        if pod and container:
            return pod.group(1).replace("_", "-"), container.group(1)
    return None


@dataclass(frozen=True, slots=True)
class ContainerUsage:
    entity: Entity
    container: ContainerKey
    memory_bytes: float | None
    sm_ratio: float | None


def attribute(found: EntityProcesses, owner: Callable[[int], ContainerKey | None]
              ) -> tuple[list[ContainerUsage], int]:
    """One entity's use per container, and how many of its processes are in none."""
    unattributed = 0
    memory: dict[ContainerKey, float] = defaultdict(float)
    has_memory: set[ContainerKey] = set()
    total = 0.0
    for proc in found.running:
        key = owner(proc.pid)
        if key is None:
            unattributed += 1
        if proc.used_memory_bytes is None:
            continue
        total += proc.used_memory_bytes
        if key is not None:
            memory[key] += proc.used_memory_bytes
            has_memory.add(key)
    device_used = found.device_used_bytes
    if device_used is not None and total > device_used > 0:
        scale = device_used / total
        memory = defaultdict(float, {k: v * scale for k, v in memory.items()})

    sm: dict[ContainerKey, float] = {}
    if found.sm_samples is not None:
        per_pid: dict[int, list[float]] = defaultdict(list)
        for s in found.sm_samples:
            per_pid[s.pid].append(s.sm_util_pct)
        for pid, values in per_pid.items():
            key = owner(pid)
            if key is not None:
                sm[key] = sm.get(key, 0.0) + sum(values) / len(values) / 100.0

    containers = {owner(p.pid) for p in found.running} | set(sm)
    # No sample since the previous read means an idle container, not an unknown one.
    idle = 0.0 if found.sm_samples is not None else None
    usage = [
        ContainerUsage(
            found.entity,
            key,
            memory[key] if key in has_memory else None,
            min(1.0, sm[key]) if key in sm else idle,
        )
        for key in sorted(k for k in containers if k is not None)
    ]
    return usage, unattributed


class ProcessUsage:
    """The last per-container use of the shared devices, refreshed once per poll."""

    def __init__(self, reads: ProcessReads, resolve: Resolver,
                 proc_root: str | Path = "/proc") -> None:
        self._reads = reads
        self._resolve = resolve
        self._proc_root = Path(proc_root)
        self._pending: concurrent.futures.Future[list[EntityProcesses]] | None = None
        """The read last started; kept until done, even when the refresh awaiting it was
        cancelled, so a read stuck in the driver is never joined by a second one."""
        self.usage: list[ContainerUsage] = []
        self.unattributed = 0
        """Processes on the last read devices that belong to no known container."""

    @property
    def read_pending(self) -> bool:
        return self._pending is not None and not self._pending.done()

    async def refresh(self, shared: Sequence[Entity]) -> None:
        """Read the shared entities' processes; with a read still in flight, keep the last
        figures instead."""
        if self.read_pending:
            return
        if not shared:  # nothing to ask NVML about: no job for the poll thread
            self.usage, self.unattributed = [], 0
            return
        pending = self._pending = self._reads(shared)
        # Shielded: cancelling this refresh (its deadline) leaves the read to finish on the
        # poll thread, still held in `_pending`.
        found = await asyncio.shield(asyncio.wrap_future(pending))
        # /proc reads block (briefly): off the event loop, which serves scrapes. No NVML
        # call happens there.
        self.usage, self.unattributed = await asyncio.to_thread(self._attribute, found)

    def _attribute(self, found: list[EntityProcesses]) -> tuple[list[ContainerUsage], int]:
        owner_of: dict[int, ContainerKey | None] = {}

        def owner(pid: int) -> ContainerKey | None:
            if pid not in owner_of:
                where = container_of_pid(pid, self._proc_root)
                owner_of[pid] = None if where is None else self._resolve(*where)
            return owner_of[pid]

        usage: list[ContainerUsage] = []
        unattributed = 0
        for entity_processes in found:
            entity_usage, entity_unattributed = attribute(entity_processes, owner)
            usage += entity_usage
            unattributed += entity_unattributed
        return usage, unattributed

"""Per-container use of shared GPUs, from NVML's process list: for
`--kubernetes.process-attribution` (its own families) and `--kubernetes-virtual-gpus` (each
holder's `FB_USED` and `GPU_UTIL`, `exporter.k8s.virtual_gpus`).

On a time-sliced or otherwise shared device the device series can't say who uses what, so
this takes the device layer's per-process reads (framebuffer per process, SM % per process),
finds each process's container through `/proc/<pid>/cgroup` (pod UID + container runtime id;
needs `hostPID: true`, since NVML reports host PIDs), and names the container through the
API-server watch. Per-container framebuffer is scaled down if needed so that its sum never
exceeds the device's used memory.

The NVML reads run on the poll thread (see `exporter.devices.process_reads`); at most one is in
flight: while one is stuck in the driver, later polls keep the last figures rather than
queueing more. Only the /proc reads and the sums happen here.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import enum
import logging
import re
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from exporter.devices.model import Entity, EntityKey
from exporter.devices.process_reads import EntityProcesses, ProcessReads

log = logging.getLogger(__name__)

_UID = r"[0-9a-fA-F]{8}[-_][0-9a-fA-F]{4}[-_][0-9a-fA-F]{4}[-_][0-9a-fA-F]{4}[-_][0-9a-fA-F]{12}"
_POD = re.compile(rf"pod({_UID})")
_CONTAINER = re.compile(r"([0-9a-f]{64})(?:\.scope)?$")

ContainerKey = tuple[str, str, str]
"""(namespace, pod, container)."""
Resolver = Callable[[str, str], ContainerKey | None]
"""A function that finds the container by pod UID and container id, from the API-server watch."""


class Unowned(enum.Enum):
    """Why a process has no container."""

    OUTSIDE = "outside any pod"
    """Its cgroup names no pod (a host process), or its cgroup file cannot be read."""
    HIDDEN = "not in /proc"
    """No /proc/<pid>: it has exited, or the exporter does not share the host's PID
    namespace (no `hostPID: true`)."""
    UNNAMED = "in a pod the watch does not name"
    """Its cgroup names a pod and container the API-server watch does not know (yet): a pod
    that has just started, or a watch that is not set up."""


Owner = ContainerKey | Unowned


def locate_pid(pid: int, proc_root: Path) -> tuple[str, str] | Unowned:
    """Return the pod UID and container id in a process's cgroup path, for cgroup v1 or v2, the
    systemd or cgroupfs driver, and the containerd, CRI-O or docker runtimes."""
    try:
        text = (proc_root / str(pid) / "cgroup").read_text()
    except FileNotFoundError:
        return Unowned.HIDDEN
    except OSError:
        return Unowned.OUTSIDE
    for line in text.splitlines():
        path = line.split(":", 2)[-1]
        pod = _POD.search(path)
        container = _CONTAINER.search(path)
        if pod and container:
            return pod.group(1).replace("_", "-"), container.group(1)
    return Unowned.OUTSIDE


def container_of_pid(pid: int, proc_root: Path) -> tuple[str, str] | None:
    """Return what `locate_pid` finds, or None for a process in no pod (or one not visible)."""
    found = locate_pid(pid, proc_root)
    return None if isinstance(found, Unowned) else found


@dataclass(frozen=True, slots=True)
class ContainerUsage:
    """One container's use of one shared device: the framebuffer its processes hold and their share
    of the SMs."""

    entity: Entity
    container: ContainerKey
    memory_bytes: float | None
    sm_ratio: float | None


@dataclass(frozen=True, slots=True)
class EntityUse:
    """One shared entity's use per container, from one read of its processes."""

    entity: Entity
    memory_bytes: Mapping[ContainerKey, float | None]
    """Every container with a running process on the entity: its framebuffer, scaled down
    with the others when their sum exceeds the entity's used memory; None when NVML gives no
    figure for one of its processes."""
    sm_ratio: Mapping[ContainerKey, float] | None
    """SM share (0-1) of each container sampled busy since the previous read; a container
    not in it was idle. None: no samples to be had (MIG, or the call is unavailable)."""
    unattributed: int
    """Processes in no known container."""
    complete: bool
    """Every process is accounted for: in a named container or outside any pod. False while
    one runs in a pod the watch does not name yet, or when none of the entity's processes is
    visible in /proc: a container without figures here may then be using the device."""

    def usage(self) -> list[ContainerUsage]:
        """Return the use of each container with a process or a sample, sorted: the rows of
        process attribution."""
        sm = self.sm_ratio
        # No sample since the previous read means an idle container, not an unknown one.
        idle = 0.0 if sm is not None else None
        return [
            ContainerUsage(self.entity, key, self.memory_bytes.get(key),
                           sm[key] if sm is not None and key in sm else idle)
            for key in sorted({*self.memory_bytes, *(sm or ())})
        ]


def attribute(found: EntityProcesses, owner: Callable[[int], Owner]) -> EntityUse:
    """Return one entity's use per container."""
    owners = {proc.pid: owner(proc.pid) for proc in found.running}
    memory: dict[ContainerKey, float | None] = {}
    total = 0.0
    for proc in found.running:
        key = owners[proc.pid]
        used = proc.used_memory_bytes
        total += used or 0.0
        if isinstance(key, Unowned):
            continue
        # One process without a figure makes its container's sum unknown, not smaller.
        known = memory.get(key, 0.0)
        memory[key] = None if known is None or used is None else known + used
    device_used = found.device_used_bytes
    if device_used is not None and total > device_used > 0:
        scale = device_used / total
        memory = {k: None if v is None else v * scale for k, v in memory.items()}

    sm: dict[ContainerKey, float] | None = None
    if found.sm_samples is not None:
        sm = {}
        per_pid: dict[int, list[float]] = defaultdict(list)
        for s in found.sm_samples:
            per_pid[s.pid].append(s.sm_util_pct)
        for pid, values in per_pid.items():
            key = owners[pid] if pid in owners else owner(pid)
            if not isinstance(key, Unowned):
                sm[key] = sm.get(key, 0.0) + sum(values) / len(values) / 100.0
        sm = {k: min(1.0, v) for k, v in sm.items()}

    states = list(owners.values())
    hidden = bool(states) and all(s is Unowned.HIDDEN for s in states)
    return EntityUse(
        found.entity, memory, sm,
        unattributed=sum(isinstance(s, Unowned) for s in states),
        complete=not hidden and Unowned.UNNAMED not in states,
    )


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
        self.entities: dict[EntityKey, EntityUse] = {}
        """The entities the last read could read."""
        self._hidden_logged = False

    @property
    def usage(self) -> list[ContainerUsage]:
        """Return every container's use of every shared device, from the last read."""
        return [u for use in self.entities.values() for u in use.usage()]

    @property
    def unattributed(self) -> int:
        """Return how many processes on the devices last read belong to no known container."""
        return sum(use.unattributed for use in self.entities.values())

    @property
    def read_pending(self) -> bool:
        """Return whether a read of the processes is still running."""
        return self._pending is not None and not self._pending.done()

    async def refresh(self, shared: Sequence[Entity]) -> None:
        """Read the shared entities' processes; with a read still in flight, keep the last
        figures instead."""
        if self.read_pending:
            return
        if not shared:  # With nothing to ask NVML about, the poll thread gets no job.
            self.entities = {}
            return
        pending = self._pending = self._reads(shared)
        # Shielded: cancelling this refresh (its deadline) leaves the read to finish on the
        # poll thread, still held in `_pending`.
        found = await asyncio.shield(asyncio.wrap_future(pending))
        # /proc reads block (briefly): off the event loop, which serves scrapes. No NVML
        # call happens there.
        self.entities = await asyncio.to_thread(self._attribute, found)

    def _attribute(self, found: list[EntityProcesses]) -> dict[EntityKey, EntityUse]:
        owner_of: dict[int, Owner] = {}

        def owner(pid: int) -> Owner:
            if pid not in owner_of:
                where = locate_pid(pid, self._proc_root)
                if isinstance(where, Unowned):
                    owner_of[pid] = where
                else:
                    owner_of[pid] = self._resolve(*where) or Unowned.UNNAMED
            return owner_of[pid]

        uses = {f.entity.key: attribute(f, owner) for f in found}
        if owner_of and all(o is Unowned.HIDDEN for o in owner_of.values()) \
                and not self._hidden_logged:
            self._hidden_logged = True
            log.warning("none of the %d processes on shared GPUs is visible under %s: NVML "
                        "reports host PIDs, so the exporter needs `hostPID: true` to tell "
                        "which pod uses what", len(owner_of), self._proc_root)
        return uses

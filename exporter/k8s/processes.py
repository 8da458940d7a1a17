"""Per-container use of shared GPUs (`--kubernetes.process-attribution`).

On a time-sliced or otherwise shared device the device series can't say who uses what, so
this reads NVML's running compute processes (framebuffer per process) and process
utilisation samples (SM % per process), finds each process's container through
`/proc/<pid>/cgroup` (pod UID + container runtime id; needs `hostPID: true`, since NVML
reports host PIDs), and names the container through the API-server watch. Per-container
framebuffer is scaled down if needed so that its sum never exceeds the device's used memory.

Runs in a worker thread (NVML and /proc are blocking), once per poll, only for shared devices.
MIG GPU instances get framebuffer only: NVML has no per-process utilisation on MIG.
"""

from __future__ import annotations

import logging
import re
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from exporter.devices.errors import is_nvml_error, nvml_code
from exporter.devices.model import Entity
from exporter.devices.nvml_api import NVML_ERROR_NOT_FOUND, error_name
from exporter.devices.plan import NVML_MEMORY_V2

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


class ProcessSampler:
    def __init__(self, lib: Any, resolve: Resolver, proc_root: str | Path = "/proc") -> None:
        self._lib = lib
        self._resolve = resolve
        self._proc_root = Path(proc_root)
        self._last_sample_us: dict[str, int] = {}
        self._warned: set[tuple[str, str]] = set()
        self.unattributed = 0
        """Processes on the last sampled devices that belong to no known container."""

    def _call(self, what: str, entity: Entity, fn: Callable[[], Any]) -> Any:
        """fn() or None; each failing (device, call) pair is logged once."""
        try:
            return fn()
        except Exception as exc:
            if is_nvml_error(exc) and nvml_code(exc) == NVML_ERROR_NOT_FOUND:
                return []  # no samples since the last call
            key = (entity.uuid + str(entity.gpu_instance_id), what)
            if key not in self._warned:
                self._warned.add(key)
                reason = error_name(nvml_code(exc)) if is_nvml_error(exc) else repr(exc)
                log.info("process attribution: %s on GPU %d unavailable (%s)",
                         what, entity.gpu, reason)
            return None

    def sample(self, entities: Sequence[Entity]) -> list[ContainerUsage]:
        self.unattributed = 0
        out: list[ContainerUsage] = []
        for entity in entities:
            out += self._sample_entity(entity)
        return out

    def _sample_entity(self, entity: Entity) -> list[ContainerUsage]:
        lib = self._lib
        handle = self._call("handle", entity, lambda: lib.nvmlDeviceGetHandleByUUID(entity.uuid))
        if handle is None:
            return []
        procs = self._call("running processes", entity,
                           lambda: lib.nvmlDeviceGetComputeRunningProcesses(handle))
        if procs is None:
            return []
        if entity.is_mig:
            procs = [p for p in procs
                     if getattr(p, "gpuInstanceId", None) == entity.gpu_instance_id]
            mem_uuid = entity.mig_devices[0].uuid if entity.mig_devices else None
            mem_handle = (None if mem_uuid is None else self._call(
                "MIG handle", entity, lambda: lib.nvmlDeviceGetHandleByUUID(mem_uuid)))
            samples: list[Any] | None = None
        else:
            mem_handle = handle
            since = self._last_sample_us.get(entity.uuid, 0)
            samples = self._call("process utilization", entity,
                                 lambda: lib.nvmlDeviceGetProcessUtilization(handle, since))
            if samples:
                self._last_sample_us[entity.uuid] = max(int(s.timeStamp) for s in samples)
        memory_info = (None if mem_handle is None else
                       self._call("memory info", entity,
                                  lambda: lib.nvmlDeviceGetMemoryInfo(
                                      mem_handle, version=NVML_MEMORY_V2)))

        owner_of: dict[int, ContainerKey | None] = {}

        def owner(pid: int) -> ContainerKey | None:
            if pid not in owner_of:
                found = container_of_pid(pid, self._proc_root)
                owner_of[pid] = None if found is None else self._resolve(*found)
            return owner_of[pid]

        memory: dict[ContainerKey, float] = defaultdict(float)
        has_memory: set[ContainerKey] = set()
        total = 0.0
        for proc in procs:
            used = getattr(proc, "usedGpuMemory", None)
            key = owner(int(proc.pid))
            if key is None:
                self.unattributed += 1
            if used is None:
                continue
            total += float(used)
            if key is not None:
                memory[key] += float(used)
                has_memory.add(key)
        device_used = getattr(memory_info, "used", None)
        if device_used is not None and total > float(device_used) > 0:
            scale = float(device_used) / total
            memory = defaultdict(float, {k: v * scale for k, v in memory.items()})

        sm: dict[ContainerKey, float] = {}
        if samples is not None:
            per_pid: dict[int, list[float]] = defaultdict(list)
            for s in samples:
                per_pid[int(s.pid)].append(float(s.smUtil))
            for pid, values in per_pid.items():
                key = owner(pid)
                if key is not None:
                    sm[key] = sm.get(key, 0.0) + sum(values) / len(values) / 100.0

        containers = {owner(int(p.pid)) for p in procs} | set(sm)
        return [
            ContainerUsage(
                entity,
                key,
                memory[key] if key in has_memory else None,
                min(1.0, sm[key]) if key in sm else (0.0 if samples is not None else None),
            )
            for key in sorted(k for k in containers if k is not None)
        ]

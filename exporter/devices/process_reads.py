"""Per-process use of shared devices, as NVML reports it (for per-container attribution).

For each entity asked about: the running compute processes (MPS clients included) with their
framebuffer, the SM utilisation samples NVML took since the previous read, and the device's
used memory (the ceiling per-process figures are scaled to). Which container a process
belongs to is not NVML's business: the Kubernetes layer maps pids through /proc.

`ProcessReader.read` makes NVML calls, so it runs where every other poll-time NVML call runs:
as a job on the sampler's poll thread (`on_thread`), never on a thread of its own.
MIG GPU instances get framebuffer only: NVML has no per-process utilisation under MIG.
"""

from __future__ import annotations

import concurrent.futures
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol, TypeVar

from exporter.devices.errors import is_nvml_error, nvml_code
from exporter.devices.model import Entity
from exporter.devices.nvml_api import (
    NVML_ERROR_FUNCTION_NOT_FOUND,
    NVML_ERROR_NOT_FOUND,
    NVML_ERROR_NOT_SUPPORTED,
    Handle,
    NvmlLib,
    error_name,
)
from exporter.devices.read_plan import NVML_MEMORY_V2

log = logging.getLogger(__name__)

T = TypeVar("T")

_Call = Literal["handle", "MIG handle", "running processes", "MPS processes",
                "process utilization", "memory info"]
"""The reads a failure is logged for, once per entity."""


@dataclass(frozen=True, slots=True)
class RunningProcess:
    """A compute process on a device and the framebuffer it holds."""

    pid: int
    used_memory_bytes: float | None
    """Framebuffer the process holds; None when NVML can't say (e.g. without privileges)."""


@dataclass(frozen=True, slots=True)
class SmSample:
    """One utilisation sample of a process: the share of the device's SMs it kept busy, in
    percent."""

    pid: int
    sm_util_pct: float


@dataclass(frozen=True, slots=True)
class EntityProcesses:
    """What NVML says about the processes on one GPU or MIG GPU instance."""

    entity: Entity
    running: tuple[RunningProcess, ...]
    sm_samples: tuple[SmSample, ...] | None
    """Samples since the previous read (several per pid possible; empty: no process was
    busy); None when there are none to be had (MIG, or the call is unavailable)."""
    device_used_bytes: float | None
    """The entity's used framebuffer; None when unreadable."""


class ProcessReads(Protocol):
    """Starts a `ProcessReader.read` of these entities on the poll thread."""

    def __call__(self, entities: Sequence[Entity], /
                 ) -> concurrent.futures.Future[list[EntityProcesses]]:
        """Start reading the processes of these entities and return the future of their answers."""
        ...


class ProcessReader:
    """Read the processes on each entity and their use of it, remembering which samples were already
    read so each read returns only newer ones."""

    def __init__(self, lib: NvmlLib) -> None:
        self._lib = lib
        self._last_sample_us: dict[str, int] = {}
        """The time stamp of the newest utilisation sample already read, by GPU UUID."""
        self._warned: set[tuple[str, _Call]] = set()
        self._mps = MpsClients(lib)

    def on_thread(self, executor: concurrent.futures.Executor) -> ProcessReads:
        """Return a reader that submits each read to `executor`, the poll thread that owns NVML."""
        def submit(entities: Sequence[Entity], /
                   ) -> concurrent.futures.Future[list[EntityProcesses]]:
            return executor.submit(self.read, tuple(entities))
        return submit

    def read(self, entities: Sequence[Entity]) -> list[EntityProcesses]:
        """Read the processes on these entities; an entity whose process list could not be read
        is left out."""
        out = []
        for entity in entities:
            found = self._read_entity(entity)
            if found is not None:
                out.append(found)
        return out

    def _call(self, what: _Call, entity: Entity, fn: Callable[[], T], none_yet: T | None = None
              ) -> T | None:
        """Return what `fn()` answers, or `none_yet` when NVML answers NOT_FOUND (nothing since
        the last call), or None on any other failure, logging each failing pair of device and
        call once."""
        try:
            return fn()
        except Exception as exc:
            if none_yet is not None and is_nvml_error(exc) \
                    and nvml_code(exc) == NVML_ERROR_NOT_FOUND:
                return none_yet
            self._unavailable(what, entity, exc)
            return None

    def _unavailable(self, what: _Call, entity: Entity, exc: Exception) -> None:
        key = (entity.uuid + str(entity.gpu_instance_id), what)
        if key not in self._warned:
            self._warned.add(key)
            reason = error_name(nvml_code(exc)) if is_nvml_error(exc) else repr(exc)
            log.info("process attribution: %s on GPU %d unavailable (%s)",
                     what, entity.gpu, reason)

    def _handle(self, what: _Call, entity: Entity, uuid: str) -> Handle | None:
        return self._call(what, entity, lambda: self._lib.nvmlDeviceGetHandleByUUID(uuid))

    def _read_entity(self, entity: Entity) -> EntityProcesses | None:
        lib = self._lib
        handle = self._handle("handle", entity, entity.uuid)
        if handle is None:
            return None
        procs: list[Any] | None = self._call(
            "running processes", entity,
            lambda: lib.nvmlDeviceGetComputeRunningProcesses(handle), [])
        if procs is None:
            return None
        procs = _by_pid([*procs, *self._mps_clients(entity, handle)])
        samples: list[SmSample] | None = None
        if entity.is_mig:
            # The list covers the whole GPU; the instance's memory is its MIG device's.
            procs = [p for p in procs
                     if getattr(p, "gpuInstanceId", None) == entity.gpu_instance_id]
            mem_uuid = entity.mig_devices[0].uuid if entity.mig_devices else None
            mem_handle = None if mem_uuid is None else self._handle("MIG handle", entity,
                                                                    mem_uuid)
        else:
            mem_handle = handle
            samples = self._sm_samples(entity, handle)
        memory_info = (None if mem_handle is None else
                       self._call("memory info", entity,
                                  lambda: lib.nvmlDeviceGetMemoryInfo(
                                      mem_handle, version=NVML_MEMORY_V2)))
        device_used = getattr(memory_info, "used", None)
        running = []
        for proc in procs:
            used = getattr(proc, "usedGpuMemory", None)
            running.append(RunningProcess(int(proc.pid), None if used is None else float(used)))
        return EntityProcesses(
            entity, tuple(running), None if samples is None else tuple(samples),
            None if device_used is None else float(device_used))

    def _mps_clients(self, entity: Entity, handle: Handle) -> list[Any]:
        """Return the processes of the MPS clients on the entity's GPU; on a failure other than
        MPS being unavailable the failure is logged once and the answer is an empty list, so the
        compute list still counts."""
        try:
            return self._mps.read(entity.uuid, handle)
        except Exception as exc:
            self._unavailable("MPS processes", entity, exc)
            return []

    def _sm_samples(self, entity: Entity, handle: Handle) -> list[SmSample] | None:
        since = self._last_sample_us.get(entity.uuid, 0)
        raw: list[Any] | None = self._call(
            "process utilization", entity,
            lambda: self._lib.nvmlDeviceGetProcessUtilization(handle, since), [])
        if raw is None:
            return None
        if raw:
            self._last_sample_us[entity.uuid] = max(int(s.timeStamp) for s in raw)
        return [SmSample(int(s.pid), float(s.smUtil)) for s in raw]


class MpsClients:
    """Read the MPS clients of GPUs, remembering which GPUs' drivers have no MPS process list so
    they are not asked again. Drivers list only the MPS server among a GPU's compute processes:
    its clients are in this second list. It makes NVML calls: use it on the poll thread."""

    def __init__(self, lib: NvmlLib) -> None:
        self._lib = lib
        self._without_mps: set[str] = set()
        """GPU UUIDs whose driver answered that it has no MPS process list."""

    def read(self, uuid: str, handle: Handle) -> list[Any]:
        """Return the processes of the MPS clients on the GPU with this UUID and handle; an empty
        list where MPS is unavailable (NVML answers NOT_SUPPORTED or FUNCTION_NOT_FOUND), as a
        GPU without MPS has no clients. Any other failure is raised: the clients are then
        unknown, which is not the same as none."""
        if uuid in self._without_mps:
            return []
        try:
            return list(self._lib.nvmlDeviceGetMPSComputeRunningProcesses_v3(handle))
        except Exception as exc:
            if is_nvml_error(exc) and nvml_code(exc) in (NVML_ERROR_NOT_SUPPORTED,
                                                         NVML_ERROR_FUNCTION_NOT_FOUND):
                self._without_mps.add(uuid)
                return []
            raise


def _by_pid(procs: Sequence[Any]) -> list[Any]:
    """Return one entry per pid, in the order first seen, since a driver may list an MPS client
    in both lists. An entry that knows the process's framebuffer wins over one that does not."""
    merged: dict[int, Any] = {}
    for proc in procs:
        seen = merged.get(int(proc.pid))
        if seen is None or (getattr(seen, "usedGpuMemory", None) is None
                            and getattr(proc, "usedGpuMemory", None) is not None):
            merged[int(proc.pid)] = proc
    return list(merged.values())


def gpu_process_ids(lib: NvmlLib) -> Callable[[str], frozenset[int] | None]:
    """Return a reader of the pids of the processes running on a GPU, by UUID: its compute
    processes and its MPS clients (a pid in both lists counts once; where MPS is unavailable,
    the compute processes alone). The reader answers None when NVML cannot list them (a lost
    GPU, no permission, a failing MPS list), so a caller never takes "unknown" for "none". It
    makes NVML calls: call it on the poll thread."""
    mps = MpsClients(lib)

    def read(uuid: str) -> frozenset[int] | None:
        try:
            handle = lib.nvmlDeviceGetHandleByUUID(uuid)
            procs = [*lib.nvmlDeviceGetComputeRunningProcesses(handle), *mps.read(uuid, handle)]
        except Exception as exc:
            if not is_nvml_error(exc):
                raise
            return None
        return frozenset(int(p.pid) for p in procs)
    return read

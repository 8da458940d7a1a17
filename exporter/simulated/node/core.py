"""The simulated node's state and the plumbing every pynvml call goes through.

Handles, event sets and GPM samples are real pynvml ctypes pointers into memory owned here,
so code written for pynvml (assigning samples into `c_nvmlGpmMetricsGet_t`, reading
`c_nvmlEventData_t.device`) runs unchanged. As with pynvml, every call returns a new pointer
object: compare devices by UUID, never by identity.
"""

from __future__ import annotations

import collections
import ctypes
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NoReturn

import pynvml

from exporter.simulated.node import profiles as P
from exporter.simulated.node.boards import BOARD_FIGURES, BoardFigures
from exporter.simulated.node.dynamics import GpuDynamics, Scope
from exporter.simulated.node.fault_specs import (
    ExitFault,
    Fault,
    LostFault,
    NvmlDownFault,
    ResetFault,
    Window,
    XidFault,
    fault_gpu,
    fault_gpu_instance,
)
from exporter.simulated.node.process_table import SimProcess, plan_processes

Handle = Any
NOT_AVAILABLE = 0xFFFFFFFF
"""NVML's "no value" for unsigned ids (e.g. an XID not tied to a MIG instance)."""


def fail(code: int) -> NoReturn:
    """Raise pynvml's error for this NVML return code."""
    raise pynvml.NVMLError(code)


def address_of(obj: Any) -> int | None:
    """Return the address a ctypes pointer (or a bare int) holds, or None for anything else."""
    try:
        return ctypes.cast(obj, ctypes.c_void_p).value
    except (ctypes.ArgumentError, TypeError):
        return None



@dataclass(frozen=True, slots=True)
class SimMigDevice:
    """A MIG device of the simulated node, as a pod-resources simulation needs it."""

    uuid: str
    gpu_instance_id: int
    compute_instance_id: int
    slot: int
    profile: str
    name: str


@dataclass(frozen=True, slots=True)
class SimGpu:
    """A GPU of the simulated node, as a pod-resources simulation needs it."""

    index: int
    uuid: str
    name: str
    bus_id: str
    mig_devices: tuple[SimMigDevice, ...]


@dataclass(slots=True)
class GpuEntry:
    """The simulated node's state for one GPU: its specification, UUID, dynamics, handle address and
    the windows in which it is lost."""

    spec: P.GpuSpec
    uuid: str
    dyn: GpuDynamics
    address: int
    lost: tuple[Window, ...]

    @property
    def index(self) -> int:
        """Return the GPU's index."""
        return self.spec.index

    @property
    def mig_on(self) -> bool:
        """Return whether MIG is enabled on the GPU."""
        return self.spec.mig is not None


@dataclass(slots=True)
class MigEntry:
    """The simulated node's state for one MIG device: its GPU, GPU instance, compute instance, UUID,
    name and handle address."""

    gpu: GpuEntry
    gi: P.GpuInstanceSpec
    ci: P.ComputeInstanceSpec
    uuid: str
    name: str
    address: int


@dataclass(frozen=True, slots=True)
class Asked:
    """What a figure of the call table (`call_table`) sees: the GPU asked, the MIG device
    asked through (calls that take one), simulated time. A call without a device sees GPU 0,
    as the test library answers such calls from GPU 0's values."""

    gpu: GpuEntry
    mig: MigEntry | None
    t: float

    @property
    def board(self) -> P.Board:
        """Return the board of the GPU asked."""
        return self.gpu.spec.board

    @property
    def figures(self) -> BoardFigures:
        """Return the fixed figures of the GPU's board."""
        return BOARD_FIGURES[self.gpu.spec.board.name]

    @property
    def dyn(self) -> GpuDynamics:
        """Return the dynamics of the GPU asked."""
        return self.gpu.dyn


@dataclass(slots=True)
class EventSetEntry:
    """One event set: the GPUs registered on it and the XID events it already delivered."""

    registered: dict[int, float]
    """The simulated time each GPU was registered, by GPU index (events before then are lost)."""
    delivered: set[int]
    """Positions in the XID fault list already handed out from this set."""


@dataclass(frozen=True, slots=True)
class SampleEntry:
    """One GPM sample: the GPU and scope it was taken of, when, and the activity so far."""

    gpu: int
    scope: Scope
    t: float
    activity: float
    """Integral of the scope's activity from the node's start to t."""


class SimCore:
    """State, locking, initialisation and handle resolution shared by every call."""

    def __init__(
        self,
        profile: str,
        *,
        seed: int = 0,
        faults: Sequence[Fault] = (),
        clock: Callable[[], float] = time.monotonic,
        mig_config: str | None = None,
    ) -> None:
        self.profile = P.get_profile(profile)
        if mig_config is not None:
            from exporter.simulated.node.mig_config import apply_mig_config

            self.profile = apply_mig_config(self.profile, mig_config)
        self.seed = seed
        self.faults = tuple(faults)
        _validate(self.profile, self.faults)
        # Calls per pynvml function name, failed ones included.
        self.calls: collections.Counter[str] = collections.Counter()
        self._clock = clock
        self._t0 = clock()
        # Field-value timestamps are wall-clock microseconds, as NVML's are.
        self._wall0 = time.time()
        self._lock = threading.RLock()
        self._cond = threading.Condition(self._lock)
        # The memory behind every handle, event set and GPM sample, by address.
        self._memory: dict[int, ctypes.Array[ctypes.c_char]] = {}
        self._refcount = 0
        self._last_init = float("-inf")
        self._down = tuple(f.window for f in self.faults if isinstance(f, NvmlDownFault))
        self._xids = tuple(f for f in self.faults if isinstance(f, XidFault))
        self._high_water: dict[tuple[str, int], int] = {}
        self._gpus: list[GpuEntry] = []
        self._devices: dict[int, GpuEntry | MigEntry] = {}
        self._migs: dict[int, dict[int, MigEntry]] = {}  # GPU index -> MIG slot -> device
        for spec in self.profile.gpus:
            # A reset takes the GPU off the bus for its window, as a lost GPU.
            lost = tuple(f.window for f in self.faults
                         if isinstance(f, LostFault | ResetFault) and f.gpu == spec.index)
            gpu = GpuEntry(spec, P.gpu_uuid(profile, spec.index),
                       GpuDynamics(profile, spec, seed, self.faults), self._new_address(), lost)
            self._gpus.append(gpu)
            self._devices[gpu.address] = gpu
            slots: dict[int, MigEntry] = {}
            for gi in spec.mig or ():
                for ci in gi.compute_instances:
                    mig = MigEntry(gpu, gi, ci, P.mig_uuid(profile, spec.index, gi.gi_id, ci.ci_id),
                               gi.mig_name(spec.board, ci), self._new_address())
                    slots[ci.slot] = mig
                    self._devices[mig.address] = mig
            self._migs[spec.index] = slots
        self._event_sets: dict[int, EventSetEntry] = {}
        self._samples: dict[int, SampleEntry | None] = {}
        self._processes: dict[int, tuple[SimProcess, ...]] = plan_processes(self.profile, seed)
        self._exits = _first_exits(self.faults)

    # -- plumbing ---------------------------------------------------------------------------

    @property
    def layout(self) -> tuple[SimGpu, ...]:
        """Return the node's devices without making any NVML call (so nothing is counted in
        `calls`)."""
        return tuple(
            SimGpu(g.index, g.uuid, g.spec.board.name, g.spec.bus_id, tuple(
                SimMigDevice(m.uuid, m.gi.gi_id, m.ci.ci_id, slot, m.gi.profile, m.name)
                for slot, m in sorted(self._migs[g.index].items())
            ))
            for g in self._gpus
        )

    @property
    def shared_by(self) -> dict[int, int]:
        """Return, for each GPU the node's profile shares by time-slicing, how many pods share it
        (the simulated kubelet hands it out as that many replicas)."""
        return {g.index: g.spec.shared_by for g in self._gpus if g.spec.shared_by}

    @property
    def tenant_pids(self) -> dict[str, tuple[int, ...]]:
        """Return, for each GPU UUID, the host PIDs of the compute processes it runs, in the
        order NVML lists them, without making any NVML call: the demo writes cgroup files for
        them (`exporter.simulated.pods`). Only GPUs that run processes are listed."""
        return {g.uuid: tuple(p.pid for p in self._processes[g.index])
                for g in self._gpus if self._processes.get(g.index)}

    def _running(self, index: int, t: float) -> tuple[SimProcess, ...]:
        """Return the processes GPU `index` runs at t (none from its `exit` fault on)."""
        exit_at = self._exits.get(index)
        if exit_at is not None and t >= exit_at:
            return ()
        return self._processes.get(index, ())

    @property
    def started_at(self) -> float:
        """Return the Unix time of the simulated node's start, from which every fault's
        `at` counts."""
        return self._wall0

    def now(self) -> float:
        """Return the simulated seconds since construction."""
        return max(0.0, self._clock() - self._t0)

    def _new_address(self) -> int:
        buffer = ctypes.create_string_buffer(16)
        address = ctypes.addressof(buffer)
        self._memory[address] = buffer
        return address

    def _release(self, address: int) -> None:
        self._memory.pop(address, None)

    def _free(self, table: dict[int, Any], handle: Any) -> None:
        """Drop the entry `table` holds for the buffer `handle` points at, and release the
        buffer; a handle `table` does not hold (never allocated, or freed already) answers
        INVALID_ARGUMENT."""
        address = address_of(handle)
        if address is None or address not in table:
            fail(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        del table[address]
        self._release(address)

    def _initialised(self, t: float) -> bool:
        # An nvml-down window that opened since the last successful init unloads the library.
        if self._refcount and any(self._last_init < w.start <= t for w in self._down):
            self._refcount = 0
        return self._refcount > 0

    def _begin(self, name: str) -> float:
        self.calls[name] += 1
        t = self.now()
        if not self._initialised(t):
            fail(pynvml.NVML_ERROR_UNINITIALIZED)
        return t

    def _resolve(self, handle: Handle, t: float) -> GpuEntry | MigEntry:
        device = self._devices.get(address_of(handle) or 0)
        if device is None:
            fail(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        gpu = device if isinstance(device, GpuEntry) else device.gpu
        if any(w.active(t) for w in gpu.lost):
            fail(pynvml.NVML_ERROR_GPU_IS_LOST)
        return device

    def _physical(self, handle: Handle, t: float) -> GpuEntry:
        """Return the GPU for a query about a physical GPU; a MIG device handle answers
        NOT_SUPPORTED."""
        device = self._resolve(handle, t)
        if isinstance(device, MigEntry):
            fail(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return device

    def _no_mig(self, handle: Handle, t: float) -> GpuEntry:
        """Return the GPU for a query that NVML refuses on MIG-enabled GPUs and on MIG devices."""
        gpu = self._physical(handle, t)
        if gpu.mig_on:
            fail(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return gpu

    def _link(self, handle: Handle, t: float, link: int) -> GpuEntry:
        """Return the GPU for an NVLink query, which is refused under MIG ("Nvlink queries are
        not supported for Devices in MIG mode") and on a GPU without links; a link past the last
        is invalid."""
        gpu = self._physical(handle, t)
        if not gpu.spec.board.nvlink_links or gpu.mig_on:
            fail(pynvml.NVML_ERROR_NOT_SUPPORTED)
        if not 0 <= link < gpu.spec.board.nvlink_links:
            fail(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return gpu

    def _mig_handle(self, handle: Handle, t: float) -> MigEntry:
        device = self._resolve(handle, t)
        if not isinstance(device, MigEntry):
            fail(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return device

    def _monotonic(self, key: str, gpu: int, value: float) -> int:
        """Return the counter's value, never less than the last one returned, even by a float
        rounding."""
        current = max(int(value), self._high_water.get((key, gpu), 0))
        self._high_water[(key, gpu)] = current
        return current

    @staticmethod
    def _device_handle(address: int) -> Any:
        return ctypes.cast(ctypes.c_void_p(address), pynvml.c_nvmlDevice_t)


def _first_exits(faults: Sequence[Fault]) -> dict[int, float]:
    """Return GPU index -> when its processes first exit (`exit` faults)."""
    exits: dict[int, float] = {}
    for fault in faults:
        if isinstance(fault, ExitFault):
            exits[fault.gpu] = min(fault.at, exits.get(fault.gpu, fault.at))
    return exits


def _validate(profile: P.Profile, faults: Sequence[Fault]) -> None:
    """Check that the faults name only GPUs (and MIG GPU instances) the profile has."""
    count = len(profile.gpus)
    for fault in faults:
        gpu = fault_gpu(fault)
        if gpu is None:
            continue
        if not 0 <= gpu < count:
            raise ValueError(
                f"fault {fault.spec!r}: gpu={gpu} is not a GPU of profile {profile.name!r} "
                f"(it has GPUs 0-{count - 1})"
            )
        gi = fault_gpu_instance(fault)
        if gi is None:
            continue
        layout = profile.gpus[gpu].mig
        if layout is None:
            raise ValueError(
                f"fault {fault.spec!r}: gi={gi} given, but GPU {gpu} of profile "
                f"{profile.name!r} has MIG off"
            )
        ids = [g.gi_id for g in layout]
        if gi not in ids:
            raise ValueError(
                f"fault {fault.spec!r}: gi={gi} is not a GPU instance of GPU {gpu} in profile "
                f"{profile.name!r}; expected one of {', '.join(map(str, ids))}"
            )


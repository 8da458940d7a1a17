"""The compute processes on the simulated node's time-sliced GPUs.

Each process holds a fixed share of its GPU's used framebuffer and of its busy time, so the
processes' figures follow the GPU's own (memory ramps, idle windows) and never add up to more
than the device reports. PIDs and shares are a pure function of (profile, seed). The PIDs are
host PIDs of processes that do not exist on the machine running the simulation.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from exporter.simulated.node.profiles import Profile

MIB = 1024 * 1024
PID_RANGE = range(1000, 4_194_304)
"""Linux's default pid_max on 64-bit hosts; low PIDs belong to system daemons."""
SAMPLE_PERIOD_S = 1 / 6
"""How often NVML records a process utilisation sample (its utilisation sampling period)."""


@dataclass(frozen=True, slots=True)
class SimProcess:
    """One compute process on a time-sliced GPU: its pid and its shares of the framebuffer and of
    the busy time."""

    pid: int
    memory_share: float
    """Part of the GPU's used framebuffer this process holds."""
    busy_share: float
    """Part of the GPU's busy time that is this process's turn."""


def plan_processes(profile: Profile, seed: int) -> dict[int, tuple[SimProcess, ...]]:
    """Return each GPU index's processes (only GPUs with `shared_by` and MIG off have any)."""
    rng = random.Random(f"{profile.name}|{seed}|processes")
    shared = [g for g in profile.gpus if g.shared_by and g.mig is None]
    # Drawn together so no two processes on the node share a PID.
    pids = iter(rng.sample(PID_RANGE, sum(g.shared_by for g in shared)))
    plan: dict[int, tuple[SimProcess, ...]] = {}
    for gpu in shared:
        memory = _shares(rng, gpu.shared_by)
        busy = _shares(rng, gpu.shared_by)
        plan[gpu.index] = tuple(
            SimProcess(next(pids), m, b) for m, b in zip(memory, busy, strict=True))
    return plan


def _shares(rng: random.Random, n: int) -> list[float]:
    """Return `n` shares summing to 1, none tiny: replicas of one workload differ, but not
    wildly."""
    weights = [rng.uniform(0.6, 1.4) for _ in range(n)]
    total = sum(weights)
    return [w / total for w in weights]


def process_memory_bytes(used_bytes: int, share: float) -> int:
    """Return a process's framebuffer, in whole MiB as NVML reports it; rounding down keeps the sum
    over processes within the device's used memory."""
    return math.floor(used_bytes * share / MIB) * MIB


def last_sample_time(t: float) -> float:
    """Return the simulated time of the latest utilisation sample NVML holds at t."""
    return math.floor(t / SAMPLE_PERIOD_S) * SAMPLE_PERIOD_S

"""Where a scraped sample of the simulated node falls in simulated time.

The simulated node's values are pure functions of (profile, seed, faults, simulated time),
and its energy counter only rises, so one scraped energy reading gives the simulated time of
the poll that read it; every value of that poll can then be recomputed."""

from __future__ import annotations

from exporter.simulated.node.dynamics import GpuDynamics


def simulated_time_of(gpu: GpuDynamics, energy_mj: float) -> float:
    """The simulated time at which `gpu`'s energy counter read `energy_mj`."""
    low, high = 0.0, 1.0
    while gpu.energy_mj(high) < energy_mj:
        high *= 2
    for _ in range(60):
        middle = (low + high) / 2
        low, high = (middle, high) if gpu.energy_mj(middle) < energy_mj else (low, middle)
    return low

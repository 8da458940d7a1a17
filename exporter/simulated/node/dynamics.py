"""What one simulated GPU shows at simulated time t.

Activity lives on "leaves": the whole GPU when MIG is off, else each compute instance, each
weighted by its share of the GPU's compute slices. Power follows activity (scaled down
during thermal or power-brake slowdowns), energy is its exact integral, temperature follows
the last minute's power, and every counter is an integral of activity, so all values are
pure functions of (profile, seed, t) and counters only grow.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Sequence
from dataclasses import dataclass

from exporter.simulated.node.fault_specs import (
    EccFault,
    Fault,
    FbRampFault,
    IdleFault,
    InforomFault,
    NvlinkDownFault,
    NvlinkFault,
    PcieReplayFault,
    PowerBrakeFault,
    RecoveryFault,
    RemapFault,
    ResetFault,
    RetireFault,
    ThermalFault,
    Window,
)
from exporter.simulated.node.profiles import GpuSpec
from exporter.simulated.node.waves import GatedWave, Wave, breakpoints, covered, merge

MIB = 1024 * 1024

# nvmlClocksEventReason* bits
REASON_GPU_IDLE = 0x1
REASON_SW_POWER_CAP = 0x4
REASON_HW_SLOWDOWN = 0x8
REASON_HW_THERMAL_SLOWDOWN = 0x40
REASON_HW_POWER_BRAKE_SLOWDOWN = 0x80

IDLE_ACTIVITY = 0.05
"""Below this activity the GPU drops to its idle clocks."""
THERMAL_POWER_FACTOR = 0.7
BRAKE_POWER_FACTOR = 0.3
THERMAL_CLOCK_FACTOR = 0.55
BRAKE_CLOCK_FACTOR = 0.3
TEMPERATURE_LAG_S = 60.0
"""Temperature follows the mean power of this trailing window."""

Scope = tuple[int, ...]
"""() the whole GPU, (gi,) one GPU instance, (gi, ci) one compute instance."""


@dataclass(frozen=True, slots=True)
class Leaf:
    """One place activity lives: the whole GPU without MIG, or one compute instance under MIG."""

    gi: int | None
    ci: int | None
    weight: float
    """Share of the GPU's compute (compute slices / 7 under MIG, 1 without)."""
    gi_weight: float
    """Share of its GPU instance's compute."""
    activity: GatedWave


@dataclass(frozen=True, slots=True)
class MemoryRamp:
    """Framebuffer use of one memory scope: jobs fill it gradually, then restart."""

    total_mib: int
    reserved_mib: int
    low: float
    high: float
    period_s: float
    offset_s: float
    ramps: tuple[FbRampFault, ...]

    def _normal(self, t: float) -> float:
        phase = ((t + self.offset_s) / self.period_s) % 1.0
        return (self.low + (self.high - self.low) * phase) * (self.total_mib - self.reserved_mib)

    def used_mib(self, t: float) -> float:
        """Return the framebuffer used at t, in MiB, following a fault's ramp once one has
        started."""
        used = self._normal(t)
        started = [r for r in self.ramps if r.at <= t]
        if started:
            ramp = max(started, key=lambda r: r.at)
            start = self._normal(ramp.at)
            target = ramp.to_percent / 100.0 * self.total_mib
            progress = 1.0 if ramp.over <= 0 else min(1.0, (t - ramp.at) / ramp.over)
            used = start + (target - start) * progress
        return min(max(used, 0.0), float(self.total_mib - self.reserved_mib))


class GpuDynamics:
    """Every figure of one simulated GPU as a function of simulated time, derived from its board, a
    seed and the faults it is told to show."""

    def __init__(self, profile: str, spec: GpuSpec, seed: int, faults: Sequence[Fault]) -> None:
        self.spec = spec
        board = spec.board
        self.board = board
        mine = [f for f in faults if getattr(f, "gpu", None) == spec.index]
        rng = random.Random(f"{profile}|{seed}|gpu{spec.index}")

        gpu_idle = [f.window for f in mine if isinstance(f, IdleFault) and f.gpu_instance is None]
        self.gpu_idle = merge(gpu_idle)
        self.thermal = merge(f.window for f in mine if isinstance(f, ThermalFault))
        self.brake = merge(f.window for f in mine if isinstance(f, PowerBrakeFault))
        self.ecc = tuple(f for f in mine if isinstance(f, EccFault))
        self.remap = tuple(f for f in mine if isinstance(f, RemapFault))

        leaves: list[Leaf] = []
        memory: dict[int | None, MemoryRamp] = {}
        ramps = [f for f in mine if isinstance(f, FbRampFault)]
        if spec.mig is None:
            wave = Wave.random(rng, 0.08, 0.75)
            leaves.append(Leaf(None, None, 1.0, 1.0, GatedWave(wave, self.gpu_idle)))
            memory[None] = self._memory(rng, board.memory_total_mib, board.memory_reserved_mib,
                                        ramps)
        else:
            for gi in spec.mig:
                gi_idle = [f.window for f in mine
                           if isinstance(f, IdleFault) and f.gpu_instance == gi.gi_id]
                idle = merge([*gpu_idle, *gi_idle])
                for ci in gi.compute_instances:
                    wave = Wave.random(rng, 0.1, 0.75)
                    leaves.append(Leaf(gi.gi_id, ci.ci_id, ci.slices / 7.0, ci.slices / gi.slices,
                                       GatedWave(wave, idle)))
                gi_ramps = [r for r in ramps if r.gpu_instance in (None, gi.gi_id)]
                memory[gi.gi_id] = self._memory(rng, gi.memory_mib, 0, gi_ramps)
        self.leaves = tuple(leaves)
        self.memory = memory

        # Counters that were already running before the simulated node started.
        uptime = rng.uniform(2, 9) * 86400.0
        self.energy_at_start_mj = uptime * board.power_idle_w * rng.uniform(1.5, 4.0) * 1000.0
        self.nvlink_kib_at_start = uptime * rng.uniform(5e4, 5e5) if board.nvlink_links else 0.0
        self.replays_per_active_s = rng.choice((0.0, 0.0, 0.0, 0.002, 0.02))
        self.replays_at_start = rng.randint(0, 40) if self.replays_per_active_s else 0
        self.aggregate_sbe = rng.choice((0, 0, 0, 1, 3))
        self.nvlink_crc_per_active_s = rng.choice((0.0, 0.0, 0.0, 1e-3)) \
            if board.nvlink_links else 0.0
        self.nvlink_faults = tuple(f for f in mine if isinstance(f, NvlinkFault))
        self.replay_bursts = tuple(f for f in mine if isinstance(f, PcieReplayFault))
        self.retire = tuple(f for f in mine if isinstance(f, RetireFault))
        self.inforom = merge(f.window for f in mine if isinstance(f, InforomFault))
        self.links_down = tuple(f for f in mine if isinstance(f, NvlinkDownFault))
        self.recovery = tuple(f for f in mine if isinstance(f, RecoveryFault))
        self.resets = tuple(sorted(f.window.start for f in mine if isinstance(f, ResetFault)))

    @staticmethod
    def _memory(rng: random.Random, total: int, reserved: int,
                ramps: Sequence[FbRampFault]) -> MemoryRamp:
        low = rng.uniform(0.02, 0.15)
        return MemoryRamp(total, reserved, low, rng.uniform(low + 0.2, 0.9),
                          rng.uniform(300.0, 900.0), rng.uniform(0.0, 900.0), tuple(ramps))

    # -- activity ---------------------------------------------------------------------------

    def _leaves(self, scope: Scope) -> list[tuple[Leaf, float]]:
        """Return the leaves in a scope, with their weight inside it."""
        if not scope:
            return [(leaf, leaf.weight) for leaf in self.leaves]
        if len(scope) == 1:
            return [(leaf, leaf.gi_weight) for leaf in self.leaves if leaf.gi == scope[0]]
        return [(leaf, 1.0) for leaf in self.leaves if (leaf.gi, leaf.ci) == scope]

    def activity(self, t: float, scope: Scope = ()) -> float:
        """Return the fraction of the scope's compute busy at t, in [0, 1]."""
        return sum(w * leaf.activity.at(t) for leaf, w in self._leaves(scope))

    def activity_integral(self, t0: float, t1: float, scope: Scope = ()) -> float:
        """Return the integral of the scope's activity from t0 to t1."""
        return sum(w * leaf.activity.integral(t0, t1) for leaf, w in self._leaves(scope))

    def mean_activity(self, t: float, span: float, scope: Scope = ()) -> float:
        """Return the scope's mean activity over the span before t (the activity at t when the span
        is empty)."""
        start = max(0.0, t - span)
        if t - start <= 1e-9:
            return self.activity(t, scope)
        return self.activity_integral(start, t, scope) / (t - start)

    # -- power, energy, temperature ---------------------------------------------------------

    def _power_factor(self, t: float) -> float:
        factor = 1.0
        if any(w.active(t) for w in self.thermal):
            factor *= THERMAL_POWER_FACTOR
        if any(w.active(t) for w in self.brake):
            factor *= BRAKE_POWER_FACTOR
        return factor

    def power_fraction(self, t: float) -> float:
        """Return where the power draw sits between idle and load at t, as a fraction."""
        return self.activity(t) * self._power_factor(t)

    def power_fraction_integral(self, t0: float, t1: float) -> float:
        """Return the integral of the power fraction from t0 to t1."""
        edges = breakpoints((*self.thermal, *self.brake), t0, t1)
        total = 0.0
        for a, b in itertools.pairwise(edges):
            total += self._power_factor((a + b) / 2) * self.activity_integral(a, b)
        return total

    def _watts(self, fraction: float) -> float:
        b = self.board
        return b.power_idle_w + (b.power_load_w - b.power_idle_w) * fraction

    def energy_mj(self, t: float) -> float:
        """Return the energy used by t, in millijoules."""
        b = self.board
        joules = b.power_idle_w * t + (b.power_load_w - b.power_idle_w) * (
            self.power_fraction_integral(0.0, t))
        return self.energy_at_start_mj + joules * 1000.0

    def instant_power_mw(self, t: float) -> float:
        """Return the draw at t itself (NVML_FI_DEV_POWER_INSTANT), not the 1-second mean."""
        return self._watts(self.power_fraction(t)) * 1000.0

    def power_mw(self, t: float) -> float:
        """Return the mean draw over the last second, as NVML reports on Ampere and newer."""
        if t < 1.0:
            return self._watts(self.power_fraction(t)) * 1000.0
        return self.energy_mj(t) - self.energy_mj(t - 1.0)

    def _mean_power_fraction(self, t: float) -> float:
        start = max(0.0, t - TEMPERATURE_LAG_S)
        if t - start <= 1e-9:
            return self.power_fraction(t)
        return self.power_fraction_integral(start, t) / (t - start)

    def thermal_active(self, t: float) -> bool:
        """Return whether a thermal slowdown fault holds at t."""
        return any(w.active(t) for w in self.thermal)

    def brake_active(self, t: float) -> bool:
        """Return whether a power brake fault holds at t."""
        return any(w.active(t) for w in self.brake)

    def gpu_temp_c(self, t: float) -> int:
        """Return the GPU temperature at t, in degrees Celsius."""
        b = self.board
        if self.thermal_active(t):
            return round(b.temp_slowdown_c + 1)
        return round(b.temp_idle_c + (b.temp_load_c - b.temp_idle_c) * self._mean_power_fraction(t))

    def memory_temp_c(self, t: float) -> int | None:
        """Return the memory temperature at t, in degrees Celsius, or None when the board has no
        memory sensor."""
        b = self.board
        if b.mem_temp_idle_c is None or b.mem_temp_load_c is None:
            return None
        if self.thermal_active(t):
            return round(b.mem_temp_load_c + 25)
        span = b.mem_temp_load_c - b.mem_temp_idle_c
        return round(b.mem_temp_idle_c + span * self._mean_power_fraction(t))

    # -- clocks -----------------------------------------------------------------------------

    def _power_capped(self, t: float) -> bool:
        return self.power_mw(t) >= 0.95 * self.board.power_limit_w * 1000.0

    def sm_clock_mhz(self, t: float) -> int:
        """Return the SM clock at t, in MHz: idle when idle, lower under a power cap or thermal
        slowdown."""
        b = self.board
        if self.activity(t) < IDLE_ACTIVITY and not self.thermal_active(t):
            return b.sm_clock_idle_mhz
        clock = float(b.sm_clock_max_mhz)
        if self._power_capped(t):
            clock -= 105
        if self.thermal_active(t):
            clock *= THERMAL_CLOCK_FACTOR
        if self.brake_active(t):
            clock *= BRAKE_CLOCK_FACTOR
        return max(b.sm_clock_idle_mhz, round(clock / 15.0) * 15)

    def mem_clock_mhz(self, t: float) -> int:
        """Return the memory clock at t, in MHz."""
        b = self.board
        if self.activity(t) < IDLE_ACTIVITY:
            return b.mem_clock_idle_mhz
        return b.mem_clock_max_mhz

    def clock_event_reasons(self, t: float) -> int:
        """Return the bit mask of reasons the clocks are held down at t."""
        reasons = 0
        if self.activity(t) < IDLE_ACTIVITY:
            reasons |= REASON_GPU_IDLE
        if self._power_capped(t):
            reasons |= REASON_SW_POWER_CAP
        if self.thermal_active(t):
            reasons |= REASON_HW_SLOWDOWN | REASON_HW_THERMAL_SLOWDOWN
        if self.brake_active(t):
            reasons |= REASON_HW_SLOWDOWN | REASON_HW_POWER_BRAKE_SLOWDOWN
        return reasons

    # -- utilisation ------------------------------------------------------------------------

    def utilization_pct(self, t: float, span: float) -> tuple[float, float]:
        """Return the GPU and memory utilisation (%) over the `span` seconds before t, unrounded."""
        a = self.mean_activity(t, span)
        return 100 * min(1.0, 1.3 * a), 100 * min(1.0, 0.11 * a)

    def utilization(self, t: float) -> tuple[int, int]:
        """Return the GPU and memory utilisation (%) over the last second, integers like NVML's."""
        gpu, memory = self.utilization_pct(t, 1.0)
        return round(gpu), round(memory)

    def encoder_util(self, t: float) -> int:
        """Return the encoder's utilisation percent at t (0 on a board without an encoder)."""
        return round(30 * self.mean_activity(t, 1.0)) if self.board.has_encoder else 0

    def decoder_util(self, t: float) -> int:
        """Return the decoder's utilisation percent at t (0 on a board without an encoder)."""
        return round(45 * self.mean_activity(t, 1.0)) if self.board.has_encoder else 0

    # -- memory -----------------------------------------------------------------------------

    def memory_bytes(self, t: float, gi: int | None = None) -> tuple[int, int, int, int]:
        """Return the total, reserved, free and used bytes of the whole GPU (gi None) or one GPU
        instance."""
        if gi is None and self.spec.mig is not None:
            total, reserved = self.board.memory_total_mib, self.board.memory_reserved_mib
            used = sum(m.used_mib(t) for m in self.memory.values())
            used = min(used, total - reserved)
        else:
            ramp = self.memory[gi]
            total, reserved, used = ramp.total_mib, ramp.reserved_mib, ramp.used_mib(t)
        total_b, reserved_b, used_b = total * MIB, reserved * MIB, int(used * MIB)
        return total_b, reserved_b, total_b - reserved_b - used_b, used_b

    # -- counters ---------------------------------------------------------------------------

    def pcie_replays(self, t: float) -> int:
        """Return the PCIe replay count at t."""
        busy = 0.2 * t + self.activity_integral(0.0, t)
        bursts = sum(f.count for f in self.replay_bursts if f.at <= t)
        return self.replays_at_start + int(self.replays_per_active_s * busy) + bursts

    def retired_pages(self, t: float) -> tuple[int, int, int] | None:
        """Return the retired pages (single-bit, double-bit, pending) on a GPU with a `retire`
        fault, 0 each until the fault starts, since such a GPU retires pages as boards before
        Ampere do. Return None on the others, as boards from Ampere on answer NOT_SUPPORTED (they
        remap rows instead)."""
        if not self.retire:
            return None
        started = [f for f in self.retire if f.at <= t]
        pages = sum(f.pages for f in started)
        # A page pending retirement is retired at the next reset.
        pending = any(f.pending for f in started if f.at >= self.last_reset(t))
        return pages - pages // 2, pages // 2, int(pending)

    def inforom_valid(self, t: float) -> bool:
        """Return whether the InfoROM is valid at t (not while an InfoROM fault holds)."""
        return not any(w.active(t) for w in self.inforom)

    def link_up(self, t: float, link: int) -> bool:
        """Return whether this NVLink is up at t."""
        return not any(f.link == link and f.window.active(t) for f in self.links_down)

    def recovery_action(self, t: float) -> int:
        """Return the recovery action NVML reports (an NVML_GPU_RECOVERY_ACTION_* value): NONE
        (0) unless a `recovery` fault holds."""
        return next((f.action for f in self.recovery if f.window.active(t)), 0)

    def nvlink_kib(self, t: float, direction: str) -> float:
        """Return the cumulative KiB over all links; tx runs a little ahead of rx."""
        share = 0.6 if direction == "tx" else 0.55
        peak_kib_s = self.board.nvlink_peak_gib_s * 1024 * 1024
        start = self.nvlink_kib_at_start * (1.0 if direction == "tx" else 0.92)
        return start + peak_kib_s * share * self.activity_integral(0.0, t)

    def nvlink_errors(self, t: float, link: int, counter: int) -> int:
        """Return the NVML_NVLINK_ERROR_DL_* count of one link: a healthy link's rare CRC flit
        errors (each corrected by a replay), plus what `nvlink` faults on that link add."""
        busy = self.activity_integral(0.0, t)
        crc = int(self.nvlink_crc_per_active_s * busy * (1 + link % 3))
        for f in self.nvlink_faults:
            if f.link == link and f.at <= t:
                crc += int(f.crc_per_s * (min(t, f.until) - f.at))
        # NVML_NVLINK_ERROR_DL_REPLAY 0, _RECOVERY 1, _CRC_FLIT 2, _CRC_DATA 3
        return {0: crc // 2, 1: crc // 50, 2: crc, 3: crc // 10}.get(counter, 0)

    def last_reset(self, t: float) -> float:
        """Return when the last `reset` fault before t started (-inf: none has)."""
        return max((at for at in self.resets if at <= t), default=float("-inf"))

    def ecc_volatile(self, t: float) -> tuple[int, int]:
        """Return the single-bit and double-bit ECC error counts since the driver loaded or
        the GPU was last reset."""
        since = self.last_reset(t)
        started = [f for f in self.ecc if since <= f.at <= t]
        return sum(f.sbe for f in started), sum(f.dbe for f in started)

    def ecc_aggregate(self, t: float) -> tuple[int, int]:
        """Return the single-bit and double-bit ECC error counts of the GPU's life (a reset
        keeps them)."""
        started = [f for f in self.ecc if f.at <= t]
        return (self.aggregate_sbe + sum(f.sbe for f in started),
                sum(f.dbe for f in started))

    def remapped_rows(self, t: float) -> tuple[int, int, int, int]:
        """Return the remapped rows at t: correctable (always 0), uncorrectable, pending and
        failure."""
        started = [f for f in self.remap if f.at <= t]
        pending = int(any(f.pending for f in started))
        failure = int(any(f.failure for f in started))
        return 0, len(started), pending, failure

    def violation_ns(self, t: float, kind: str) -> int:
        """Return the nanoseconds spent under this kind of clock violation (thermal, power or
        low-util) by t; 0 for any other kind."""
        if kind == "thermal":
            windows: Sequence[Window] = self.thermal
        elif kind == "power":
            windows = self.brake
        elif kind == "low-util":
            windows = self.gpu_idle
        else:
            return 0
        return int(covered(windows, 0.0, t) * 1e9)

    # -- GPM --------------------------------------------------------------------------------

    def scope_weight(self, scope: Scope) -> float:
        """Return the share of the GPU's compute a scope holds."""
        return sum(leaf.weight for leaf, _ in self._leaves(scope)) if scope else 1.0

    def has_scope(self, scope: Scope) -> bool:
        """Return whether the GPU has this scope: the whole GPU always, an instance only under
        MIG."""
        return not scope or bool(self._leaves(scope))


def gpm_metric(board_peak_pcie: float, nvlink_peak_gib_s: float, metric_id: int,
               mean_activity: float, weight: float, nvlink: bool,
               engines: tuple[int, int, int] = (0, 0, 0), links: int = 0) -> float | None:
    """Return a GPM metric from the mean activity between two samples; None if not modelled.

    `engines`: the board's NVDEC, NVJPG and NVOFA counts (idle under compute loads: 0 %);
    `links`: its NVLink count, over which the per-link rates share the total."""
    a = mean_activity
    share = GPM_UTIL_SHARES.get(metric_id)
    if share is not None:
        return 100.0 * min(1.0, share * a)
    for first, count in zip((30, 40, 50), engines, strict=True):  # NVDEC_0, NVJPG_0, NVOFA_0
        if first <= metric_id < first + 8:
            return 0.0 if metric_id - first < count else None
    if 62 <= metric_id <= 97 and nvlink and (metric_id - 62) // 2 < links:
        total_id = 60 if metric_id % 2 == 0 else 61  # NVLINK_Ln_RX even, _TX odd
        total = gpm_metric(board_peak_pcie, nvlink_peak_gib_s, total_id, a, weight, nvlink)
        return None if total is None else total / links
    if metric_id == 20:  # PCIE_TX_PER_SEC
        return board_peak_pcie * weight * (0.01 + 0.25 * a)
    if metric_id == 21:  # PCIE_RX_PER_SEC
        return board_peak_pcie * weight * (0.01 + 0.35 * a)
    if metric_id in (60, 61) and nvlink:  # NVLINK_TOTAL_RX / TX_PER_SEC
        share_link = 0.55 if metric_id == 60 else 0.6
        return nvlink_peak_gib_s * 1024 * share_link * a
    return None


GPM_UTIL_SHARES: dict[int, float] = {
    1: 1.0,  # GRAPHICS_UTIL
    2: 0.92,  # SM_UTIL
    3: 0.55,  # SM_OCCUPANCY
    4: 0.1,  # INTEGER_UTIL
    5: 0.6,  # ANY_TENSOR_UTIL
    6: 0.05,  # DFMA_TENSOR_UTIL
    7: 0.55,  # HMMA_TENSOR_UTIL
    9: 0.05,  # IMMA_TENSOR_UTIL
    10: 0.45,  # DRAM_BW_UTIL
    11: 0.04,  # FP64_UTIL
    12: 0.3,  # FP32_UTIL
    13: 0.5,  # FP16_UTIL
}

"""Poll cost of the NVML backend through the real pynvml, next to the cost of the calls alone.

Usage: .venv/bin/python benchmarks/bench_nvml_poll.py [--gpus 8] [--cycles 300] [--profile]
       [--all-fields]

Both sides run in this process over the simulated `libnvidia-ml.so.1` (tests/nvmlsim), built
on demand, with every default field of collectors.csv enabled (`--all-fields`: every field
the exporter serves, on GPUs that answer each of them, NVLink links included):

- floor: the pynvml calls one `NvmlBackend.poll()` makes, issued in a bare loop over cached
  handles (the same calls, counted by the library and checked to match); for `--all-fields`
  the loop makes the calls the backend planned, each answer read once;
- backend: `NvmlBackend.poll()` itself;
- as serve polls: `NvmlBackend.poll()` with the reads that held faults need (`fault_reads`,
  always on in `serve`: health and volatile ECC counts on every GPU), beside the backend
  without them, so the row says what the fault reads add to a poll.

The simulated clock advances one second between cycles (outside the timed region), so every
cycle does the full work, GPM included. Prints one table; nothing is asserted. With
`--profile`, or when the backend costs more than 1.5x the floor, a cProfile summary of the
backend's cycles follows.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import statistics
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.nvmlsim import control  # noqa: E402
from tests.nvmlsim.build import build_library  # noqa: E402

TARGET_RATIO = 1.5


def scenario(gpus: int) -> dict[str, Any]:
    return {
        "clock": "manual",
        "device_count": gpus,
        "device_defaults": {
            "power_w": 450, "gpu_util": 80, "memory_util": 40, "memory_used_mib": 60000,
            "nvlink_tx_kib_per_s": 1 << 20, "nvlink_rx_kib_per_s": 1 << 20,
            "gpm": {"1": 80, "2": 70, "3": 40, "5": 30, "10": 50, "11": 1, "12": 20, "13": 10,
                    "20": 500, "21": 400, "60": 9000, "61": 9000},
        },
    }


def call_counts(sim: control.NvmlSim) -> Counter[str]:
    return Counter({fn: sim.call_count(fn) for fn in sim.functions() if sim.call_count(fn)})


def make_floor(pynvml: Any, gpus: int) -> Callable[[], None]:
    """Return the backend's per-cycle NVML calls for a non-MIG GPU, each answer read once, with
    nothing else around them (one reusable GPM request: the least a caller must do)."""
    handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(gpus)]
    all_links = 0xFFFFFFFF
    field_ids = [82, 3, 4, 38, 45, 52, 59, (138, all_links), (139, all_links)]
    gpm_ids = [1, 2, 3, 5, 10, 11, 12, 13, 20, 21, 61, 60]
    samples = [[pynvml.nvmlGpmSampleAlloc(), pynvml.nvmlGpmSampleAlloc()] for _ in handles]
    for h, (prev, _) in zip(handles, samples, strict=True):
        pynvml.nvmlGpmSampleGet(h, prev)
    request = pynvml.c_nvmlGpmMetricsGet_t()
    request.version = pynvml.NVML_GPM_METRICS_GET_VERSION
    request.numMetrics = len(gpm_ids)
    for i, metric in enumerate(gpm_ids):
        request.metrics[i].metricId = metric
    mem_v2 = pynvml.nvmlMemory_v2

    def cycle() -> None:
        # each answer is read out once, as any consumer must
        values: list[float] = []
        add = values.append
        for h, pair in zip(handles, samples, strict=True):
            add(pynvml.nvmlDeviceGetClockInfo(h, 1))
            add(pynvml.nvmlDeviceGetClockInfo(h, 2))
            add(pynvml.nvmlDeviceGetTemperature(h, 0))
            add(pynvml.nvmlDeviceGetPowerUsage(h) / 1000)
            add(pynvml.nvmlDeviceGetPowerManagementLimit(h) / 1000)
            add(pynvml.nvmlDeviceGetTotalEnergyConsumption(h))
            add(pynvml.nvmlDeviceGetPcieReplayCounter(h))
            util = pynvml.nvmlDeviceGetUtilizationRates(h)
            add(util.gpu)
            add(util.memory)
            add(pynvml.nvmlDeviceGetEncoderUtilization(h)[0])
            add(pynvml.nvmlDeviceGetDecoderUtilization(h)[0])
            mem = pynvml.nvmlDeviceGetMemoryInfo(h, version=mem_v2)
            add(mem.free >> 20)
            add(mem.used >> 20)
            add(mem.reserved >> 20)
            values.extend(pynvml.nvmlDeviceGetRemappedRows(h)[:2])
            add(pynvml.nvmlDeviceGetCurrentClocksEventReasons(h))
            for entry in pynvml.nvmlDeviceGetFieldValues(h, field_ids):
                add(entry.value.ullVal)
            add(pynvml.nvmlDeviceGetMigMode(h)[0])
            prev, cur = pair
            pynvml.nvmlGpmSampleGet(h, cur)
            request.sample1, request.sample2 = prev, cur
            pynvml.nvmlGpmMetricsGet(request)
            for i in range(len(gpm_ids)):
                add(request.metrics[i].value)
            pair[0], pair[1] = cur, prev

    return cycle


def every_field_scenario(gpus: int) -> dict[str, Any]:
    """Return GPUs that answer every served field (tests/nvmlsim/every_field.py)."""
    from tests.nvmlsim import every_field

    device = {k: v for k, v in every_field.build().device.items()
              if k not in ("name", "uuid", "pci_bus_id")}
    return {"clock": "manual", "device_count": gpus, "device_defaults": device}


def make_plan_floor(pynvml: Any, backend: Any) -> Callable[[], None]:
    """Return the calls of the backend's plans in a bare loop: the bound calls as planned, one
    field-values call and one GPM read per entity, each answer read once."""
    from exporter.devices.read_plan import FieldValue

    steps = []
    for work in backend._reader._work:  # the plans themselves: their calls, not their logic
        plan = work.plan
        pair = [pynvml.nvmlGpmSampleAlloc(), pynvml.nvmlGpmSampleAlloc()]
        pynvml.nvmlGpmSampleGet(plan.handle, pair[0])
        request = None
        if plan.gpm is not None:
            request = pynvml.c_nvmlGpmMetricsGet_t()
            request.version = pynvml.NVML_GPM_METRICS_GET_VERSION
            request.numMetrics = len(plan.gpm.metric_ids)
            for i, metric in enumerate(plan.gpm.metric_ids):
                request.metrics[i].metricId = metric
        requests = list(plan.field_values.requests) if plan.field_values else []
        steps.append((plan.handle, [s.call for s in plan.calls], requests, request, pair))

    def cycle() -> None:
        values: list[Any] = []
        add = values.append
        for handle, calls, requests, request, pair in steps:
            for call in calls:
                add(call())
            if requests:
                entries = pynvml.nvmlDeviceGetFieldValues(handle, requests)
                for entry in (FieldValue * len(requests)).from_buffer(entries):
                    add(entry.value.ullVal)
            add(pynvml.nvmlDeviceGetMigMode(handle)[0])
            if request is not None:
                prev, cur = pair
                pynvml.nvmlGpmSampleGet(handle, cur)
                request.sample1, request.sample2 = prev, cur
                pynvml.nvmlGpmMetricsGet(request)
                for i in range(request.numMetrics):
                    add(request.metrics[i].value)
                pair[0], pair[1] = cur, prev

    return cycle


def timed(cycle: Callable[[], object], sim: control.NvmlSim, cycles: int) -> list[float]:
    """Return the microseconds per cycle."""
    out = []
    for _ in range(cycles):
        sim.advance(1.0)
        start = time.perf_counter_ns()
        cycle()
        out.append((time.perf_counter_ns() - start) / 1000)
    return out


def p90(values: list[float]) -> float:
    return statistics.quantiles(values, n=10)[-1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--cycles", type=int, default=300)
    parser.add_argument("--profile", action="store_true", help="always print a cProfile summary")
    parser.add_argument("--all-fields", action="store_true",
                        help="every served field instead of collectors.csv's")
    args = parser.parse_args()

    lib_dir = build_library()
    sim = control.load(lib_dir)  # before pynvml's first call: pynvml then shares it
    sim.load_scenario(every_field_scenario(args.gpus) if args.all_fields
                      else scenario(args.gpus))
    import pynvml

    from exporter.devices.nvml import NvmlBackend
    from exporter.fields.csv import load_collectors
    from tests.nvmlsim import every_field

    specs = every_field.served_specs() if args.all_fields else \
        load_collectors(ROOT / "collectors.csv").specs
    backend = NvmlBackend(pynvml, specs, clock=sim.time)
    backend.start()
    assert pynvml.nvmlLib is not None
    assert sim.shares_library_with(pynvml.nvmlLib)
    serving = NvmlBackend(pynvml, specs, clock=sim.time, fault_reads=True)
    serving.start()
    for _ in range(3):  # enumerate, first GPM sample, first full cycle
        sim.advance(1.0)
        backend.poll()
        serving.poll()
    sim.advance(1.0)
    sim.reset_call_counts()
    serving.poll()
    serving_calls = call_counts(sim)
    serving_calls.pop("nvmlEventSetWait_v2", None)

    # What one backend cycle calls, to hold the floor to the same work.
    sim.advance(1.0)
    sim.reset_call_counts()
    readings = backend.poll()
    backend_calls = call_counts(sim)
    series = sum(len(v) for v in readings.values.values()) + sum(
        len(v) for v in readings.links.values())
    floor = make_plan_floor(pynvml, backend) if args.all_fields else make_floor(pynvml,
                                                                                  args.gpus)
    sim.advance(1.0)
    sim.reset_call_counts()
    floor()
    floor_calls = call_counts(sim)
    # the XID watcher's blocking waits run in their own thread, not in the poll
    backend_calls.pop("nvmlEventSetWait_v2", None)
    floor_calls.pop("nvmlEventSetWait_v2", None)
    same_calls = backend_calls == floor_calls

    # interleave rounds so drift on a shared machine hits both sides alike
    floor_us: list[float] = []
    backend_us: list[float] = []
    serving_us: list[float] = []
    rounds = 5
    for _ in range(rounds):
        floor_us += timed(floor, sim, args.cycles // rounds)
        backend_us += timed(backend.poll, sim, args.cycles // rounds)
        serving_us += timed(serving.poll, sim, args.cycles // rounds)

    per_cycle_calls = sum(floor_calls.values())
    ratio = statistics.median(backend_us) / statistics.median(floor_us)
    print(f"NVML poll cost: {args.gpus} GPUs, {len(specs)} fields enabled, "
          f"{series} values per cycle, {len(floor_us)} cycles each")
    print(f"pynvml {pynvml.__name__} over {lib_dir}/libnvidia-ml.so.1 (simulated)")
    print()
    print(f"{'':28}{'median µs':>12}{'p90 µs':>12}{'max µs':>12}{'NVML calls':>12}"
          f"{'x floor':>10}")
    for label, values, calls in (
        ("floor (bare pynvml calls)", floor_us, per_cycle_calls),
        ("NvmlBackend.poll()", backend_us, sum(backend_calls.values())),
        ("as serve polls (faults)", serving_us, sum(serving_calls.values())),
    ):
        print(f"{label:28}{statistics.median(values):12.0f}{p90(values):12.0f}"
              f"{max(values):12.0f}{calls:12d}"
              f"{statistics.median(values) / statistics.median(floor_us):10.2f}")
    print()
    print(f"target <= {TARGET_RATIO}x floor: {'met' if ratio <= TARGET_RATIO else 'MISSED'} "
          f"({ratio:.2f}x); same NVML calls on both sides: {same_calls}")
    if not same_calls:
        diff = (backend_calls - floor_calls) + (floor_calls - backend_calls)
        print("  calls that differ (backend vs floor):",
              {fn: (backend_calls[fn], floor_calls[fn]) for fn in sorted(diff)})
    print(f"fault reads: {statistics.median(serving_us) / statistics.median(backend_us):.2f}x "
          f"the poll without them, {sum(serving_calls.values()) - sum(backend_calls.values())} "
          "more NVML calls")
    per_call = statistics.median(floor_us) / max(per_cycle_calls, 1)
    print(f"floor per NVML call through pynvml + ctypes: {per_call:.2f} µs")

    if args.profile or ratio > TARGET_RATIO:
        profiler = cProfile.Profile()
        for _ in range(100):
            sim.advance(1.0)
            profiler.enable()
            backend.poll()
            profiler.disable()
        text = io.StringIO()
        pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(18)
        print()
        print("where a backend cycle spends its time (cProfile, 100 cycles, by own time):")
        print("\n".join(line for line in text.getvalue().splitlines()[4:] if line.strip()))
    backend.close()
    serving.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())

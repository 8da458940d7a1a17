"""The backend over the simulated node, on a clock the test moves: a driver that goes away
under a running backend, and a reload of the field list."""

from __future__ import annotations

from exporter.devices.nvml import NvmlBackend
from exporter.fields.csv import default_collectors_path, load_collectors
from exporter.simulated.node import SimNvml, parse_fault
from tests.support.clock import FakeClock

SPECS = load_collectors(default_collectors_path()).specs
PROF = "DCGM_FI_PROF_GR_ENGINE_ACTIVE"


def backend_on(profile: str, *faults: str) -> tuple[NvmlBackend, FakeClock]:
    clock = FakeClock()
    lib = SimNvml(profile, faults=[parse_fault(f) for f in faults], clock=clock)
    backend = NvmlBackend(lib, SPECS, clock=clock)
    backend.start()
    return backend, clock


def test_a_driver_gone_mid_run_is_initialised_again() -> None:
    backend, clock = backend_on("l4-1", "nvml-down,at=10s,for=5s")
    assert backend.poll().values
    assert backend.up
    clock.advance(11.0)  # the driver goes away: every call answers UNINITIALIZED
    assert backend.poll().values == {}
    assert not backend.up
    assert "UNINITIALIZED" in (backend.last_init_error or "")
    clock.advance(2.0)  # still down: nvmlInit is retried and fails
    assert backend.poll().values == {}
    assert not backend.up
    clock.advance(10.0)  # the driver is back: initialised and read again, no restart
    assert backend.poll().values
    assert backend.up
    backend.close()


def test_a_reload_keeps_profiling_rates_flowing() -> None:
    backend, clock = backend_on("h100-8")
    backend.poll()
    clock.advance(1.0)
    assert PROF in backend.poll().values[(0, -1)]  # the second sample gives rates
    backend.set_fields(SPECS)  # SIGHUP with the same file: a reload
    clock.advance(1.0)
    assert PROF in backend.poll().values[(0, -1)], "a reload lost the GPM sample pairs"
    backend.close()


def test_a_gpu_lost_just_before_a_walk_is_counted() -> None:
    backend, clock = backend_on("h100-8", "lost,gpu=7,at=10s,for=5s")
    backend.poll()
    backend.set_fields(SPECS)  # a reload: the next poll walks the devices first
    clock.advance(11.0)
    assert (7, -1) not in backend.poll().values
    assert backend.gpus_lost_total == 1
    clock.advance(10.0)
    for _ in range(3):  # found again by a later walk; not counted twice meanwhile
        clock.advance(10.0)
        backend.poll()
    assert (7, -1) in backend.poll().values
    assert backend.gpus_lost_total == 1
    backend.close()

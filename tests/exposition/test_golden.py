"""Golden exposition of each simulated profile, at fixed simulated times.

Regenerate after an intended change with `UPDATE_GOLDEN=1 pytest tests/exposition/test_golden.py`
and review the diff: it shows exactly what users' dashboards would see change.
"""

from __future__ import annotations

import os

import pytest
from prometheus_client.parser import text_string_to_metric_families

from exporter.config import ServeConfig
from exporter.devices.nvml import NvmlBackend
from exporter.exposition.render import device_families, render
from exporter.fields.csv import default_collectors_path, load_collectors
from exporter.sampling.snapshot import HostLabel, Snapshot
from exporter.simulated.node import SimNvml, profile_names
from tests.support.clock import FakeClock
from tests.support.paths import ROOT

GOLDEN = ROOT / "tests" / "golden"


def exposition(profile: str) -> str:
    clock = FakeClock(start=1_700_000_000.0)
    collectors = load_collectors(default_collectors_path())
    backend = NvmlBackend(SimNvml(profile, seed=7, clock=clock), collectors.specs,
                          clock=clock, wall_clock=clock)
    backend.start()
    try:
        for _ in range(3):  # GPM rates need two samples; let values move a little
            readings = backend.poll()
            clock.advance(15.0)
        host = HostLabel(ServeConfig().sampler.host.name, "node-a")  # serve's default label
        snapshot = Snapshot(backend.inventory, readings, collectors, host)
        return render(device_families(snapshot)).text.decode()
    finally:
        backend.close()


@pytest.mark.parametrize("profile", ["h100-8", "h200-mig", "a100-timesliced", "l4-1"])
def test_golden_exposition(profile: str) -> None:
    assert profile in profile_names()
    text = exposition(profile)
    path = GOLDEN / f"{profile}.prom"
    if os.environ.get("UPDATE_GOLDEN"):
        path.write_text(text)
    assert text == path.read_text(), f"exposition of {profile} changed; see module docstring"
    # Independent of the golden file: it parses, and no two series share a label set.
    seen = set()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            key = (sample.name, tuple(sorted(sample.labels.items())))
            assert key not in seen
            seen.add(key)


def test_profiles_differ_where_hardware_differs() -> None:
    l4 = exposition("l4-1")
    a100 = exposition("a100-timesliced")
    # No GPM before Hopper: only the profiling series NVML measures too, never zeros for
    # the others; no NVLink on the L4, so no NVLink bytes either.
    assert "DCGM_FI_PROF_GR_ENGINE_ACTIVE{" in l4
    assert "DCGM_FI_PROF_PCIE_TX_BYTES{" in l4
    assert "DCGM_FI_PROF_NVLINK_TX_BYTES{" not in l4
    assert "DCGM_FI_PROF_NVLINK_TX_BYTES{" in a100
    for pipe in ("SM_ACTIVE", "SM_OCCUPANCY", "PIPE_TENSOR_ACTIVE", "PIPE_FP64_ACTIVE"):
        assert f"DCGM_FI_PROF_{pipe}" not in l4
        assert f"DCGM_FI_PROF_{pipe}" not in a100
    # The L4 has no NVLink and no memory temperature sensor: omitted.
    assert "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL{" not in l4
    assert "DCGM_FI_DEV_MEMORY_TEMP{" not in l4
    assert "DCGM_FI_DEV_MEMORY_TEMP{" in a100

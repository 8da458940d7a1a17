"""The poll loop around a real backend on the simulated node; a hang is injected by wrapping
the backend's poll (NVML calls that never return cannot be produced otherwise)."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from exporter.devices.model import Readings
from exporter.devices.nvml import NvmlBackend
from exporter.exposition.publisher import Publisher
from exporter.exposition.render import Rendered
from exporter.fields.csv import default_collectors_path, load_collectors
from exporter.sampling.config import SamplerSettings
from exporter.sampling.sampler import Sampler
from exporter.sampling.snapshot import HostLabel
from exporter.sampling.worker import DaemonExecutor
from exporter.simulated.node import SimNvml


class Hangable(NvmlBackend):
    def __init__(self) -> None:
        super().__init__(SimNvml("h100-8"), load_collectors(default_collectors_path()).specs)
        self.release = threading.Event()
        self.release.set()
        self.polled_on: set[str] = set()

    def poll(self) -> Readings:
        self.polled_on.add(threading.current_thread().name)
        self.release.wait(30)
        return super().poll()


def values(sampler: Sampler[Rendered]) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = sampler.current.text.decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for f in text_string_to_metric_families(text) for s in f.samples}


def make(backend: Hangable, interval: float,
         clock: Callable[[], float] = time.time,
         poll_worker: DaemonExecutor | None = None) -> Sampler[Rendered]:
    settings = SamplerSettings(interval_s=interval, host=HostLabel("Hostname", "n"),
                               deadline_s=0.3)
    return Sampler(backend, load_collectors(default_collectors_path()), settings,
                   Publisher("sim"), wall_clock=clock, poll_worker=poll_worker)


async def test_a_stuck_poll_is_counted_and_published_while_old_data_stays() -> None:
    backend = Hangable()
    backend.start()
    sampler = make(backend, 1.0)
    await sampler.poll_once()
    assert sampler.readiness()[0]
    before = values(sampler)
    assert ("DCGM_FI_DEV_GPU_TEMP", (("DCGM_FI_DRIVER_VERSION", "590.48.01"),
            ("Hostname", "n"), ("UUID", backend.inventory.gpus[0].uuid), ("device", "nvidia0"),
            ("gpu", "0"), ("modelName", backend.inventory.gpus[0].model),
            ("pci_bus_id", backend.inventory.gpus[0].pci_bus_id))) in before
    backend.release.clear()
    await sampler.poll_once()  # hits the deadline
    await sampler.poll_once()  # the driver is still stuck: busy
    after = values(sampler)
    assert after[("gpu_exporter_poll_errors_total", (("reason", "deadline"),))] == 1
    assert after[("gpu_exporter_poll_errors_total", (("reason", "busy"),))] == 1
    # The device series are the last good ones, not dropped and not zeroed.
    assert {k: v for k, v in after.items() if k[0].startswith("DCGM_")} == \
        {k: v for k, v in before.items() if k[0].startswith("DCGM_")}
    backend.release.set()
    await sampler.close()


async def test_ready_turns_503_when_data_goes_stale() -> None:
    now = [1000.0]
    backend = Hangable()
    backend.start()
    sampler = make(backend, 1.0, clock=lambda: now[0])
    assert sampler.readiness() == (False, "not ready: no successful poll yet")
    await sampler.poll_once()
    assert sampler.readiness()[0]
    now[0] += 2.9
    assert sampler.readiness()[0]
    now[0] += 0.2
    ok, reason = sampler.readiness()
    assert not ok
    assert reason.startswith("stale: last successful poll 3.1s ago (limit 3.0s)")
    await sampler.poll_once()
    assert sampler.readiness()[0]
    await sampler.close()


async def test_close_returns_promptly_with_a_stuck_poll() -> None:
    backend = Hangable()
    backend.start()
    sampler = make(backend, 1.0)
    backend.release.clear()
    await sampler.poll_once()
    # Bounded by its budget, not by the 30 s the driver is stuck for.
    await asyncio.wait_for(sampler.close(budget_s=1.0), 10)
    backend.release.set()
    # The released poll finishes (and logs) on its own thread: not after this test's end.
    for thread in threading.enumerate():
        if thread.name in backend.polled_on:
            await asyncio.to_thread(thread.join, 10)


async def test_polls_run_on_the_poll_worker_it_is_given() -> None:
    # serve hands the same worker to the per-process reads: one thread calls NVML
    backend = Hangable()
    backend.start()
    worker = DaemonExecutor("shared-poll")
    sampler = make(backend, 1.0, poll_worker=worker)
    await sampler.poll_once()
    await sampler.poll_once()
    assert backend.polled_on == {"shared-poll"}
    await sampler.close()


@pytest.mark.parametrize(("profile", "series"), [("h100-8", 96), ("h200-mig", 182)])
async def test_a_reload_that_adds_a_field_keeps_every_profiling_series(
        tmp_path: Path, profile: str, series: int) -> None:
    """GPM values need two samples: a reload that started GPM afresh would blank every
    DCGM_FI_PROF_* series for one poll (a gap on dashboards, a 0 for KEDA)."""
    now = [0.0]

    def clock() -> float:
        return now[0]

    csv = tmp_path / "collectors.csv"
    csv.write_text(default_collectors_path().read_text())
    backend = NvmlBackend(SimNvml(profile, clock=clock), load_collectors(csv).specs,
                          clock=clock)
    backend.start()
    settings = SamplerSettings(interval_s=1.0, host=HostLabel("Hostname", "n"),
                               deadline_s=60.0, collectors_path=csv)
    sampler = Sampler(backend, load_collectors(csv), settings, Publisher("sim"),
                      wall_clock=clock)

    def profiling() -> set[tuple[str, tuple[tuple[str, str], ...]]]:
        return {k for k in values(sampler) if k[0].startswith("DCGM_FI_PROF_")}

    await sampler.poll_once()
    now[0] += 1.0
    await sampler.poll_once()
    before = profiling()
    assert len(before) == series
    # What answered "not supported" (MIG instances have no NVLink rates, remapped rows or
    # some field values) is not asked again after the reload.
    errors = dict(backend.call_errors)
    csv.write_text(csv.read_text() + "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS, gauge, reasons.\n")
    sampler.request_reload()
    for _ in range(5):
        now[0] += 1.0
        await sampler.poll_once()
        assert profiling() == before
    assert any(k[0] == "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS" for k in values(sampler))
    assert sampler.stats.reloads["success"] == 1
    assert dict(backend.call_errors) == errors
    await sampler.close()

"""The poll loop when what it waits on misbehaves: an attribution source slower than the
interval (late once, or late every time), and a collectors file caught empty by a reload."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

from exporter.devices.model import Inventory
from exporter.devices.nvml import NvmlBackend
from exporter.exposition.publisher import Publisher
from exporter.exposition.render import Rendered
from exporter.fields.csv import default_collectors_path, load_collectors
from exporter.k8s.types import Attribution, AttributionSource, PodRef
from exporter.sampling.config import SamplerSettings
from exporter.sampling.sampler import Sampler
from exporter.sampling.snapshot import HostLabel
from exporter.series import Family
from exporter.simulated.node import SimNvml

INTERVAL_S = 0.2


class HeldSource:
    """An attribution source whose answer waits until the test lets it go."""

    def __init__(self) -> None:
        self.answer = asyncio.Event()
        self.answer.set()
        self.pod = "first"

    async def refresh(self, inventory: Inventory) -> Attribution:
        await self.answer.wait()
        return Attribution(owners={inventory.gpus[0].key: PodRef(self.pod, "ns", "c")})

    def families(self) -> list[Family]:
        return []

    async def close(self) -> None:
        self.answer.set()


def sampler_for(source: AttributionSource | None = None, csv: Path | None = None
                ) -> Sampler[Rendered]:
    collectors = load_collectors(csv or default_collectors_path())
    backend = NvmlBackend(SimNvml("h100-8"), collectors.specs)
    backend.start()
    settings = SamplerSettings(interval_s=INTERVAL_S, host=HostLabel("Hostname", "n"),
                               collectors_path=csv)
    return Sampler(backend, collectors, settings, Publisher("sim"), source)


def owner(sampler: Sampler[Rendered]) -> str:
    assert sampler.snapshot is not None
    return sampler.snapshot.attribution.owners[(0, -1)].pod


async def test_a_slow_attribution_delays_neither_fresh_data_nor_readiness() -> None:
    source = HeldSource()
    sampler = sampler_for(source)
    await sampler.poll_once()
    assert owner(sampler) == "first"
    source.answer.clear()  # the kubelet stops answering in time
    source.pod = "second"
    taken = sampler.stats.last_success
    await asyncio.wait_for(sampler.poll_once(), 10 * INTERVAL_S)
    assert sampler.stats.last_success != taken, "device data waited for the kubelet"
    assert sampler.readiness()[0]
    assert owner(sampler) == "first"  # kept while the answer is late
    source.answer.set()
    await sampler.poll_once()
    assert owner(sampler) == "second"  # the late answer is used once it comes
    await sampler.close()


class NumberedSource:
    """An attribution source whose every refresh after the first answers only when the test
    releases it; the answer names the refresh (`answer-<n>`)."""

    def __init__(self) -> None:
        self.started = 0
        self.release: dict[int, asyncio.Event] = {}
        self.returned: dict[int, asyncio.Event] = {}

    def gate(self, gates: dict[int, asyncio.Event], number: int) -> asyncio.Event:
        """Return the event of refresh `number` in `gates`, made on first use."""
        return gates.setdefault(number, asyncio.Event())

    async def refresh(self, inventory: Inventory) -> Attribution:
        self.started += 1
        number = self.started
        if number > 1:
            await self.gate(self.release, number).wait()
        # Set as the refresh returns: its task is done before a waiter on this event runs.
        self.gate(self.returned, number).set()
        return Attribution(owners={inventory.gpus[0].key: PodRef(f"answer-{number}", "ns", "c")})

    def families(self) -> list[Family]:
        return []

    async def close(self) -> None:
        for gate in self.release.values():
            gate.set()


async def test_an_answer_that_comes_between_polls_is_used_though_the_next_is_late() -> None:
    """Every refresh outlasting a poll's budget must not keep the first answer for ever: one
    that ended between two polls is the attribution of the next."""
    source = NumberedSource()
    sampler = sampler_for(source)
    await sampler.poll_once()
    assert owner(sampler) == "answer-1"
    await sampler.poll_once()  # refresh 2 starts and misses this poll's budget
    assert (source.started, owner(sampler)) == (2, "answer-1")
    source.gate(source.release, 2).set()
    await asyncio.wait_for(source.gate(source.returned, 2).wait(), 10)  # between two polls
    await sampler.poll_once()  # refresh 3 starts and misses this poll's budget too
    assert (source.started, owner(sampler)) == (3, "answer-2")
    await sampler.close()


def _device_series(text: bytes) -> set[tuple[str, tuple[tuple[str, str], ...]]]:
    """Each DCGM series of an exposition as (name, labels), without its value."""
    from prometheus_client.parser import text_string_to_metric_families

    return {(s.name, tuple(sorted(s.labels.items())))
            for family in text_string_to_metric_families(text.decode())
            for s in family.samples if s.name.startswith("DCGM_")}


async def test_a_collectors_file_caught_empty_is_not_applied(tmp_path: Path) -> None:
    csv = tmp_path / "collectors.csv"
    shutil.copyfile(default_collectors_path(), csv)
    sampler = sampler_for(csv=csv)
    await sampler.poll_once()
    before = sampler.current.text
    csv.write_text("")  # a writer that truncates first, caught in between
    sampler.request_reload()
    await sampler.poll_once()
    assert sampler.stats.reloads["failure"] == 1
    # The poll after the failed reload serves the old file's fields: every series of the
    # poll before, on the same devices (values may move), and none besides. The file lists
    # GPU temperature, so a served set that lost its fields fails on the first check.
    assert b"DCGM_FI_DEV_GPU_TEMP{" in sampler.current.text
    assert _device_series(sampler.current.text) == _device_series(before)
    await sampler.close()

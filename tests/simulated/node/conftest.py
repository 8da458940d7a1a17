"""Shared pieces of the simulated-node tests: an injected clock and initialised nodes."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

import pynvml
import pytest

from exporter.simulated.node import Fault, SimNvml, parse_fault
from tests.support.clock import FakeClock

SimFactory = Callable[..., tuple[SimNvml, FakeClock]]


@pytest.fixture
def make_sim() -> Iterator[SimFactory]:
    """`make_sim(profile, *fault_specs, seed=0, init=True)` -> (initialised SimNvml, clock)."""
    made: list[SimNvml] = []

    def factory(profile: str, *specs: str, seed: int = 0, init: bool = True,
                faults: Sequence[Fault] = ()) -> tuple[SimNvml, FakeClock]:
        clock = FakeClock()
        sim = SimNvml(profile, seed=seed, clock=clock,
                      faults=[*faults, *(parse_fault(s) for s in specs)])
        if init:
            sim.nvmlInit()
        made.append(sim)
        return sim, clock

    yield factory
    for sim in made:
        while True:
            try:
                sim.nvmlShutdown()
            except pynvml.NVMLError:
                break


def nvml_code(call: Callable[[], object]) -> int:
    """The NVML return code a call fails with (the test fails if it succeeds)."""
    with pytest.raises(pynvml.NVMLError) as info:
        call()
    return int(info.value.value)

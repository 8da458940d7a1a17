"""The scripted day of the simulated node, compressed to a minute, and what it should cost.

Pods of four namespaces arrive and leave at known times on the `h200-mig` node:

- training: whole GPUs (2 and 4), one GPU handed from one pod to the next;
- serving: MIG instances (a 3g instance held by one pod through both its compute instances,
  1g instances of GPU 1);
- research: notebooks sharing GPU 6 by time-slicing replicas, one to three at a time;
- idle: a pod on GPU 5, which the simulated node keeps idle (fault `idle,gpu=5`).

The expected GPU-seconds follow from the schedule and the accounting rules alone (a whole
GPU counts 1, a MIG instance its slices over 7, a shared GPU is split between the pods
holding it at that moment), never from the report's code.
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass

from exporter.k8s.proto import PodResources
from exporter.simulated.kubelet import pod_resources
from exporter.simulated.node.profiles import gpu_uuid, mig_uuid
from tests.support.schedule import ScheduledPod

PROFILE = "h200-mig"
IDLE_GPU = 5
IDLE_FAULT = f"idle,gpu={IDLE_GPU},at=0s"
DURATION_S = 60.0


@dataclass(frozen=True, slots=True)
class Device:
    gpu: int
    """Index of the physical GPU."""
    ids: tuple[str, ...]
    """Device ids the kubelet hands out for it."""
    resource: str
    slices: int
    """Compute slices of the GPU it stands for (7: the whole GPU)."""
    shared: bool = False
    """Time-slicing replicas: holders present together split it."""


def whole(gpu: int) -> Device:
    return Device(gpu, (gpu_uuid(PROFILE, gpu),), "nvidia.com/gpu", 7)


def mig(gpu: int, gi: int, cis: tuple[int, ...], profile: str, slices: int) -> Device:
    return Device(gpu, tuple(mig_uuid(PROFILE, gpu, gi, ci) for ci in cis),
                  f"nvidia.com/mig-{profile}", slices)


def replica(gpu: int, index: int) -> Device:
    return Device(gpu, (f"{gpu_uuid(PROFILE, gpu)}::{index}",), "nvidia.com/gpu", 7,
                  shared=True)


@dataclass(frozen=True, slots=True)
class Holding:
    namespace: str
    pod: str
    device: Device
    arrive: float
    leave: float

    def scheduled(self) -> ScheduledPod:
        grant = (self.device.resource, list(self.device.ids))
        pod: PodResources = pod_resources(self.namespace, self.pod, {"main": [grant]})
        return ScheduledPod(self.arrive, self.leave, pod)


HOLDINGS: tuple[Holding, ...] = (
    Holding("training", "trainer-a", whole(2), 0, 50),
    Holding("training", "trainer-b", whole(4), 10, 60),
    Holding("training", "trainer-c", whole(2), 50, 60),
    Holding("serving", "llm-3g", mig(0, 2, (0, 1), "3g.71gb", 3), 0, 60),
    Holding("serving", "embed-a", mig(1, 7, (0,), "1g.18gb", 1), 5, 45),
    Holding("serving", "embed-b", mig(1, 9, (0,), "1g.18gb", 1), 15, 60),
    Holding("serving", "embed-c", mig(1, 13, (0,), "1g.18gb", 1), 0, 35),
    Holding("serving", "embed-d", mig(1, 10, (0,), "1g.18gb", 1), 25, 60),
    Holding("research", "notebook-alice", replica(6, 0), 0, 60),
    Holding("research", "notebook-bob", replica(6, 1), 10, 50),
    Holding("research", "notebook-carol", replica(6, 2), 20, 60),
    Holding("idle", "forgotten-notebook", whole(IDLE_GPU), 5, 55),
)
IDLE_POD = ("idle", "forgotten-notebook")


def schedule() -> list[ScheduledPod]:
    return [h.scheduled() for h in HOLDINGS]


def _pieces() -> list[tuple[float, float]]:
    edges = sorted({0.0, DURATION_S, *(h.arrive for h in HOLDINGS),
                    *(h.leave for h in HOLDINGS)})
    return list(itertools.pairwise(edges))


def shares_over_time() -> list[tuple[float, float, Holding, float]]:
    """(from, to, holding, share of its physical GPU) for every stretch of the schedule."""
    out = []
    for a, b in _pieces():
        present = [h for h in HOLDINGS if h.arrive <= a and b <= h.leave]
        for h in present:
            share = h.device.slices / 7
            if h.device.shared:
                share /= sum(1 for o in present if o.device.shared and o.device.gpu ==
                             h.device.gpu)
            out.append((a, b, h, share))
    return out


def expected_gpu_seconds() -> dict[str, float]:
    totals: dict[str, float] = defaultdict(float)
    for a, b, h, share in shares_over_time():
        totals[h.namespace] += share * (b - a)
    return dict(totals)


def expected_energy_joules(power_integral: Callable[[int, float, float], float]
                           ) -> dict[str, float]:
    """Per namespace, the GPUs' energy times the holding's share; `power_integral(gpu, a, b)`
    is the simulated power integrated over [a, b] seconds of the schedule (joules)."""
    totals: dict[str, float] = defaultdict(float)
    for a, b, h, share in shares_over_time():
        totals[h.namespace] += share * power_integral(h.device.gpu, a, b)
    return dict(totals)

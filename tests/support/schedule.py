"""A scripted schedule for the simulated kubelet: pods that arrive and leave at known times.

Tests of usage accounting replay one on a `SimKubeletServicer` and compute what they expect
from the schedule itself.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from exporter.k8s.proto import PodResources
from exporter.simulated.kubelet import SimKubeletServicer


@dataclass(frozen=True, slots=True)
class ScheduledPod:
    """A pod the simulated kubelet reports from `arrive` until `leave` (seconds after the
    schedule starts)."""

    arrive: float
    leave: float
    pod: PodResources


class PodSchedule:
    """Replays a schedule on a servicer: at every arrival or departure the servicer's pods
    become `base` plus the scheduled pods present then.

    A thread waits for each change time (on an event, so `stop()` ends it at once) and
    records, in `applied`, the wall-clock time it set each state: what happened, not what was
    planned, for tests that compute expected figures.
    """

    def __init__(self, servicer: SimKubeletServicer, pods: Sequence[ScheduledPod],
                 base: Sequence[PodResources] = (),
                 clock: Callable[[], float] = time.time) -> None:
        for entry in pods:
            if entry.leave <= entry.arrive:
                raise ValueError(f"pod {entry.pod.namespace}/{entry.pod.name} leaves before "
                                 "it arrives")
        self._servicer = servicer
        self._pods = tuple(pods)
        self._base = tuple(base)
        self._clock = clock
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="pod-schedule", daemon=True)
        self.started_at: float | None = None
        """Wall-clock time of the schedule's zero."""
        self.applied: list[tuple[float, float]] = []
        """(planned offset, wall-clock time it was applied), in order."""
        self.finished = threading.Event()

    @property
    def changes(self) -> list[float]:
        """Offsets at which the set of pods changes, in order (0 first)."""
        return sorted({0.0, *(p.arrive for p in self._pods), *(p.leave for p in self._pods)})

    def pods_at(self, offset: float) -> list[PodResources]:
        present = [p.pod for p in self._pods if p.arrive <= offset < p.leave]
        return [*self._base, *present]

    def start(self) -> PodSchedule:
        self.started_at = self._clock()
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _run(self) -> None:
        assert self.started_at is not None
        for offset in self.changes:
            wait = self.started_at + offset - self._clock()
            if wait > 0 and self._stop.wait(wait):
                return
            self._servicer.set_pods(self.pods_at(offset))
            self.applied.append((offset, self._clock()))
        self.finished.set()

"""The publisher the sampler calls, with the node fault writer fed on the way: each
published snapshot is offered to the writer, and the writer's self-metrics join the
exposition."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Generic, TypeVar

from exporter.nodefaults.writer import NodeFaultWriter
from exporter.sampling.sampler import Publisher
from exporter.sampling.snapshot import Snapshot
from exporter.sampling.stats import PollStats
from exporter.series import Family

Published = TypeVar("Published")


@dataclass(frozen=True, slots=True)
class FeedingPublisher(Generic[Published]):
    """`publish`, after offering the snapshot to `writer` (a swap, never a request)."""

    publish: Publisher[Published]
    writer: NodeFaultWriter

    def __call__(self, snapshot: Snapshot | None, stats: PollStats,
                 extra: list[Family]) -> Published:
        self.writer.offer(snapshot)
        return self.publish(snapshot, stats, [*extra, *self.writer.families()])

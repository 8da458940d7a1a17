"""Events for faults first seen: one on the Node, and for a fault whose recommended action is
RESTART_APP one on each Pod holding that GPU, deduplicated as the kubelet does.

The kubelet's recorder keeps a cache of the Events it made, by involved object, reason and
message; the same Event again is a PATCH of its `count` and `lastTimestamp`, not a new
Event. This does the same, with its own bounded cache: after an exporter restart (or once
an Event is evicted, or expired on the server: 404) the next one is created afresh.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from exporter.fields.faults import GpuFault
from exporter.nodefaults.condition import rfc3339
from exporter.nodefaults.message import headline, reason_of

COMPONENT = "gpu-exporter"
NODE_EVENT_NAMESPACE = "default"
"""Where the kubelet puts Events about a Node (a Node has no namespace)."""
RESTART_APP = "RESTART_APP"


@dataclass(frozen=True, slots=True)
class Target:
    """The object an Event is about: a Node (namespace None) or a Pod."""

    kind: str
    name: str
    namespace: str | None = None

    @property
    def event_namespace(self) -> str:
        return self.namespace or NODE_EVENT_NAMESPACE


@dataclass(frozen=True, slots=True)
class PendingEvent:
    """One Event to record: about `target`, for `fault`."""

    target: Target
    fault: GpuFault

    @property
    def reason(self) -> str:
        return reason_of(self.fault)

    @property
    def message(self) -> str:
        return headline(self.fault)


def events_for(fault: GpuFault, node: str, holders: tuple[tuple[str, str], ...]
               ) -> list[PendingEvent]:
    """Return the Events one first-seen fault gives: the Node's, and each holding Pod's
    (namespace, name) when its action is RESTART_APP."""
    events = [PendingEvent(Target("Node", node), fault)]
    if fault.action == RESTART_APP:
        events += [PendingEvent(Target("Pod", pod, namespace), fault)
                   for namespace, pod in holders]
    return events


def event_body(event: PendingEvent, name: str, node: str, now: float) -> dict[str, Any]:
    """Return a new core/v1 Event for `event`, named `name`."""
    target = event.target
    involved: dict[str, Any] = {"apiVersion": "v1", "kind": target.kind, "name": target.name}
    if target.kind == "Node":
        involved["uid"] = target.name  # as the kubelet writes its node's Events
    else:
        involved["namespace"] = target.namespace
    stamp = rfc3339(now)
    return {
        "apiVersion": "v1", "kind": "Event",
        "metadata": {"name": name, "namespace": target.event_namespace},
        "involvedObject": involved,
        "reason": event.reason, "message": event.message, "type": "Warning",
        "source": {"component": COMPONENT, "host": node},
        "reportingComponent": COMPONENT, "reportingInstance": node,
        "firstTimestamp": stamp, "lastTimestamp": stamp, "count": 1,
    }


EventKey = tuple[str, str, str, str, str]


class EventCache:
    """The Events made so far, by (kind, namespace, name, reason, message): name and count."""

    def __init__(self, size: int = 4096) -> None:
        self._size = size
        self._made: OrderedDict[EventKey, tuple[str, int]] = OrderedDict()

    @staticmethod
    def key(event: PendingEvent) -> EventKey:
        t = event.target
        return (t.kind, t.event_namespace, t.name, event.reason, event.message)

    def seen(self, event: PendingEvent) -> tuple[str, int] | None:
        """Return (Event name, count) of the same Event made before, or None."""
        return self._made.get(self.key(event))

    def made(self, event: PendingEvent, name: str, count: int) -> None:
        key = self.key(event)
        self._made[key] = (name, count)
        self._made.move_to_end(key)
        while len(self._made) > self._size:
            self._made.popitem(last=False)

    def forget(self, event: PendingEvent) -> None:
        self._made.pop(self.key(event), None)


def new_event_name(target: Target) -> str:
    """Return a fresh Event name as client-go makes them: object name, dot, hex nanoseconds."""
    return f"{target.name}.{time.time_ns():x}"

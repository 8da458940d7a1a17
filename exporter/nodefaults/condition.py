"""The node condition: what it should say for the faults held, the patch that makes it say
so, and the faults it records (read back at start).

One condition type (`--faults.condition-type`), positive: True while no fatal fault is
held, False while one is. Only that type is ever written: the patch goes to the
`nodes/{name}/status` subresource as a strategic merge, which merges `status.conditions` by
`type`, so kubelet's Ready and every other condition stay as they are. The patch carries
the node's `metadata.resourceVersion`, so a write based on a stale read is refused (409)
and made again from a fresh one.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

from exporter.fields.faults import GpuFault
from exporter.nodefaults.message import condition_reason, decode, encode


def rfc3339(unix: float) -> str:
    """Return `unix` as the API server writes times (RFC 3339, seconds, UTC)."""
    return datetime.fromtimestamp(unix, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def find_condition(node: Mapping[str, Any], condition_type: str) -> Mapping[str, Any] | None:
    """Return the node's condition of this type, or None."""
    for condition in (node.get("status") or {}).get("conditions") or []:
        if isinstance(condition, Mapping) and condition.get("type") == condition_type:
            return condition
    return None


def wanted(faults: Iterable[GpuFault]) -> tuple[str, str, str]:
    """Return (status, reason, message) for the faults held."""
    held = tuple(faults)
    status = "False" if any(f.fatal for f in held) else "True"
    return status, condition_reason(held), encode(held)


def condition_patch(node: Mapping[str, Any], condition_type: str,
                    faults: Iterable[GpuFault], now: float) -> dict[str, Any] | None:
    """Return the status patch that makes the node's condition match the faults, or None
    when it already does. The transition time moves only when the status changes."""
    status, reason, message = wanted(faults)
    current = find_condition(node, condition_type)
    if current is not None and (current.get("status"), current.get("reason"),
                                current.get("message")) == (status, reason, message):
        return None
    transition = rfc3339(now)
    if current is not None and current.get("status") == status and \
            current.get("lastTransitionTime"):
        transition = str(current["lastTransitionTime"])
    condition = {"type": condition_type, "status": status, "reason": reason,
                 "message": message, "lastHeartbeatTime": rfc3339(now),
                 "lastTransitionTime": transition}
    return {"metadata": {"resourceVersion": (node.get("metadata") or {}).get("resourceVersion")},
            "status": {"conditions": [condition]}}


def recorded_faults(node: Mapping[str, Any], condition_type: str) -> tuple[GpuFault, ...]:
    """Return the faults the node's condition records (none without the condition)."""
    condition = find_condition(node, condition_type)
    if condition is None:
        return ()
    name = (node.get("metadata") or {}).get("name", "?")
    return decode(str(condition.get("message") or ""),
                  where=f"node {name} condition {condition_type}")

"""The opt-in taint: NoSchedule with a configurable key while a fault that needs a GPU reset
or a reboot is held, and the circuit breaker that keeps it off once too many GPU nodes
carry it already.

`spec.taints` has no merge key, so a patch replaces the whole list: the writer reads the
node, adds or removes its own taint in the list it read, and sends the list back with the
node's resourceVersion (409 on a stale read, then read again).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from exporter.fields.faults import ClearedBy, GpuFault
from exporter.nodefaults.message import ordered

EFFECT = "NoSchedule"
_NEEDS_RESET_OR_REBOOT = (ClearedBy.GPU_RESET, ClearedBy.REBOOT)


def taint_value(faults: Iterable[GpuFault]) -> str | None:
    """Return the taint's value while it should be on (the first such fault's recommended
    action, `RESET_GPU`), or None when no held fault needs a reset or a reboot."""
    for fault in ordered(faults):
        if fault.cleared_by in _NEEDS_RESET_OR_REBOOT:
            return fault.action or "FAULT"
    return None


def _taints(node: Mapping[str, Any]) -> list[dict[str, Any]]:
    taints = (node.get("spec") or {}).get("taints") or []
    return [dict(t) for t in taints if isinstance(t, Mapping)]


def has_taint(node: Mapping[str, Any], key: str) -> bool:
    """Whether the node carries the taint (this key, NoSchedule)."""
    return any(t.get("key") == key and t.get("effect") == EFFECT for t in _taints(node))


def taint_patch(node: Mapping[str, Any], key: str, value: str | None) -> dict[str, Any] | None:
    """Return the patch that adds (value given) or removes (None) the taint, keeping every
    other taint; None when the node is already so."""
    if has_taint(node, key) == (value is not None):
        return None
    taints = [t for t in _taints(node) if not (t.get("key") == key and t.get("effect") == EFFECT)]
    if value is not None:
        taints.append({"key": key, "value": value, "effect": EFFECT})
    return {"metadata": {"resourceVersion": (node.get("metadata") or {}).get("resourceVersion")},
            "spec": {"taints": taints}}


def tainted_share(nodes: Iterable[Mapping[str, Any]], key: str) -> tuple[int, int]:
    """Return (nodes carrying the taint, nodes counted) among the selected GPU nodes."""
    listed = list(nodes)
    return sum(1 for n in listed if has_taint(n, key)), len(listed)


def breaker_holds(tainted: int, total: int, max_share: float) -> bool:
    """Whether the breaker keeps the taint off: `tainted` of `total` GPU nodes (this one not
    among the tainted) already reach `max_share`. With no node selected, this node alone
    counts."""
    return tainted / max(total, 1) >= max_share

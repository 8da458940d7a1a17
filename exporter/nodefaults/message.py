"""The node condition's reason and message, and reading the message back into faults.

The message is what a person reads in `kubectl describe node` and, because the exporter
keeps no state of its own, the durable record of the faults held: at start the exporter
reads it back (`decode`) and hands the faults to the sampler, so a fault that waits for a
GPU reset or a reboot outlives an exporter restart. Each fault is written in NVSentinel's
shape, `[XID 79] GPU 1 GPU-xxxx ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS - RecommendedAction:
RESTART_BM`, followed by what the record needs besides, in parentheses: `(fatal, cleared by
reboot, since 2026-12-07T12:59:31.250Z, boot 4f1c...)`. Faults are joined by `"; "`.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable
from datetime import UTC, datetime

from exporter.fields.faults import ClearedBy, GpuFault

log = logging.getLogger(__name__)

NO_FAULT_MESSAGE = "No GPU fault held"
HEALTHY_REASON = "GpuHardwareHealthy"
FAULT_SEPARATOR = "; "

_SOURCE_TAG = {"xid": "XID", "health": "HEALTH"}
_CLEARED_BY = {c.value: c for c in ClearedBy}

_FAULT = re.compile(
    r"\[(?P<tag>XID|HEALTH) (?P<code>[^\]\s]+)\] GPU (?P<gpu>\d+) (?P<uuid>\S+)"
    r"(?: (?P<name>.*?))? - RecommendedAction: (?P<action>\S+)"
    r" \((?P<fatal>fatal|non-fatal), cleared by (?P<cleared>[a-z-]+), since (?P<since>\S+),"
    r" boot (?P<boot>[^)\s]*)\)")


def headline(fault: GpuFault) -> str:
    """Return the fault as a person reads it: code, GPU, name and recommended action."""
    name = f" {fault.name}" if fault.name else ""
    return (f"[{_SOURCE_TAG[fault.source]} {fault.code}] GPU {fault.gpu} {fault.uuid}{name}"
            f" - RecommendedAction: {fault.action}")


def _timestamp(unix: float) -> str:
    """Return `unix` as RFC 3339 UTC with milliseconds."""
    moment = datetime.fromtimestamp(unix, UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


def encode_fault(fault: GpuFault) -> str:
    """Return one fault as the condition's message writes it (headline, then the record)."""
    severity = "fatal" if fault.fatal else "non-fatal"
    return (f"{headline(fault)} ({severity}, cleared by {fault.cleared_by.value}, since "
            f"{_timestamp(fault.since)}, boot {fault.boot_id})")


def encode(faults: Iterable[GpuFault]) -> str:
    """Return the condition's message for the faults held (a fixed sentence for none)."""
    parts = [encode_fault(f) for f in ordered(faults)]
    return FAULT_SEPARATOR.join(parts) if parts else NO_FAULT_MESSAGE


def ordered(faults: Iterable[GpuFault]) -> list[GpuFault]:
    """Return the faults fatal first, then by GPU, time and code, so that the message (and
    with it the write) changes only when the faults do."""
    return sorted(faults, key=lambda f: (not f.fatal, f.gpu, f.since, f.source, f.code))


def camel_case(text: str) -> str:
    """Return `text` (a catalog name, `ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS`) in the
    CamelCase Kubernetes reasons use (`RobustChannelGpuHasFallenOffTheBus`)."""
    words = re.split(r"[^A-Za-z0-9]+", text)
    return "".join(w[:1].upper() + w[1:].lower() for w in words if w)


def reason_of(fault: GpuFault) -> str:
    """Return the CamelCase reason for a fault: its catalog name, else its code."""
    tag = _SOURCE_TAG[fault.source].title()
    reason = camel_case(fault.name) or f"{tag}{camel_case(fault.code)}"
    # A reason starts with a letter (the API server's rule for condition reasons).
    return reason if reason[:1].isalpha() else f"Gpu{reason}"


def condition_reason(faults: Iterable[GpuFault]) -> str:
    """Return the reason of the condition: the first fault's (fatal first), or healthy."""
    first = ordered(faults)
    return reason_of(first[0]) if first else HEALTHY_REASON


def _parse_time(text: str) -> float | None:
    """Return the Unix time of an RFC 3339 UTC timestamp written by `_timestamp`, or None."""
    try:
        return datetime.strptime(text, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC).timestamp()
    except ValueError:
        return None


def decode_fault(text: str) -> GpuFault | None:
    """Return the fault one part of a message records, or None when it is not one."""
    found = _FAULT.fullmatch(text.strip())
    if found is None:
        return None
    cleared_by = _CLEARED_BY.get(found["cleared"])
    since = _parse_time(found["since"])
    if cleared_by is None or since is None:
        return None
    return GpuFault(gpu=int(found["gpu"]), uuid=found["uuid"],
                    source="xid" if found["tag"] == "XID" else "health",
                    code=found["code"], name=found["name"] or "", action=found["action"],
                    fatal=found["fatal"] == "fatal", cleared_by=cleared_by, since=since,
                    boot_id=found["boot"])


def decode(message: str, where: str = "node condition") -> tuple[GpuFault, ...]:
    """Return the faults a condition message records. A part that is not a fault written by
    `encode_fault` (edited by hand, written by another tool) is skipped with one warning
    naming it, so the rest still restores."""
    text = message.strip()
    if not text or text == NO_FAULT_MESSAGE:
        return ()
    faults: list[GpuFault] = []
    for part in text.split(FAULT_SEPARATOR):
        fault = decode_fault(part)
        if fault is None:
            log.warning("%s: message part %r is not a fault this exporter wrote "
                        "(expected '[XID <code>] GPU <index> <uuid> <name> - "
                        "RecommendedAction: <action> (...)'); skipped", where, part[:200])
        else:
            faults.append(fault)
    return tuple(faults)

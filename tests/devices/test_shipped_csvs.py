"""Every row of the shipped dcgm-exporter 4.8.4 CSVs, commented out or not, on every simulated
profile: served (it has series), or skipped with a reason (at load, or a read the GPU answers
"not supported", logged once with the call), never silently absent."""

from __future__ import annotations

import logging
import re
from pathlib import Path

import pytest

from exporter.devices.nvml import NvmlBackend
from exporter.exposition.render import device_families, render
from exporter.fields.catalog import (
    NVLINK_BANDWIDTH_PART,
    Call,
    FieldRefs,
    FieldSpec,
    Reader,
    Scope,
)
from exporter.fields.csv import Collectors, parse_collectors
from exporter.sampling.snapshot import HostLabel, Snapshot
from exporter.simulated.node import SimNvml, parse_fault, profile_names
from tests.support.clock import FakeClock
from tests.support.paths import ROOT
from tests.support.wait import wait_until

SHIPPED = ROOT / "exporter" / "fields" / "dcgm-exporter"
_FIELD_ROW = re.compile(r"^#\s*(?=(?:DCGM_|dcgm_)\w+\s*,)")
FAULTS = ("xid,code=43,gpu=0,at=2s", "thermal,gpu=0,at=20s")
"""So that the totals, which have no series before an event, have one."""


def uncommented(path: Path) -> str:
    """The file with every commented-out field row switched on."""
    return "\n".join(_FIELD_ROW.sub("", line) for line in
                     path.read_text(encoding="utf-8").splitlines()) + "\n"


def explanations(spec: FieldSpec) -> tuple[str, ...]:
    """What the backend logs when the GPU does not answer the spec's read."""
    part = spec.part
    if spec.reader is Reader.GPM:
        return ("has no GPM support", "GPM metric ")
    if spec.reader is Reader.FIELD_VALUES:
        ids = ((138,) if part == NVLINK_BANDWIDTH_PART else
               tuple(f for f, _ in part.refs) if isinstance(part, FieldRefs) else (part,))
        return tuple(f"field {i} answers" for i in ids) + tuple(
            f"field {i}@" for i in ids)
    if isinstance(part, Call):
        return (f"{part} answers", f"{part.function} answers",
                f"{part.function} is not available")
    return (f"{spec.reader.value.split('(')[0]} answers",)


def run(profile: str, collectors: Collectors) -> tuple[str, int]:
    """The exposition after two polls 30 s apart, and the node's GPU count."""
    clock = FakeClock(start=1_700_000_000.0)
    lib = SimNvml(profile, seed=5, faults=[parse_fault(f) for f in FAULTS], clock=clock)
    backend = NvmlBackend(lib, collectors.specs, clock=clock, wall_clock=clock)
    backend.start()
    try:
        backend.poll()
        wait_until(lambda: lib.calls["nvmlEventSetWait_v2"] > 0, what="XID watcher")
        clock.advance(5)
        wait_until(backend.ledger.totals, timeout=10, what="XID 43 recorded")
        clock.advance(25)  # GPM rates need two samples; the slowdown has begun
        readings = backend.poll()
        snapshot = Snapshot(backend.inventory, readings, collectors, HostLabel(None, ""))
        return render(device_families(snapshot)).text.decode(), len(backend.inventory.gpus)
    finally:
        backend.close()


@pytest.mark.parametrize("profile", profile_names())
@pytest.mark.parametrize("name", sorted(p.name for p in SHIPPED.glob("*.csv")))
def test_every_row_is_served_or_skipped_with_a_reason(name: str, profile: str,
                                                      caplog: pytest.LogCaptureFixture) -> None:
    collectors = parse_collectors(uncommented(SHIPPED / name), name)
    for warning in collectors.warnings:  # a row skipped at load says why
        assert re.match(rf"{re.escape(name)}:\d+: \w+ .+; (skipped|ignored)$", warning)
    with caplog.at_level(logging.INFO, logger="exporter.devices"):
        text, gpus = run(profile, collectors)
    logged = "\n".join(r.getMessage() for r in caplog.records)
    silent = []
    for field in collectors.fields:
        spec = field.spec
        marker = f'{spec.name}="' if field.type.value == "label" else f"\n{spec.name}{{"
        if marker in text or (spec.scope is Scope.PEER and gpus == 1):  # no pair of GPUs
            continue
        if not any(why in logged for why in explanations(spec)):
            silent.append(spec.name)
    assert silent == [], f"{profile}: no series and no reason logged"
    assert len(collectors.fields) > 20

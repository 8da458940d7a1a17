"""NVIDIA's recommended action for each XID and DCGM health code, and what ends each action.

`fault-catalog.csv` beside this module is generated from NVIDIA NVSentinel's two mapping files
(`python -m tools.derive_fault_catalog --write`; the sources are in
tests/fixtures/nvsentinel/): one row per XID with its name, action and fatality, and one row
per DCGM health code (DCGM_FR_*) with its action. The reader answers for codes outside the
table too (see `xid_entry` and `health_entry`), so a new driver's XID is never dropped.

`CLEARED_BY` is the one table that turns an action into the event that ends the fault
(docs/faults.md, "Each action's lifetime").
"""

from __future__ import annotations

import csv
import functools
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from exporter.fields.faults import ClearedBy, FaultSource

DATA_PATH = Path(__file__).with_name("fault-catalog.csv")
HEADER = ("source", "code", "name", "action", "fatal", "note")

UNKNOWN_XID_ACTION = "UNEXPECTED_ERR_REPORT_ISSUE"
"""The action of an XID the catalog does not list (a newer driver's): report it, and hold the
GPU until a reset, as for the catalog's fatal unexpected errors."""
UNKNOWN_XID_NAME = "UNKNOWN_XID"
UNKNOWN_HEALTH_ACTION = "REPORT_ISSUE"
"""The action of a DCGM health code the catalog does not list: report it (an Event), hold
nothing."""

_BY_ACTION: Mapping[str, ClearedBy] = {
    # The fault is the application's: it ends when the processes that held the GPU exit.
    "RESTART_APP": ClearedBy.HOLDER_EXIT,
    "WORKFLOW_XID_45": ClearedBy.HOLDER_EXIT,  # preemptive removal: the channel's owner
    # The GPU itself needs a reset (or more, which resets it too).
    "RESET_GPU": ClearedBy.GPU_RESET,
    "WORKFLOW_XID_48": ClearedBy.GPU_RESET,
    "WORKFLOW_NVLINK_ERR": ClearedBy.GPU_RESET,
    "WORKFLOW_NVLINK5_ERR": ClearedBy.GPU_RESET,
    "RUN_FIELDDIAG": ClearedBy.GPU_RESET,  # field diagnostics run on a drained, reset GPU
    "CHECK_MECHANICALS": ClearedBy.GPU_RESET,
    # Only a new boot of the node clears these.
    "RESTART_BM": ClearedBy.REBOOT,
    "RESTART_VM": ClearedBy.REBOOT,
    "NODE_REBOOT": ClearedBy.REBOOT,
    # Nothing to do: nothing is raised.
    "IGNORE": ClearedBy.NEVER_HELD,
    "NONE": ClearedBy.NEVER_HELD,
    # A condition the health watch sees end by itself.
    "CHECK_THERMALS": ClearedBy.HEALTH_PASS,
    "CHECK_FM_CONFIG": ClearedBy.HEALTH_PASS,
}
BY_FATALITY = frozenset({"REPORT_ISSUE", "UNEXPECTED_ERR_REPORT_ISSUE", "UPDATE_SWFW",
                         "CHECK_UVM"})
"""Actions that say what to investigate, not what ends the fault: held until a GPU reset when
the catalog marks the code fatal, an Event only when it does not."""
SILENT = frozenset(a for a, cleared in _BY_ACTION.items() if cleared is ClearedBy.NEVER_HELD)
"""Actions that raise nothing: no held fault, no Event."""
ACTIONS = frozenset(_BY_ACTION) | BY_FATALITY
"""Every action the catalog may name (the generator maps any other text to
UNEXPECTED_ERR_REPORT_ISSUE)."""


@dataclass(frozen=True, slots=True)
class CatalogEntry:
    """One code of the catalog: what NVIDIA calls it and recommends."""

    source: FaultSource
    code: str
    name: str
    action: str
    fatal: bool
    note: str = ""
    """Where the row departs from NVIDIA's file, why (empty for a verbatim row)."""

    @property
    def cleared_by(self) -> ClearedBy:
        """Return the event that ends a fault of this code (see `cleared_by`)."""
        return cleared_by(self.source, self.action, self.fatal)

    @property
    def raised(self) -> bool:
        """Tell whether a fault of this code is raised at all (an Event, or a held fault)."""
        return self.action not in SILENT


def cleared_by(source: FaultSource, action: str, fatal: bool) -> ClearedBy:
    """Return the event that ends a fault with this action: `_BY_ACTION`'s entry, or for the
    report-only actions a GPU reset when the fault is fatal and nothing held when it is not. A
    health-pass action on an XID (which cannot pass) and an action this table does not know are
    held until a reset when fatal, and not held when not."""
    by_action = _BY_ACTION.get(action)
    if by_action is ClearedBy.HEALTH_PASS and source == "xid":
        by_action = None
    if by_action is not None:
        return by_action
    return ClearedBy.GPU_RESET if fatal else ClearedBy.NEVER_HELD


class FaultCatalogError(ValueError):
    """The shipped catalog is malformed (a packaging fault, reported with file and line)."""


def parse_catalog(text: str, source: str) -> dict[tuple[str, str], CatalogEntry]:
    """Return the entries of a fault catalog CSV by (source, code); lines starting with '#'
    are comments."""
    lines = [line for line in text.splitlines() if not line.startswith("#")]
    rows = list(csv.reader(lines))
    if not rows or tuple(rows[0]) != HEADER:
        raise FaultCatalogError(f"{source}: expected the header {','.join(HEADER)}")
    entries: dict[tuple[str, str], CatalogEntry] = {}
    for number, row in enumerate(rows[1:], start=2):
        if len(row) != len(HEADER) or row[0] not in ("xid", "health") \
                or row[4] not in ("true", "false"):
            raise FaultCatalogError(
                f"{source}: row {number}: expected source (xid|health),code,name,action,"
                f"fatal (true|false),note; got {row!r}")
        kind: FaultSource = "xid" if row[0] == "xid" else "health"
        entries[(kind, row[1])] = CatalogEntry(kind, row[1], row[2], row[3],
                                               row[4] == "true", row[5])
    return entries


@functools.cache
def catalog() -> Mapping[tuple[str, str], CatalogEntry]:
    """Return the shipped catalog, read once."""
    return parse_catalog(DATA_PATH.read_text(encoding="utf-8"), str(DATA_PATH))


def xid_entry(code: int) -> CatalogEntry:
    """Return the catalog's entry for an XID; an XID it does not list is UNKNOWN_XID,
    UNEXPECTED_ERR_REPORT_ISSUE, fatal (held until a GPU reset)."""
    found = catalog().get(("xid", str(code)))
    if found is not None:
        return found
    return CatalogEntry("xid", str(code), UNKNOWN_XID_NAME, UNKNOWN_XID_ACTION, True,
                        "not in the catalog")


def health_entry(code: str) -> CatalogEntry:
    """Return the catalog's entry for a DCGM health code; a code it does not list is
    REPORT_ISSUE, not fatal (an Event, nothing held)."""
    found = catalog().get(("health", code))
    if found is not None:
        return found
    return CatalogEntry("health", code, code, UNKNOWN_HEALTH_ACTION, False,
                        "not in the catalog")

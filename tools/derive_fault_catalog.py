"""Derive `exporter/fields/fault-catalog.csv` from NVIDIA NVSentinel's two mapping files.

    python -m tools.derive_fault_catalog --write     # regenerate the shipped file
    python -m tools.derive_fault_catalog --check     # exit 1 if it drifted

A build tool (see `tools/__init__.py`): it reads the repository, the package ships only the
file it writes.

The sources (tests/fixtures/nvsentinel/, verbatim) have no header.
`xiderrorsmapping.csv`: `code,name,action,FATAL|NONFATAL`, one row per XID.
`dcgmerrorsmapping.csv`: `DCGM_FR_code,action`. Where the shipped file departs from them,
its `note` column says why:

- an action that is free text rather than an action name (XID 154's "Follow guidance as it
  aapplies to another Xid") becomes UNEXPECTED_ERR_REPORT_ISSUE, keeping the row's fatality;
- names lose surrounding blanks (XID 154's name ends in one);
- the DCGM file has no fatality column: a health code is fatal when its action takes the GPU
  out of service (`FATAL_HEALTH_ACTIONS`);
- the DCGM health codes the exporter's health watches report that the DCGM file predates
  (`SUPPLEMENT`) are added, each with the action its name asks for.
"""

from __future__ import annotations

import csv
import io
import sys
from pathlib import Path

from exporter.fields.fault_catalog import ACTIONS, DATA_PATH, HEADER, UNKNOWN_XID_ACTION
from tools.generated_file import write_or_check

FIXTURES = Path(__file__).resolve().parents[1] / "tests/fixtures/nvsentinel"
XID_SOURCE = FIXTURES / "xiderrorsmapping.csv"
HEALTH_SOURCE = FIXTURES / "dcgmerrorsmapping.csv"
BANNER = (
    "# Generated from tests/fixtures/nvsentinel/xiderrorsmapping.csv and dcgmerrorsmapping.csv"
    " by `python -m tools.derive_fault_catalog --write`; do not edit.\n"
)

FATAL_HEALTH_ACTIONS = frozenset({"RESET_GPU", "NODE_REBOOT", "RUN_FIELDDIAG"})
"""Actions that take the GPU out of service: a health code with one of them counts as
fatal."""

SUPPLEMENT: tuple[tuple[str, str, str], ...] = (
    ("DCGM_FR_GPU_RECOVERY_RESET", "RESET_GPU", "the driver asks for a GPU reset"),
    ("DCGM_FR_GPU_RECOVERY_REBOOT", "NODE_REBOOT", "the driver asks for a node reboot"),
    ("DCGM_FR_GPU_RECOVERY_DRAIN_P2P", "RESET_GPU",
     "the driver asks to drain peer-to-peer work and reset"),
    ("DCGM_FR_GPU_RECOVERY_DRAIN_RESET", "RESET_GPU", "the driver asks to drain and reset"),
)
"""Health codes of DCGM 4.6's driver watch (NVML's GPU recovery action) that NVSentinel's
mapping does not list: code, action, why."""


class SourceError(ValueError):
    """A source file's row is not what the generator expects (names the file and row)."""


def _xid_rows(text: str) -> list[list[str]]:
    rows = []
    for number, row in enumerate(csv.reader(io.StringIO(text)), start=1):
        if len(row) != 4 or not row[0].isdigit() or row[3] not in ("FATAL", "NONFATAL"):
            raise SourceError(f"{XID_SOURCE.name}: row {number}: expected "
                              f"code,name,action,FATAL|NONFATAL; got {row!r}")
        action, note = row[2].strip(), ""
        if action not in ACTIONS:
            note = f"the source's action is free text ({action}); reported as unexpected"
            action = UNKNOWN_XID_ACTION
        fatal = "true" if row[3] == "FATAL" else "false"
        rows.append(["xid", row[0], row[1].strip(), action, fatal, note])
    return rows


def _health_rows(text: str) -> list[list[str]]:
    rows = []
    for number, row in enumerate(csv.reader(io.StringIO(text)), start=1):
        if len(row) != 2 or not row[0].startswith("DCGM_FR_") or row[1] not in ACTIONS:
            raise SourceError(f"{HEALTH_SOURCE.name}: row {number}: expected "
                              f"DCGM_FR_<code>,<action>; got {row!r}")
        fatal = "true" if row[1] in FATAL_HEALTH_ACTIONS else "false"
        rows.append(["health", row[0], row[0], row[1], fatal, ""])
    listed = {r[1] for r in rows}
    for code, action, why in SUPPLEMENT:
        if code not in listed:
            fatal = "true" if action in FATAL_HEALTH_ACTIONS else "false"
            rows.append(["health", code, code, action, fatal,
                         f"not in NVSentinel's mapping: {why}"])
    return rows


def derive(xid_text: str, health_text: str) -> str:
    """Return the shipped catalog's text for these two source files."""
    out = io.StringIO()
    out.write(BANNER)
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(HEADER)
    writer.writerows(_xid_rows(xid_text))
    writer.writerows(_health_rows(health_text))
    return out.getvalue()


def derived() -> str:
    """Return the catalog derived from the repository's copies of the sources."""
    return derive(XID_SOURCE.read_text(encoding="utf-8"),
                  HEALTH_SOURCE.read_text(encoding="utf-8"))


def main(argv: list[str]) -> int:
    """Write or check the shipped catalog (see `tools.generated_file.write_or_check`)."""
    return write_or_check(argv, "tools.derive_fault_catalog", DATA_PATH, derived,
                          "its sources")

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

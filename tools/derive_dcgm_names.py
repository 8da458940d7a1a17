"""Derive `exporter/fields/dcgm-names.csv` from the DCGM field reference table.

    python -m tools.derive_dcgm_names --write     # regenerate the shipped file
    python -m tools.derive_dcgm_names --check     # exit 1 if it drifted

A build tool (see `tools/__init__.py`): it reads the repository, the package ships only the
file it writes.

The reference table (`tests/fixtures/dcgm-fields/dcgm-fields.csv`, columns
`dcgm_name,dcgm_id,dcgm_type,scope,unit,nvml_source,conversion,notes`) has one row per name.
The shipped file keeps one row per field: its id, why it is or is not readable through NVML
(from the table's scope, type, NVML source and notes), its names, canonical first, and for a
field the catalog does not serve but a plain NVML read can (`dcgm_recipes`), how: Prometheus
type, unit, scope, reader, source (`parts`) and conversion.
"""

from __future__ import annotations

import csv
import io
import re
import sys
from collections import defaultdict
from collections.abc import Mapping
from pathlib import Path

from exporter.fields.catalog import CATALOG
from exporter.fields.dcgm_names import DATA_PATH, Reason, generated_help
from exporter.fields.parts import format_part
from tools.dcgm_recipes import recipe
from tools.generated_file import write_or_check

SOURCE = Path(__file__).resolve().parents[1] / "tests/fixtures/dcgm-fields/dcgm-fields.csv"
HEADER = (
    "# Generated from tests/fixtures/dcgm-fields/dcgm-fields.csv by "
    "`python -m tools.derive_dcgm_names --write`; do not edit.\n"
    "# dcgm_id,reason,nvml_source,names (canonical first; an empty id: range markers that "
    "name no field),\n# then for fields read through the generic readers: type,unit,scope,"
    "reader,source,conversion\n"
)

Row = Mapping[str, str]

_RENAMED_IN_461 = re.compile(r"DCGM 4\.6\.1 canonical name for id \d+ \(4\.6\.0 name (\w+)\)")
_MARKER_TARGET = re.compile(r"accepted by go-dcgm as a field name resolving to id (\d+)")
_NEVER_A_VALUE = re.compile(r"always (answers|stores) NOT_SUPPORTED|no producer exists")


def _is_marker(row: Row) -> bool:
    return row["notes"].startswith("range marker")


def _is_other_name(row: Row) -> bool:
    """Tell whether a row is a deprecated alias or a dcgm-exporter 1.x name: never a field's
    canonical name."""
    return row["notes"].startswith("DEPRECATED ALIAS") or row["dcgm_name"].islower()


def classify(row: Row) -> Reason:
    """Return the reason category of the field whose canonical row this is; first match wins, so a
    ConnectX field (read by the NvSwitch module) is ConnectX and an NvSwitch port is NvSwitch,
    not a GPU link field."""
    notes, scope, source = row["notes"], row["scope"], row["nvml_source"]
    if "ConnectX" in notes:
        return Reason.CONNECTX
    if scope == "nvswitch" or "NvSwitch field" in notes or "NvSwitch module" in notes:
        return Reason.NVSWITCH
    if scope == "cpu":
        return Reason.CPU
    if "DCGM diagnostic" in notes:
        return Reason.DIAGNOSTIC
    if "nvidia-imex-ctl" in notes:
        return Reason.IMEX
    if _NEVER_A_VALUE.search(notes):
        return Reason.NOT_SUPPORTED
    if row["dcgm_type"] == "binary":
        return Reason.BLOB
    if "vGPU host (hypervisor) only" in notes:
        return Reason.VGPU_HOST
    if source == "none" or notes.startswith("internal field"):
        return Reason.DCGM_STATE
    if "DCGM passes its own getpid()" in notes:
        return Reason.HOST_ENGINE
    return Reason.NVML


def derive(source_text: str) -> str:
    """Return the text of dcgm-names.csv for the reference table's text."""
    rows = list(csv.DictReader(io.StringIO(source_text)))
    renamed = {m.group(1) for r in rows if (m := _RENAMED_IN_461.search(r["notes"]))}
    by_id: dict[int, list[Row]] = defaultdict(list)
    for row in rows:
        if not _is_marker(row):
            by_id[int(row["dcgm_id"])].append(row)
    names: dict[int, list[str]] = {}
    lines: dict[int, list[str]] = {}
    recipes: dict[int, list[str]] = {}
    catalog_names = {spec.name for spec in CATALOG}
    for dcgm_id, id_rows in sorted(by_id.items()):
        canonical = [r for r in id_rows if not _is_other_name(r) and r["dcgm_name"] not in renamed]
        if len(canonical) != 1:
            raise ValueError(f"id {dcgm_id}: expected one canonical name, found "
                             f"{[r['dcgm_name'] for r in canonical]}")
        head = canonical[0]
        reason = classify(head)
        names[dcgm_id] = [head["dcgm_name"]] + [r["dcgm_name"] for r in id_rows if r is not head]
        nvml_source = head["nvml_source"] if reason is Reason.NVML else ""
        lines[dcgm_id] = [str(dcgm_id), reason.value, nvml_source]
        if reason is Reason.NVML and not catalog_names.intersection(names[dcgm_id]):
            spec = recipe(head, generated_help(nvml_source, head["unit"]))
            if spec is not None:
                recipes[dcgm_id] = [spec.type.value, spec.unit, spec.scope.value,
                                    spec.reader.name, format_part(spec.part),
                                    spec.convert.name]
    unresolved: list[str] = []
    for row in filter(_is_marker, rows):
        # dcgm-exporter (go-dcgm) reads some markers as the field with the marker's value.
        target = _MARKER_TARGET.search(row["notes"])
        if target and int(target.group(1)) in names:
            names[int(target.group(1))].append(row["dcgm_name"])
        else:
            unresolved.append(row["dcgm_name"])
    out = io.StringIO()
    out.write(HEADER)
    writer = csv.writer(out, lineterminator="\n")
    for dcgm_id, line in lines.items():
        writer.writerow([*line, " ".join(names[dcgm_id]), *recipes.get(dcgm_id, ())])
    if unresolved:
        writer.writerow(["", Reason.MARKER.value, "", " ".join(unresolved)])
    return out.getvalue()


def main(argv: list[str]) -> int:
    """Write or check the shipped name table (see `tools.generated_file.write_or_check`)."""
    return write_or_check(argv, "tools.derive_dcgm_names", DATA_PATH,
                          lambda: derive(SOURCE.read_text(encoding="utf-8")), str(SOURCE))

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

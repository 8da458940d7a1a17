"""Every name a dcgm-exporter collectors file can use, and what this exporter does with it.

DCGM knows some 660 fields under about 1,070 names: canonical names, deprecated aliases kept
after the 4.6 renames, dcgm-exporter 1.x lowercase names (`dcgm_gpu_temp`), dcgm-exporter's
`DCGM_EXP_*` pseudo-fields and the range markers of dcgm_fields.h. `dcgm-names.csv` beside this
module lists them by field, with the reason a field cannot be served when it has no NVML
source, and the spec of each field served through the generic readers (those the hand-written
catalog, `exporter.fields.catalog`, does not cover). It is generated, never edited: adding a
field is the procedure in `exporter.fields.catalog`, which ends with
`python -m tools.derive_dcgm_names --write` (a build tool, not installed).

The table is read on first use only: a collectors file that names catalog fields by their
catalog names never loads it (see `exporter.fields.csv`).
"""

from __future__ import annotations

import csv
import enum
import functools
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path

from exporter.fields.catalog import CATALOG, Convert, FieldSpec, MetricType, Reader, Scope
from exporter.fields.parts import parse_part

DATA_PATH = Path(__file__).with_name("dcgm-names.csv")


class Reason(enum.Enum):
    """Why DCGM's value for a field does or does not come from NVML, in the table's terms."""

    NVML = "nvml"
    """NVML (or GPM) has the value: served when the catalog has a reader for it."""
    NVSWITCH = "nvswitch"
    CPU = "cpu"
    DIAGNOSTIC = "diagnostic"
    CONNECTX = "connectx"
    IMEX = "imex"
    DCGM_STATE = "dcgm-state"
    NOT_SUPPORTED = "not-supported"
    BLOB = "blob"
    VGPU_HOST = "vgpu-host"
    HOST_ENGINE = "host-engine"
    MARKER = "marker"

    @property
    def summary(self) -> str:
        """Return the category's name, as the docs and the counts show it."""
        return _SUMMARY[self]

    def explain(self, nvml_source: str) -> str:
        """Return why a field of this category is not served, for a warning."""
        if self is Reason.NVML:
            return f"NVML source {nvml_source} not read by this exporter yet"
        return _EXPLANATION[self]


_SUMMARY = {
    Reason.NVML: "NVML source not read by this exporter yet",
    Reason.NVSWITCH: "NvSwitch (NSCQ/NVSDM)",
    Reason.CPU: "CPU (DCGM sysmon)",
    Reason.DIAGNOSTIC: "diagnostic results",
    Reason.CONNECTX: "ConnectX NIC",
    Reason.IMEX: "IMEX (nvidia-imex-ctl)",
    Reason.DCGM_STATE: "DCGM-internal / DCGM state",
    Reason.NOT_SUPPORTED: "always NOT_SUPPORTED in DCGM",
    Reason.BLOB: "binary blob",
    Reason.VGPU_HOST: "vGPU host only",
    Reason.HOST_ENGINE: "DCGM host engine's own process",
    Reason.MARKER: "range marker, not a field",
}

_EXPLANATION = {
    Reason.NVSWITCH: "an NvSwitch field, which DCGM reads through NSCQ/NVSDM, not NVML",
    Reason.CPU: "a CPU field, which DCGM's sysmon module reads from the OS, not NVML",
    Reason.DIAGNOSTIC: "a DCGM diagnostic (dcgmi diag) result, not an NVML value",
    Reason.CONNECTX: "a ConnectX NIC field, which DCGM reads through NVSDM, not NVML",
    Reason.IMEX: "an IMEX status, which DCGM reads from nvidia-imex-ctl, not NVML",
    Reason.DCGM_STATE: "DCGM-internal state, not an NVML value",
    Reason.NOT_SUPPORTED: "DCGM never has a value for it (always NOT_SUPPORTED)",
    Reason.BLOB: "a binary blob, which cannot be exported as a sample",
    Reason.VGPU_HOST: "it exists only on a vGPU host (hypervisor)",
    Reason.HOST_ENGINE: ("the name of DCGM's own host-engine process (a global field, not a "
                         "GPU value); this exporter has no host engine"),
    Reason.MARKER: "a range marker of dcgm_fields.h, not a field",
}


@dataclass(frozen=True, slots=True)
class DcgmField:
    """One DCGM field: its id, every name that refers to it, and why this exporter serves it or
    not."""

    dcgm_id: int | None
    """None for a range marker that names no field."""
    names: tuple[str, ...]
    """Every name that resolves to this field, the canonical one first."""
    reason: Reason
    nvml_source: str
    """The NVML call DCGM's value comes from; set where `reason` is NVML."""
    generated: FieldSpec | None = None
    """How the generic readers serve it, where the catalog does not (canonical name)."""

    @property
    def name(self) -> str:
        """Return the field's canonical DCGM name (the newest release's)."""
        return self.names[0]


class DcgmNames:
    """The fields of the table, looked up by any of their names."""

    def __init__(self, fields: Iterable[DcgmField]) -> None:
        self.fields = tuple(fields)
        self._by_name = {name: f for f in self.fields for name in f.names}
        ids = [f.dcgm_id for f in self.fields if f.dcgm_id is not None]
        if len(ids) != len(set(ids)) or len(self._by_name) != sum(
                len(f.names) for f in self.fields):
            raise ValueError(f"{DATA_PATH}: a field id or a name is listed twice")

    def __iter__(self) -> Iterator[str]:
        """Iterate over every known name."""
        return iter(self._by_name)

    def field(self, name: str) -> DcgmField | None:
        """Return the DCGM field known by this name, or None when no field has it."""
        return self._by_name.get(name)

    @functools.cached_property
    def served(self) -> dict[int, FieldSpec]:
        """Return every served field by DCGM id: the catalog's first (the first catalog entry
        where two share an id), then those the generic readers serve."""
        by_id: dict[int, FieldSpec] = {}
        for spec in CATALOG:
            known = self._by_name.get(spec.name)
            if known is not None and known.dcgm_id is not None:
                by_id.setdefault(known.dcgm_id, spec)
        for field in self.fields:
            if field.generated is not None and field.dcgm_id is not None:
                by_id.setdefault(field.dcgm_id, field.generated)
        return by_id

    def served_spec(self, field: DcgmField) -> FieldSpec | None:
        """Return the catalog entry that serves this DCGM field, or None when none does."""
        return None if field.dcgm_id is None else self.served.get(field.dcgm_id)

    def resolve(self, name: str) -> FieldSpec | DcgmField | None:
        """Return the catalog entry serving `name`, renamed to it, since dcgm-exporter exports a
        field under the name the collectors file gives; else the unserved DCGM field; else None
        when the name is unknown."""
        known = self._by_name.get(name)
        if known is None:
            return None
        spec = self.served_spec(known)
        if spec is None:
            return known
        return spec if spec.name == name else replace(spec, name=name)

    def unserved(self) -> tuple[DcgmField, ...]:
        """Return the DCGM fields that this exporter does not serve."""
        return tuple(f for f in self.fields if self.served_spec(f) is None)


def generated_help(nvml_source: str, unit: str) -> str:
    """Return the help text of a field served through the generic readers; a collectors file's
    help text, if it gives one, replaces it."""
    return f"{nvml_source} (in {unit})." if unit else f"{nvml_source}."


def _generated(name: str, nvml_source: str, spec: list[str]) -> FieldSpec:
    type_, unit, scope, reader, part, convert = spec
    return FieldSpec(name, MetricType(type_), generated_help(nvml_source, unit), unit,
                     Reader[reader], parse_part(part), Convert[convert], Scope(scope),
                     default=False)


def parse(text: str) -> DcgmNames:
    """Read dcgm-names.csv: `dcgm_id,reason,nvml_source,names` (space-separated names), then
    for generically read fields `type,unit,scope,reader,source,conversion`."""
    fields: list[DcgmField] = []
    lines = (line for line in text.splitlines() if line and not line.startswith("#"))
    for dcgm_id, reason, nvml_source, names, *spec in csv.reader(lines):
        parsed = Reason(reason)
        if dcgm_id:
            all_names = tuple(names.split())
            generated = _generated(all_names[0], nvml_source, spec) if spec else None
            fields.append(DcgmField(int(dcgm_id), all_names, parsed, nvml_source, generated))
        else:  # Markers that name no field become one entry each.
            fields.extend(DcgmField(None, (n,), parsed, nvml_source) for n in names.split())
    return DcgmNames(fields)


@functools.cache
def dcgm_names() -> DcgmNames:
    """Return the table of DCGM names shipped with the package, read on the first call only."""
    return parse(DATA_PATH.read_text(encoding="utf-8"))

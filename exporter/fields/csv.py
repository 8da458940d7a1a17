"""Reading a collectors CSV in dcgm-exporter's format.

Format: `#` starts a comment line, blank lines are ignored, every other line has exactly three
cells `field name, prometheus type, help` (trimmed; standard CSV quoting).

A field may be named by any of its DCGM names (deprecated aliases, the 4.6 renames, the
dcgm-exporter 1.x names such as `dcgm_gpu_temp`): like dcgm-exporter, the series keep the name
as written. A DCGM field this exporter cannot serve is skipped with a warning that says why;
a name DCGM does not know is an error.
"""

from __future__ import annotations

import csv
import difflib
import io
import re
from dataclasses import dataclass
from pathlib import Path

from exporter.fields.catalog import BY_NAME, FieldSpec, MetricType
from exporter.fields.dcgm_names import DcgmField, dcgm_names


class CollectorsError(ValueError):
    """A collectors file that cannot be used; the message names file:line and the fix."""


@dataclass(frozen=True, slots=True)
class EnabledField:
    spec: FieldSpec
    type: MetricType
    """As the CSV says (`histogram`/`summary` are echoed in `# TYPE` only)."""
    help: str


@dataclass(frozen=True, slots=True)
class Collectors:
    source: str
    fields: tuple[EnabledField, ...]
    warnings: tuple[str, ...]

    @property
    def names(self) -> frozenset[str]:
        return frozenset(f.spec.name for f in self.fields)

    @property
    def specs(self) -> tuple[FieldSpec, ...]:
        return tuple(f.spec for f in self.fields)


_TYPES = {t.value: t for t in MetricType}
_LINE_BREAK = re.compile(r"\r\n|\r|\n")
"""The breaks an editor counts lines by; str.splitlines() also breaks at form feeds, U+2028
and other separators, which would shift every later file:line in a message."""


def _closest(name: str) -> str:
    """A hint naming the known name closest to a typo; case is ignored in the comparison, so
    that `dcgm_fi_dev_gpu_temp` finds DCGM_FI_DEV_GPU_TEMP."""
    by_folded: dict[str, str] = {}
    for known in (*BY_NAME, *dcgm_names()):
        by_folded.setdefault(known.casefold(), known)
    match = difflib.get_close_matches(name.casefold(), list(by_folded), n=1, cutoff=0.6)
    return f"; did you mean {by_folded[match[0]]}?" if match else ""


def _resolve(name: str) -> FieldSpec | DcgmField | None:
    """The spec serving `name`, the DCGM field it names if that is not served, or None.

    Catalog names are answered from the catalog; only other names load the full table.
    """
    return BY_NAME.get(name) or dcgm_names().resolve(name)


_INSTEAD = {
    # DCGM 4 stores NOT_SUPPORTED for these; NVML's equivalent blocks the poll for 20 ms
    # per call and GPU, so they stay unserved and the warning names the GPM field.
    "DCGM_FI_DEV_PCIE_TX_THROUGHPUT": "DCGM_FI_PROF_PCIE_TX_BYTES",
    "DCGM_FI_DEV_PCIE_RX_THROUGHPUT": "DCGM_FI_PROF_PCIE_RX_BYTES",
}


def _unserved_warning(name: str, field: DcgmField) -> str:
    """Why `name` (one of `field`'s names) is skipped."""
    named = name if name == field.name else f"{name} (DCGM field {field.name})"
    instead = _INSTEAD.get(field.name)
    hint = f" ({instead} has the same rate in bytes per second)" if instead else ""
    return f"{named} is not served: {field.reason.explain(field.nvml_source)}{hint}; skipped"


def parse_collectors(text: str, source: str) -> Collectors:
    """Parse CSV text; `source` names the file in messages."""
    fields: list[EnabledField] = []
    warnings: list[str] = []
    seen: dict[str, int] = {}
    for lineno, raw in enumerate(_LINE_BREAK.split(text), start=1):
        stripped = raw.strip()
        if not stripped or stripped.startswith("#"):
            continue
        try:
            row = next(csv.reader(io.StringIO(raw), skipinitialspace=True))
        except csv.Error as exc:
            raise CollectorsError(f"{source}:{lineno}: not valid CSV: {exc}") from exc
        cells = [c.strip() for c in row]
        if len(cells) != 3:
            raise CollectorsError(
                f"{source}:{lineno}: expected 3 columns 'field name, prometheus type, help', "
                f"found {len(cells)}: {stripped!r}"
            )
        name, type_name, help_text = cells
        metric_type = _TYPES.get(type_name)
        if metric_type is None:
            raise CollectorsError(
                f"{source}:{lineno}: unknown prometheus type {type_name!r} for {name}; "
                f"expected one of {', '.join(_TYPES)}"
            )
        spec = _resolve(name)
        if spec is None:
            raise CollectorsError(f"{source}:{lineno}: unknown field {name!r}{_closest(name)}")
        if isinstance(spec, DcgmField):
            warnings.append(f"{source}:{lineno}: {_unserved_warning(name, spec)}")
            continue
        if name in seen:
            warnings.append(
                f"{source}:{lineno}: {name} already enabled at line {seen[name]}; ignored"
            )
            continue
        if (spec.type is MetricType.LABEL) != (metric_type is MetricType.LABEL):
            raise CollectorsError(
                f"{source}:{lineno}: {name} must be of type {spec.type.value}, not {type_name}"
            )
        seen[name] = lineno
        fields.append(EnabledField(spec, metric_type, help_text or spec.help))
    return Collectors(source, tuple(fields), tuple(warnings))


def load_collectors(path: str | Path) -> Collectors:
    """Read and parse a collectors file; unreadable files raise CollectorsError too."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise CollectorsError(f"{p}: cannot read collectors file: {exc.strerror}") from exc
    except UnicodeDecodeError as exc:
        raise CollectorsError(f"{p}: not UTF-8 text: {exc}") from exc
    return parse_collectors(text, str(p))


def default_collectors_path() -> Path:
    """The collectors.csv shipped inside the package (a copy of the repo's root file)."""
    return Path(__file__).with_name("default-collectors.csv")

"""Reading a collectors CSV in dcgm-exporter's format.

Format: `#` starts a comment line, blank lines are ignored, every other line has exactly three
cells `field name, prometheus type, help` (trimmed; standard CSV quoting).

A field may be named by any of its DCGM names (deprecated aliases, the 4.6 renames, the
dcgm-exporter 1.x names such as `dcgm_gpu_temp`): like dcgm-exporter, the series keep the name
as written. A DCGM field this exporter cannot serve is skipped with a warning that says why,
and so is a name no table here knows (a newer DCGM's field, or a typo: the warning names the
closest known name), so that a file written for a newer release never stops a node. Only a
malformed line or an unsupported type is an error, and at start-up a file that enables
nothing (`require_servable`).
"""

from __future__ import annotations

import csv
import difflib
import io
import re
from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path

from exporter.fields.catalog import BY_NAME, FieldSpec, MetricType
from exporter.fields.dcgm_names import DcgmField, dcgm_names
from exporter.textfiles import UnreadableFile, located, read_text


class CollectorsError(ValueError):
    """A collectors file that cannot be used; the message names file:line and the fix."""


@dataclass(frozen=True, slots=True)
class EnabledField:
    """One row of a collectors CSV: the field it selects, and the type and help it is exported
    with."""

    spec: FieldSpec
    type: MetricType
    """As the CSV says (`untyped` is echoed in `# TYPE` only)."""
    help: str


@dataclass(frozen=True, slots=True)
class Collectors:
    """A parsed collectors CSV: the fields it enables, in file order, with the warnings it
    raised."""

    source: str
    fields: tuple[EnabledField, ...]
    warnings: tuple[str, ...]
    skipped: tuple[str, ...] = ()
    """Names, as written, of the rows skipped as unknown or not served (dcgm-exporter would
    watch them: its config file's watch groups are matched against these too)."""

    @property
    def names(self) -> frozenset[str]:
        """Return the names of the enabled fields."""
        return frozenset(f.spec.name for f in self.fields)

    @property
    def specs(self) -> tuple[FieldSpec, ...]:
        """Return the catalog entries of the enabled fields, in file order."""
        return tuple(f.spec for f in self.fields)


_TYPES = {t.value: t for t in MetricType}
"""dcgm-exporter 4.8.3's types: histogram and summary (taken by 4.8.2) are refused."""
_FIELD_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_LINE_BREAK = re.compile(r"\r\n|\r|\n")
"""The breaks an editor counts lines by; str.splitlines() also breaks at form feeds, U+2028
and other separators, which would shift every later file:line in a message."""


def _closest(name: str) -> str:
    """Return a hint naming the known name closest to a typo, comparing without regard to case so
    that `dcgm_fi_dev_gpu_temp` finds DCGM_FI_DEV_GPU_TEMP. Only a typo gets a hint: a newer
    field (`DCGM_EXP_XID_ERRORS_TOTAL`) shares most of its name with an older one
    (`DCGM_EXP_XID_ERRORS_COUNT`) and is not a misspelling of it."""
    by_folded: dict[str, str] = {}
    for known in (*BY_NAME, *dcgm_names()):
        by_folded.setdefault(known.casefold(), known)
    folded = name.casefold()
    for match in difflib.get_close_matches(folded, list(by_folded), n=5, cutoff=0.8):
        if _a_typo_of(folded, match):
            return f" (did you mean {by_folded[match]}?)"
    return ""


def _a_typo_of(name: str, known: str) -> bool:
    """Return whether `name` is `known` with one word misspelt, or nearly all of it alike."""
    words, known_words = name.split("_"), known.split("_")
    if len(words) != len(known_words):
        return difflib.SequenceMatcher(None, name, known).ratio() >= 0.93
    differing = [(a, b) for a, b in zip(words, known_words, strict=True) if a != b]
    return len(differing) <= 1 and all(
        difflib.SequenceMatcher(None, a, b).ratio() >= 0.6 for a, b in differing)


EXPORTER_RENAMES = {
    "DCGM_FI_PROF_PCIE_TX_BYTES_PER_SECOND": "DCGM_FI_PROF_PCIE_TX_BYTES",
    "DCGM_FI_PROF_PCIE_RX_BYTES_PER_SECOND": "DCGM_FI_PROF_PCIE_RX_BYTES",
    "DCGM_FI_PROF_NVLINK_TX_BYTES_PER_SECOND": "DCGM_FI_PROF_NVLINK_TX_BYTES",
    "DCGM_FI_PROF_NVLINK_RX_BYTES_PER_SECOND": "DCGM_FI_PROF_NVLINK_RX_BYTES",
}
"""dcgm-exporter 4.10's names in its shipped collectors files, in no DCGM field table here:
each the catalog field on the right, same unit (bytes per second), served under the name as
written."""


def _resolve(name: str) -> FieldSpec | DcgmField | None:
    """Return the catalog entry serving `name`, else the DCGM field it names when that is not
    served, else None.

    Catalog names are answered from the catalog; only other names load the full table."""
    renamed = EXPORTER_RENAMES.get(name)
    if renamed is not None:
        return replace(BY_NAME[renamed], name=name)
    return BY_NAME.get(name) or dcgm_names().resolve(name)


_INSTEAD = {
    # DCGM 4 stores NOT_SUPPORTED for these; NVML's equivalent blocks the poll for 20 ms
    # per call and GPU, so they stay unserved and the warning names the GPM field.
    "DCGM_FI_DEV_PCIE_TX_THROUGHPUT": "DCGM_FI_PROF_PCIE_TX_BYTES",
    "DCGM_FI_DEV_PCIE_RX_THROUGHPUT": "DCGM_FI_PROF_PCIE_RX_BYTES",
}


def _unserved_warning(name: str, field: DcgmField) -> str:
    """Return the warning that says why `name` (one of `field`'s names) is skipped."""
    named = name if name == field.name else f"{name} (DCGM field {field.name})"
    instead = _INSTEAD.get(field.name)
    hint = f" ({instead} has the same rate in bytes per second)" if instead else ""
    return f"{named} is not served: {field.reason.explain(field.nvml_source)}{hint}; skipped"


Row = tuple[int, str, str, str]
"""(line number, field name, prometheus type, help) of one row, its cells trimmed."""


def parse_collectors(text: str, source: str) -> Collectors:
    """Parse CSV text; `source` names the file in messages."""
    return collectors_from_rows(_csv_rows(text, source), source)


def _csv_rows(text: str, source: str) -> list[Row]:
    rows: list[Row] = []
    for lineno, raw in enumerate(_LINE_BREAK.split(text), start=1):
        stripped = raw.strip()
        if not stripped or stripped.startswith("#"):
            continue
        try:
            row = next(csv.reader(io.StringIO(raw), skipinitialspace=True))
        except csv.Error as exc:
            raise CollectorsError(located(source, lineno, None, f"not valid CSV: {exc}")) from exc
        cells = [c.strip() for c in row]
        if len(cells) != 3:
            raise CollectorsError(located(
                source, lineno, None, "expected 3 columns 'field name, prometheus type, help', "
                f"found {len(cells)}: {stripped!r}"))
        rows.append((lineno, cells[0], cells[1], cells[2]))
    return rows


def collectors_from_rows(rows: Iterable[Row], source: str) -> Collectors:
    """Check rows as dcgm-exporter 4.8.3+ does, the type before the name; `source` names
    where they come from (a CSV file, or a YAML file's inline fields)."""
    fields: list[EnabledField] = []
    warnings: list[str] = []
    seen: dict[str, int] = {}
    skipped: list[str] = []
    for lineno, name, type_name, help_text in rows:
        metric_type = _TYPES.get(type_name)
        if metric_type is None:
            raise CollectorsError(located(
                source, lineno, None, f"unsupported prometheus type {type_name!r} for {name}; "
                "supported types are counter, gauge, untyped and label"))
        if not _FIELD_NAME.fullmatch(name):
            raise CollectorsError(located(source, lineno, None, f"{name!r} is not a field name "
                                          "(a DCGM name such as DCGM_FI_DEV_GPU_TEMP)"))
        spec = _resolve(name)
        if spec is None:
            # A newer DCGM or dcgm-exporter names fields this one does not know yet: the
            # node serves the rest rather than stopping.
            warnings.append(located(source, lineno, None,
                                    f"unknown field {name!r}{_closest(name)}; skipped"))
            skipped.append(name)
            continue
        if isinstance(spec, DcgmField):
            warnings.append(located(source, lineno, None, _unserved_warning(name, spec)))
            skipped.append(name)
            continue
        if name in seen:
            warnings.append(located(source, lineno, None,
                                    f"{name} already enabled at line {seen[name]}; ignored"))
            continue
        if (spec.type is MetricType.LABEL) != (metric_type is MetricType.LABEL):
            raise CollectorsError(located(
                source, lineno, None, f"{name} must be of type {spec.type.value}, not {type_name}"))
        seen[name] = lineno
        fields.append(EnabledField(spec, metric_type, help_text or spec.help))
    return Collectors(source, tuple(fields), tuple(warnings), tuple(skipped))


def require_servable(collectors: Collectors) -> Collectors:
    """Return the collectors, unless they enable no field at all: a node serving nothing is an
    error at start-up (CollectorsError, naming the first row skipped), not an empty page."""
    if collectors.fields:
        return collectors
    message = f"{collectors.source}: enables no field this exporter serves"
    if collectors.warnings:
        more = len(collectors.warnings) - 1
        message += f"; {collectors.warnings[0]}" + (f" (and {more} more rows skipped)"
                                                    if more else "")
    raise CollectorsError(message)


def load_collectors(path: str | Path) -> Collectors:
    """Read and parse a collectors file; unreadable files raise CollectorsError too."""
    p = Path(path)
    try:
        text = read_text(p)
    except UnreadableFile as exc:
        raise CollectorsError(str(exc)) from None
    return parse_collectors(text, str(p))


def default_collectors_path() -> Path:
    """Return the path of the collectors CSV shipped inside the package (a copy of the one at the
    root of the repository)."""
    return Path(__file__).with_name("default-collectors.csv")

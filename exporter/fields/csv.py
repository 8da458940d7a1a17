"""Reading a collectors CSV in dcgm-exporter's format.

Format: `#` starts a comment line, blank lines are ignored, every other line has exactly three
cells `field name, prometheus type, help` (trimmed; standard CSV quoting).
"""

from __future__ import annotations

import csv
import difflib
import io
from dataclasses import dataclass
from pathlib import Path

from exporter.fields.catalog import BY_NAME, KNOWN_UNSERVED, FieldSpec, MetricType


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


def _closest(name: str) -> str:
    candidates = list(BY_NAME) + sorted(KNOWN_UNSERVED)
    match = difflib.get_close_matches(name, candidates, n=1, cutoff=0.6)
    return f"; did you mean {match[0]}?" if match else ""


def parse_collectors(text: str, source: str) -> Collectors:
    """Parse CSV text; `source` names the file in messages."""
    fields: list[EnabledField] = []
    warnings: list[str] = []
    seen: dict[str, int] = {}
    for lineno, raw in enumerate(text.splitlines(), start=1):
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
        spec = BY_NAME.get(name)
        if spec is None:
            if name in KNOWN_UNSERVED:
                warnings.append(
                    f"{source}:{lineno}: {name} is a DCGM field this exporter does not serve "
                    "(NVML has no equivalent); skipped"
                )
                continue
            raise CollectorsError(f"{source}:{lineno}: unknown field {name!r}{_closest(name)}")
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

"""Which DCGM fields the generated artifacts may use: those enabled in a collectors CSV.

A panel or alert over a field nobody collects would show "No data" (or never fire), so every
generator asks this module first.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from exporter.fields.catalog import BY_NAME, CATALOG, FieldSpec
from exporter.fields.csv import load_collectors

REPO_ROOT = Path(__file__).resolve().parents[2]

_FIELD_TOKEN = re.compile(r"\bDCGM_(?:FI|EXP)_[A-Z0-9_]+\b")


@dataclass(frozen=True, slots=True)
class FieldSet:
    source: str
    names: frozenset[str]

    def has(self, *names: str) -> bool:
        return all(n in self.names for n in names)

    def spec(self, name: str) -> FieldSpec:
        return BY_NAME[name]

    def allows(self, promql: str) -> bool:
        """True when every DCGM field a PromQL expression mentions is enabled."""
        return all(tok in self.names for tok in _FIELD_TOKEN.findall(promql))


def default_collectors_path() -> Path | None:
    """The repository's collectors.csv, else the copy shipped in the package, else None."""
    root_csv = REPO_ROOT / "collectors.csv"
    if root_csv.is_file():
        return root_csv
    packaged = Path(__file__).resolve().parents[1] / "fields" / "default-collectors.csv"
    return packaged if packaged.is_file() else None


def load_fieldset(path: Path | None) -> FieldSet:
    """Fields enabled by the CSV at `path` (or the default one).

    Without any CSV on disk the catalog's own `default` flags stand in: they document what the
    project's collectors.csv enables.
    """
    if path is None:
        path = default_collectors_path()
    if path is None:
        return FieldSet("catalog defaults", frozenset(s.name for s in CATALOG if s.default))
    return FieldSet(str(path), load_collectors(path).names)


def everything() -> FieldSet:
    """Every field the catalog serves (used to exercise every generated rule in tests)."""
    return FieldSet("catalog", frozenset(s.name for s in CATALOG))

"""Which DCGM fields the generated artifacts may use: those enabled in a collectors CSV.

A panel or alert over a field nobody collects would show "No data" (or never fire), so every
generator asks this module first.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from exporter.fields.catalog import CATALOG
from exporter.fields.csv import default_collectors_path as packaged_collectors_path
from exporter.fields.csv import load_collectors
from exporter.promql import gpm

REPO_ROOT = Path(__file__).resolve().parents[2]

_FIELD_TOKEN = re.compile(r"\bDCGM_(?:FI|EXP)_[A-Z0-9_]+\b")


@dataclass(frozen=True, slots=True)
class FieldSet:
    source: str
    names: frozenset[str]

    def has(self, *names: str) -> bool:
        return all(n in self.names for n in names)

    def allows(self, promql: str) -> bool:
        """True when every DCGM field a PromQL expression mentions is enabled."""
        return all(tok in self.names for tok in _FIELD_TOKEN.findall(promql))

    def resolve(self, promql: str) -> str | None:
        """`promql` with its GPM measures (`exporter.promql.gpm` placeholders) read from the
        enabled sources only; None when a measure has none or another field is disabled."""
        out = gpm.resolve(promql, self.names.__contains__)
        return out if out is not None and self.allows(out) else None


def default_collectors_path() -> Path:
    """The repository's collectors.csv, else the copy shipped inside the package."""
    root_csv = REPO_ROOT / "collectors.csv"
    return root_csv if root_csv.is_file() else packaged_collectors_path()


def load_fieldset(path: Path | None) -> FieldSet:
    """Fields enabled by the CSV at `path` (default: the project's collectors.csv)."""
    path = default_collectors_path() if path is None else path
    return FieldSet(str(path), load_collectors(path).names)


def everything() -> FieldSet:
    """Every field the catalog serves (used to exercise every generated rule in tests)."""
    return FieldSet("catalog", frozenset(s.name for s in CATALOG))

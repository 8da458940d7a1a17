"""Which DCGM fields the generated artifacts may use: those enabled in a collectors CSV.

A panel or alert over a field nobody collects would show "No data" (or never fire), so every
generator asks this module first.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from exporter.fields.catalog import CATALOG
from exporter.fields.csv import default_collectors_path, load_collectors, require_servable
from exporter.promql import measures as gpm

DEFAULT_NAME = "collectors.csv"
"""What generated files say they came from when no collectors file is given: the built-in
copy of the project's collectors.csv (tests/fields/test_csv.py keeps the two equal)."""

_FIELD_TOKEN = re.compile(r"\bDCGM_(?:FI|EXP)_[A-Z0-9_]+\b")


@dataclass(frozen=True, slots=True)
class FieldSet:
    """The DCGM fields the generated files may read, the ones a collectors CSV enables, and where
    they were read from."""

    source: str
    """Where the names came from, for messages: the collectors file's path."""
    names: frozenset[str]
    file_name: str = ""
    """The source's name in generated files' headers; "": the last part of `source`."""

    def has(self, *names: str) -> bool:
        """Return whether every field in `names` is enabled."""
        return all(n in self.names for n in names)

    def allows(self, promql: str) -> bool:
        """Return True when every DCGM field a PromQL expression mentions is enabled."""
        return all(tok in self.names for tok in _FIELD_TOKEN.findall(promql))

    def resolve(self, promql: str) -> str | None:
        """Return `promql` with its GPM measures (`exporter.promql.measures` placeholders) read from
        the enabled sources only; None when a measure has none or another field is disabled."""
        out = gpm.resolve(promql, self.names.__contains__)
        return out if out is not None and self.allows(out) else None

    @property
    def header_name(self) -> str:
        """Return the collectors file's name as generated files' headers give it."""
        return self.file_name or Path(self.source).name


def load_fieldset(path: Path | None) -> FieldSet:
    """Return the fields enabled by the CSV at `path`, or for None the built-in collectors.csv, the
    one the package ships (so `generate` gives the same files installed as in the repository)."""
    if path is None:
        builtin = default_collectors_path()
        return FieldSet(str(builtin), load_collectors(builtin).names, DEFAULT_NAME)
    # As serve does: a file whose every row is skipped is refused, naming the first row.
    return FieldSet(str(path), require_servable(load_collectors(path)).names)


def everything() -> FieldSet:
    """Return every field the catalog serves (used to exercise every generated rule in tests)."""
    return FieldSet("catalog", frozenset(s.name for s in CATALOG))

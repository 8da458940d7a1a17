"""The config file's watch groups checked against the collectors, as dcgm-exporter 4.8.4
checks them when it sets up its watches: no field may match the patterns of two groups, and
every group must match some field (the fields no group matches keep the collect interval).
NVML is read directly at each poll here, so a group sets nothing; but a file dcgm-exporter
refuses at start-up is refused here too.

The names matched are those of dcgm-exporter's DCGM fields: each collectors row naming a DCGM
field, served here or skipped (dcgm-exporter would still watch it), under the name the row
gives, one name per DCGM field; no `DCGM_EXP_` field (those are the exporter's own, never
watched); and DCGM_FI_DEV_XID_ERRORS or DCGM_FI_DEV_CLOCKS_EVENT_REASONS where an exporter
field needs it and no row names it, as dcgm-exporter adds them. A row naming no field known
here (a newer DCGM's, perhaps) is matched under its name, so that no group dcgm-exporter may
accept is refused for it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path

from exporter.fields.csv import Collectors
from exporter.options.config_file import WatchGroup
from exporter.options.go_glob import compile_go_pattern
from exporter.yamlfiles import YamlError

_EXPORTER_PREFIX = "DCGM_EXP_"
_DEPENDENCIES = (
    ("DCGM_FI_DEV_XID_ERRORS", ("DCGM_EXP_XID_ERRORS_COUNT", "DCGM_EXP_XID_ERRORS_TOTAL")),
    ("DCGM_FI_DEV_CLOCKS_EVENT_REASONS", ("DCGM_EXP_CLOCK_EVENTS_COUNT",
                                          "DCGM_EXP_CLOCK_EVENTS_TOTAL")),
)
"""A DCGM field dcgm-exporter watches for its exporter fields, and those fields."""


def watched_names(collectors: Collectors) -> list[str]:
    """Return the names dcgm-exporter would match the watch groups against, by DCGM id."""
    from exporter.fields.dcgm_names import dcgm_names

    table = dcgm_names()
    by_id: dict[int, str] = {}
    unknown: list[str] = []
    exporter_fields: set[str] = set()
    for name in (*(f.spec.name for f in collectors.fields), *collectors.skipped):
        field = table.field(name)
        if name.startswith(_EXPORTER_PREFIX):
            exporter_fields.add(name)
        elif field is None:
            unknown.append(name)
        elif field.dcgm_id is not None:  # None: a range marker, which names no field
            by_id[field.dcgm_id] = name
    for needed, users in _DEPENDENCIES:
        dependency = table.field(needed)
        if dependency is not None and dependency.dcgm_id is not None and \
                exporter_fields.intersection(users):
            by_id.setdefault(dependency.dcgm_id, needed)
    return [by_id[dcgm_id] for dcgm_id in sorted(by_id)] + unknown


def check_watch_groups(path: Path, groups: Iterable[WatchGroup],
                       collectors: Collectors) -> None:
    """Refuse (YamlError, one line naming the file, the line, the key and the field) a field
    that two groups match, then a group that matches no field."""
    groups = tuple(groups)
    if not groups:
        return
    compiled = [[(compile_go_pattern(pattern), pattern, at)
                 for pattern, at in zip(group.patterns, group.pattern_at, strict=True)]
                for group in groups]
    matched = [0] * len(groups)
    for name in watched_names(collectors):
        first: tuple[WatchGroup, str, tuple[int, str]] | None = None
        for index, group in enumerate(groups):
            hit = _first_match(compiled[index], name)
            if hit is None:
                continue
            matched[index] += 1
            pattern, (line, key) = hit
            if first is not None:
                other, other_pattern, (other_line, other_key) = first
                raise YamlError(
                    f"{path}:{line}: {key}: {pattern!r} of watch group {group.name!r} matches "
                    f"{name}, and so does {other_pattern!r} of watch group {other.name!r} "
                    f"(line {other_line}, {other_key}); a field may be in one watch group "
                    "only")
            first = (group, pattern, (line, key))
    for group, count in zip(groups, matched, strict=True):
        if not count:
            patterns = ", ".join(repr(p) for p in group.patterns)
            raise YamlError(f"{group.where}: watch group {group.name!r} ({patterns}) matches "
                            f"no field of the collectors ({collectors.source}); each group "
                            "must match at least one (Go path.Match patterns, case-sensitive)")


def _first_match(patterns: list[tuple[re.Pattern[str], str, tuple[int, str]]],
                 name: str) -> tuple[str, tuple[int, str]] | None:
    for regex, pattern, at in patterns:
        if regex.fullmatch(name):
            return pattern, at
    return None

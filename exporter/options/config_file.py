"""dcgm-exporter's YAML config file (`--config-file`), versions 1 and 2, checked as its 4.8.4
`appconfig/yaml_config.go` checks them, and what each key stands for here.

Version 1 has `metrics`, `collection` (interval, retention, watchGroups), `sources.dcgm.
detectBindUnbind` and `server`; version 2 has `metrics`, `collections` (the one including
exactly `["*"]` sets the collect interval and default retention, the others are watch
groups), `sources.dcgm` (watch, detectBindUnbind) and `server`. The schemas do not mix.

Meaning here: `metrics.file` is the collectors file, `metrics.fields` inline collectors rows,
the interval the collect interval, `server.maxConcurrentScrapes` and `metrics.
enableExporterMetrics` their flags. Watch retention, watch groups and bind/unbind detection
are DCGM's: checked as upstream checks them, then each one given logs one warning saying it
means nothing here, as the equivalent flags do. `exporter.config` applies the result under
the flags and variables that were set; once the collectors are known, serve checks the watch
groups' patterns against them (`exporter.options.watch_groups`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import cast

from exporter.options.go_duration import NANOSECONDS, parse_go_duration
from exporter.options.go_glob import BadPattern, compile_go_pattern
from exporter.options.yaml_strict import Decoded, Schema, Sequence, YamlError, compose_one, decode
from exporter.textfiles import UnreadableFile, located, read_text

NO_WATCHES = ("NVML is read directly at each poll; there are no DCGM field watches whose "
              "samples to keep or whose intervals to set")
REENUMERATED = ("GPUs that come or go are found by re-enumeration (every minute, and at once "
                "after a GPU is lost)")
MAX_SAMPLES = 2**31 - 1

_DETECT: Schema = {"enabled": "bool", "pollInterval": "str"}
_FIELD: Schema = {"name": "str", "prometheusType": "str", "help": "str"}
_METRICS: Schema = {"file": "str", "fields": Sequence(_FIELD), "enableExporterMetrics": "bool"}
_SERVER: Schema = {"maxConcurrentScrapes": "int"}
_RETENTION_V1: Schema = {"maxAge": "str", "maxSamples": "int"}
_WATCH: Schema = {"maxKeepAge": "str", "maxKeepSamples": "int"}
SCHEMA_V1: Schema = {
    "version": "int",
    "sources": {"dcgm": {"detectBindUnbind": _DETECT}},
    "metrics": _METRICS,
    "collection": {"interval": "str", "retention": _RETENTION_V1,
                   "watchGroups": Sequence({"name": "str", "interval": "str",
                                            "fields": Sequence("str"),
                                            "retention": _RETENTION_V1})},
    "server": _SERVER,
}
SCHEMA_V2: Schema = {
    "version": "int",
    "metrics": _METRICS,
    "collections": Sequence({"name": "str", "every": "str",
                             "metrics": {"include": Sequence("str")},
                             "sources": {"dcgm": {"watch": _WATCH}}}),
    "sources": {"dcgm": {"watch": _WATCH, "detectBindUnbind": _DETECT}},
    "server": _SERVER,
}

Row = tuple[int, str, str, str]
"""An inline metrics field as a collectors row: (line, name, prometheus type, help)."""
Tree = Mapping[str, object]


@dataclass(frozen=True, slots=True)
class Retention:
    """A watch retention override: None leaves the value it is laid over."""

    max_age_s: float | None = None
    max_samples: int | None = None

    def over(self, age_s: float, samples: int) -> tuple[float, int]:
        """The values this override leaves of `age_s` and `samples`."""
        return (age_s if self.max_age_s is None else self.max_age_s,
                samples if self.max_samples is None else self.max_samples)

    def under(self, top: Retention) -> Retention:
        """This override with `top`'s set values laid over it."""
        return Retention(self.max_age_s if top.max_age_s is None else top.max_age_s,
                         self.max_samples if top.max_samples is None else top.max_samples)


@dataclass(frozen=True, slots=True)
class WatchGroup:
    """Fields (glob patterns) DCGM would watch at their own interval."""

    name: str
    where: str
    """`FILE:LINE: KEY` of the group, for messages."""
    interval_ms: int
    patterns: tuple[str, ...]
    """Go path.Match patterns (`exporter.options.go_glob`), each valid."""
    retention: Retention
    pattern_at: tuple[tuple[int, str], ...] = ()
    """(line, key) of each pattern, for messages."""


@dataclass(frozen=True, slots=True)
class ConfigFile:
    """What the file sets; None: not set by the file."""

    path: Path
    version: int
    collectors_file: Path | None = None
    inline_rows: tuple[Row, ...] | None = None
    collect_interval_s: float | None = None
    max_concurrent_scrapes: int | None = None
    enable_exporter_metrics: bool | None = None
    retention: Retention = Retention()
    watch_groups: tuple[WatchGroup, ...] = ()
    bind_unbind_watch: bool | None = None
    bind_unbind_poll_s: float | None = None
    warnings: tuple[str, ...] = ()
    """One line per key that means nothing here."""


class _Reader:
    """The decoded file, with the means to name any key's line in an error."""

    def __init__(self, path: Path, version: int, decoded: Decoded) -> None:
        self.path = path
        self.version = version
        self.tree = cast("Tree", decoded.value or {})
        self.lines = decoded.lines
        self.warnings: list[str] = []

    def line_of(self, key: str) -> int:
        """The line of `key`, else of the nearest key above it that has one, else 1."""
        line = self.lines.get(key)
        while line is None and "." in key:
            key = key.rsplit(".", 1)[0]
            line = self.lines.get(key)
        return line or 1

    def error(self, key: str, message: str) -> YamlError:
        return YamlError(located(self.path, self.line_of(key), key, message))

    def ignored(self, key: str, reason: str) -> None:
        self.warnings.append(located(self.path, self.line_of(key), key,
                                     f"accepted for compatibility; ignored because {reason}"))

    def millis(self, key: str, text: object) -> int:
        """parseYAMLDurationMillis: a Go duration, > 0, in whole milliseconds."""
        ns = self.go_duration(key, text)
        if ns <= 0:
            raise self.error(key, "must be greater than 0")
        if ns % NANOSECONDS["ms"]:
            raise self.error(key, "must be expressed in whole milliseconds or larger")
        return ns // NANOSECONDS["ms"]

    def go_duration(self, key: str, text: object) -> int:
        try:
            return parse_go_duration(str(text or "").strip())
        except ValueError as exc:
            raise self.error(key, str(exc)) from None

    def retention(self, key: str, tree: object, age: str, samples: str) -> Retention:
        """watchRetentionOverride: age a Go duration >= 0, samples 0 to 2147483647."""
        if not isinstance(tree, Mapping):
            return Retention()
        override = Retention()
        if age in tree:
            ns = self.go_duration(f"{key}.{age}", tree[age])
            if ns < 0:
                raise self.error(f"{key}.{age}", "must not be negative")
            override = Retention(ns / 1e9, None)
        if samples in tree:
            count = cast("int", tree[samples])
            if count < 0:
                raise self.error(f"{key}.{samples}", "must not be negative")
            if count > MAX_SAMPLES:
                raise self.error(f"{key}.{samples}", f"must not exceed {MAX_SAMPLES}")
            override = Retention(override.max_age_s, count)
        if override != Retention():
            self.ignored(key, NO_WATCHES)
        return override


def read_config_file(path: Path) -> ConfigFile:
    """Read and check the file; YamlError (one line: file, line, key) when it cannot be
    used."""
    try:
        text = read_text(path)
    except UnreadableFile as exc:
        raise YamlError(str(exc)) from None
    return parse_config_file(path, text)


def parse_config_file(path: Path, text: str) -> ConfigFile:
    from yaml.nodes import MappingNode

    node = compose_one(path, text)
    version = 0
    if isinstance(node, MappingNode):
        for key, value in node.value:
            if key.value == "version":
                version = cast("int", decode(path, value, "int", "version").value or 0)
    elif not (node.tag.endswith(":null")):
        raise YamlError(f"{path}:1: expected a mapping with version: 1 or 2")
    if version not in (1, 2):
        line = next((int(k.start_mark.line) + 1 for k, _ in node.value
                     if k.value == "version"), 1) if isinstance(node, MappingNode) else 1
        raise YamlError(f"{path}:{line}: version: must be 1 or 2")
    reader = _Reader(path, version, decode(path, node, SCHEMA_V1 if version == 1 else SCHEMA_V2))
    settings = _settings(reader)
    if version == 1:
        interval, retention, groups = _collection_v1(reader)
    else:
        interval, retention, groups = _collections_v2(reader)
    return replace(settings, collect_interval_s=interval, retention=retention,
                   watch_groups=groups, warnings=tuple(reader.warnings))


def _settings(reader: _Reader) -> ConfigFile:
    """What both versions share: metrics, server and sources.dcgm.detectBindUnbind."""
    found = ConfigFile(reader.path, reader.version)
    server = cast("Tree", reader.tree.get("server", {}))
    if "maxConcurrentScrapes" in server:
        scrapes = cast("int", server["maxConcurrentScrapes"])
        if scrapes <= 0:
            raise reader.error("server.maxConcurrentScrapes", "must be greater than 0")
        found = replace(found, max_concurrent_scrapes=scrapes)
    if "metrics" in reader.tree:
        found = _metrics(reader, cast("Tree", reader.tree["metrics"]), found)
    detect = cast("Tree", cast("Tree", cast("Tree", reader.tree.get("sources", {}))
                               .get("dcgm", {})).get("detectBindUnbind"))
    return found if detect is None else _detect_bind_unbind(reader, detect, found)


def _metrics(reader: _Reader, metrics: Tree, found: ConfigFile) -> ConfigFile:
    file = str(metrics.get("file", "")).strip()
    rows = cast("list[Tree]", metrics.get("fields", []))
    if "enableExporterMetrics" in metrics:
        found = replace(found, enable_exporter_metrics=metrics["enableExporterMetrics"] is True)
    if file and rows:
        raise reader.error("metrics", "must specify exactly one of file or fields")
    if file:
        return replace(found, collectors_file=Path(file))
    if rows:
        return replace(found, inline_rows=_inline_rows(reader, rows))
    if "enableExporterMetrics" not in metrics:
        raise reader.error("metrics", "must specify file, fields, or enableExporterMetrics")
    return found


def _detect_bind_unbind(reader: _Reader, detect: Tree, found: ConfigFile) -> ConfigFile:
    key = "sources.dcgm.detectBindUnbind"
    poll = str(detect.get("pollInterval", "")).strip()
    if poll:
        ns = reader.go_duration(f"{key}.pollInterval", poll)
        if ns <= 0:
            raise reader.error(f"{key}.pollInterval", "must be greater than 0")
        found = replace(found, bind_unbind_poll_s=ns / 1e9)
    if "enabled" in detect:
        found = replace(found, bind_unbind_watch=detect["enabled"] is True)
    if detect.get("enabled") is True:  # the chart's default (off) says nothing
        reader.ignored(key, REENUMERATED)
    return found


def _inline_rows(reader: _Reader, rows: list[Tree]) -> tuple[Row, ...]:
    found: list[Row] = []
    first: dict[str, int] = {}
    for index, row in enumerate(rows):
        key = f"metrics.fields[{index}]"
        cells = {name: str(row.get(name, "")).strip()
                 for name in ("name", "prometheusType", "help")}
        if not cells["name"]:
            raise reader.error(f"{key}.name", "is required")
        if cells["name"] in first:
            raise reader.error(f"{key}.name", f"duplicates metrics.fields[{first[cells['name']]}]"
                                              f".name {cells['name']!r}")
        first[cells["name"]] = index
        for name in ("prometheusType", "help"):
            if not cells[name]:
                raise reader.error(f"{key}.{name}", "is required")
        found.append((reader.lines.get(key, 1), cells["name"], cells["prometheusType"],
                      cells["help"]))
    return tuple(found)


def _patterns(reader: _Reader, key: str, given: object) -> tuple[str, ...]:
    items = [str(p).strip() for p in cast("list[object]", given or [])]
    if not items:
        raise reader.error(key, "must not be empty")
    for index, item in enumerate(items):
        if not item:
            raise reader.error(f"{key}[{index}]", "is required")
        try:
            compile_go_pattern(item)
        except BadPattern as exc:  # dcgm-exporter refuses it before matching any field
            raise reader.error(f"{key}[{index}]", f"invalid field pattern {item!r}: {exc}") \
                from None
    return tuple(items)


def _pattern_at(reader: _Reader, key: str, count: int) -> tuple[tuple[int, str], ...]:
    keys = [f"{key}[{index}]" for index in range(count)]
    return tuple((reader.lines.get(k, 1), k) for k in keys)  # the decoder notes each line


def _group(reader: _Reader, key: str, name: object, names: set[str]) -> str:
    text = str(name or "").strip()
    if not text:
        raise reader.error(f"{key}.name", "is required")
    if text in names:
        raise reader.error(f"{key}.name", f"{text!r} is duplicated")
    names.add(text)
    return text


def _both_zero(reader: _Reader, key: str, retention: Retention, what: str) -> None:
    if retention.max_age_s == 0 and retention.max_samples == 0:
        raise reader.error(key, f"{what} cannot both be zero")


Collection = tuple[float | None, Retention, tuple[WatchGroup, ...]]


def _collection_v1(reader: _Reader) -> Collection:
    if "collection" not in reader.tree:
        return None, Retention(), ()
    collection = cast("Tree", reader.tree["collection"])
    interval = None
    if str(collection.get("interval", "")).strip():
        interval = reader.millis("collection.interval", collection["interval"]) / 1000
    groups: list[WatchGroup] = []
    names: set[str] = set()
    for index, group in enumerate(cast("list[Tree]", collection.get("watchGroups", []))):
        key = f"collection.watchGroups[{index}]"
        name = _group(reader, key, group.get("name"), names)
        millis = reader.millis(f"{key}.interval", group.get("interval"))
        patterns = _patterns(reader, f"{key}.fields", group.get("fields"))
        retention = reader.retention(f"{key}.retention", group.get("retention"),
                                     "maxAge", "maxSamples")
        _both_zero(reader, f"{key}.retention", retention, "maxAge and maxSamples")
        where = located(reader.path, reader.line_of(key), None, key)
        groups.append(WatchGroup(name, where, millis, patterns,
                                 retention, _pattern_at(reader, f"{key}.fields",
                                                        len(patterns))))
    retention = reader.retention("collection.retention", collection.get("retention"),
                                 "maxAge", "maxSamples")
    for index in range(len(groups)):
        reader.ignored(f"collection.watchGroups[{index}]", NO_WATCHES)
    return interval, retention, tuple(groups)


def _collections_v2(reader: _Reader) -> Collection:
    sources = cast("Tree", cast("Tree", reader.tree.get("sources", {})).get("dcgm", {}))
    retention = reader.retention("sources.dcgm.watch", sources.get("watch"), "maxKeepAge",
                                 "maxKeepSamples")
    if "collections" not in reader.tree:
        return None, retention, ()
    collections = cast("list[Tree]", reader.tree["collections"])
    if not collections:
        raise reader.error("collections", "must contain at least one collection")
    interval: float | None = None
    default_name: str | None = None
    groups: list[WatchGroup] = []
    names: set[str] = set()
    for index, collection in enumerate(collections):
        key = f"collections[{index}]"
        name = _group(reader, key, collection.get("name"), names)
        millis = reader.millis(f"{key}.every", collection.get("every"))
        patterns = _patterns(reader, f"{key}.metrics.include",
                             cast("Tree", collection.get("metrics", {})).get("include"))
        watch = cast("Tree", cast("Tree", collection.get("sources", {})).get("dcgm", {}))
        own = reader.retention(f"{key}.sources.dcgm.watch", watch.get("watch"), "maxKeepAge",
                               "maxKeepSamples")
        _both_zero(reader, f"{key}.sources.dcgm.watch", own, "maxKeepAge and maxKeepSamples")
        if patterns == ("*",):
            if default_name is not None:
                raise reader.error(f"{key}.metrics.include", "duplicates the all-fields "
                                                             f"collection {default_name!r}")
            default_name, interval = name, millis / 1000
            retention = retention.under(own)
            continue
        where = located(reader.path, reader.line_of(key), None, key)
        groups.append(WatchGroup(name, where, millis, patterns, own,
                                 _pattern_at(reader, f"{key}.metrics.include",
                                             len(patterns))))
        reader.ignored(key, NO_WATCHES)
    return interval, retention, tuple(groups)

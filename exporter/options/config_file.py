"""dcgm-exporter's YAML config file (`--config-file`), versions 1 and 2, checked as its 4.8.4
`appconfig/yaml_config.go` checks them, and what each key stands for here.

Version 1 has `metrics`, `collection` (interval, retention, watchGroups),
`sources.dcgm.detectBindUnbind` and `server`; version 2 has `metrics`, `collections` (the one
including exactly `["*"]` sets the collect interval and default retention, the others are
watch groups), `sources.dcgm` (watch, detectBindUnbind) and `server`. The schemas do not mix.

Meaning here: `metrics.file` is the collectors file, `metrics.fields` inline collectors rows,
the interval the collect interval, `server.maxConcurrentScrapes` and
`metrics.enableExporterMetrics` their flags. Watch retention, watch groups and bind/unbind detection
are DCGM's: checked as upstream checks them, then each one given logs one warning saying it
means nothing here, as the equivalent flags do. `exporter.config` applies the result under
the flags and variables that were set; once the collectors are known, serve checks the watch
groups' patterns against them (`exporter.options.watch_groups`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from exporter.options.go_duration import NANOSECONDS, parse_go_duration
from exporter.options.go_glob import BadPattern, compile_go_pattern
from exporter.textfiles import located
from exporter.yamlfiles import (
    Schema,
    Section,
    Sequence,
    YamlError,
    compose_one,
    decode,
    read_yaml_text,
)

NO_WATCHES = ("NVML is read directly at each poll; there are no DCGM field watches whose "
              "samples to keep or whose intervals to set")
REENUMERATED = ("GPUs that come or go are found by re-enumeration (every minute, and at once "
                "after a GPU is lost)")
MAX_SAMPLES = 2**31 - 1

_DETECT: Schema = {"enabled": "bool", "pollInterval": "text"}
_FIELD: Schema = {"name": "text", "prometheusType": "text", "help": "text"}
_METRICS: Schema = {"file": "text", "fields": Sequence(_FIELD), "enableExporterMetrics": "bool"}
_SERVER: Schema = {"maxConcurrentScrapes": "int"}
_RETENTION_V1: Schema = {"maxAge": "text", "maxSamples": "int"}
_WATCH: Schema = {"maxKeepAge": "text", "maxKeepSamples": "int"}
SCHEMA_V1: Schema = {
    "version": "int",
    "sources": {"dcgm": {"detectBindUnbind": _DETECT}},
    "metrics": _METRICS,
    "collection": {"interval": "text", "retention": _RETENTION_V1,
                   "watchGroups": Sequence({"name": "text", "interval": "text",
                                            "fields": Sequence("text"),
                                            "retention": _RETENTION_V1})},
    "server": _SERVER,
}
SCHEMA_V2: Schema = {
    "version": "int",
    "metrics": _METRICS,
    "collections": Sequence({"name": "text", "every": "text",
                             "metrics": {"include": Sequence("text")},
                             "sources": {"dcgm": {"watch": _WATCH}}}),
    "sources": {"dcgm": {"watch": _WATCH, "detectBindUnbind": _DETECT}},
    "server": _SERVER,
}

Row = tuple[int, str, str, str]
"""An inline metrics field as a collectors row: (line, name, prometheus type, help)."""


@dataclass(frozen=True, slots=True)
class Retention:
    """A watch retention override: None leaves the value it is laid over."""

    max_age_s: float | None = None
    max_samples: int | None = None

    def over(self, age_s: float, samples: int) -> tuple[float, int]:
        """Return the age and sample limits this override leaves of `age_s` and `samples`:
        its own where it sets one, else theirs."""
        return (age_s if self.max_age_s is None else self.max_age_s,
                samples if self.max_samples is None else self.max_samples)

    def under(self, top: Retention) -> Retention:
        """Return this override with `top`'s set values laid over it: `top` wins where it
        sets a value."""
        return Retention(self.max_age_s if top.max_age_s is None else top.max_age_s,
                         self.max_samples if top.max_samples is None else top.max_samples)


@dataclass(frozen=True, slots=True)
class WatchGroup:
    """Fields (glob patterns) DCGM would watch at their own interval."""

    name: str
    where: str
    """Where the group is written, `FILE:LINE: KEY`, for error messages."""
    interval_ms: int
    patterns: tuple[str, ...]
    """Go path.Match patterns (`exporter.options.go_glob`), each valid."""
    retention: Retention
    pattern_at: tuple[tuple[int, str], ...] = ()
    """The line and key path of each pattern, for error messages."""


@dataclass(frozen=True, slots=True)
class ConfigFile:
    """What the config file sets; a field is None where the file does not set it."""

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
    """The decoded file (`root`), with the means to name any key's line in an error."""

    def __init__(self, root: Section, version: int) -> None:
        self.root = root
        self.path = Path(root.path)
        self.version = version
        self.warnings: list[str] = []

    def line_of(self, key: str) -> int:
        """Return the line of the key path `key`, else of the nearest key above it that has
        one."""
        return self.root.line_of(key)

    def error(self, key: str, message: str) -> YamlError:
        return self.root.error(key, message)

    def ignored(self, key: str, reason: str) -> None:
        self.warnings.append(located(self.path, self.line_of(key), key,
                                     f"accepted for compatibility; ignored because {reason}"))

    def millis(self, key: str, text: str | None) -> int:
        """Return the whole milliseconds of the Go duration `text` at `key`, checked as
        dcgm-exporter's parseYAMLDurationMillis checks it: above zero, and a whole number of
        milliseconds."""
        ns = self.go_duration(key, text)
        if ns <= 0:
            raise self.error(key, "must be greater than 0")
        if ns % NANOSECONDS["ms"]:
            raise self.error(key, "must be expressed in whole milliseconds or larger")
        return ns // NANOSECONDS["ms"]

    def go_duration(self, key: str, text: str | None) -> int:
        try:
            return parse_go_duration((text or "").strip())
        except ValueError as exc:
            raise self.error(key, str(exc)) from None

    def retention(self, tree: Section, age: str, samples: str) -> Retention:
        """Return the retention override that `tree` sets with its `age` and `samples` keys,
        checked as dcgm-exporter's watchRetentionOverride checks it: the age a Go duration not
        below zero, the samples from 0 to 2147483647. An override that sets anything adds a
        warning, since there are no DCGM watches here."""
        override = Retention()
        if age in tree:
            ns = self.go_duration(tree.key_of(age), tree.text(age))
            if ns < 0:
                raise tree.error(age, "must not be negative")
            override = Retention(ns / 1e9, None)
        count = tree.integer(samples)
        if count is not None:
            if count < 0:
                raise tree.error(samples, "must not be negative")
            if count > MAX_SAMPLES:
                raise tree.error(samples, f"must not exceed {MAX_SAMPLES}")
            override = Retention(override.max_age_s, count)
        if override != Retention():
            self.ignored(tree.key, NO_WATCHES)
        return override


def read_config_file(path: Path) -> ConfigFile:
    """Read and check the file; YamlError (one line: file, line, key) when it cannot be
    used."""
    return parse_config_file(path, read_yaml_text(path))


def parse_config_file(path: Path, text: str) -> ConfigFile:
    """Return what the config file `text` (read from `path`) sets; YamlError (one line:
    file, line, key) where dcgm-exporter would refuse it."""
    from yaml.nodes import MappingNode

    node = compose_one(path, text)
    if node is None:
        raise YamlError(f"{path}:1: the file holds no YAML document (expected version: 1 "
                        "or 2, and the settings)")
    version, line = 0, 1
    if isinstance(node, MappingNode):
        for key, value in node.value:
            if key.value == "version":
                found = decode(path, value, "int", "version").value
                version = found if isinstance(found, int) else 0
                line = int(key.start_mark.line) + 1
    elif not (node.tag.endswith(":null")):
        raise YamlError(f"{path}:1: expected a mapping with version: 1 or 2")
    if version not in (1, 2):
        raise YamlError(f"{path}:{line}: version: must be 1 or 2")
    decoded = decode(path, node, SCHEMA_V1 if version == 1 else SCHEMA_V2)
    tree = decoded.value if isinstance(decoded.value, dict) else {}
    reader = _Reader(Section(path, "", tree, decoded.lines), version)
    settings = _settings(reader)
    if version == 1:
        interval, retention, groups = _collection_v1(reader)
    else:
        interval, retention, groups = _collections_v2(reader)
    return replace(settings, collect_interval_s=interval, retention=retention,
                   watch_groups=groups, warnings=tuple(reader.warnings))


def _settings(reader: _Reader) -> ConfigFile:
    """Return the settings both versions share: `metrics`, `server` and
    `sources.dcgm.detectBindUnbind`."""
    found = ConfigFile(reader.path, reader.version)
    scrapes = reader.root.section("server").integer("maxConcurrentScrapes")
    if scrapes is not None:
        if scrapes <= 0:
            raise reader.error("server.maxConcurrentScrapes", "must be greater than 0")
        found = replace(found, max_concurrent_scrapes=scrapes)
    if "metrics" in reader.root:
        found = _metrics(reader, reader.root.section("metrics"), found)
    dcgm = reader.root.section("sources").section("dcgm")
    if "detectBindUnbind" not in dcgm:
        return found
    return _detect_bind_unbind(reader, dcgm.section("detectBindUnbind"), found)


def _metrics(reader: _Reader, metrics: Section, found: ConfigFile) -> ConfigFile:
    file = (metrics.text("file") or "").strip()
    rows = metrics.sections("fields")
    enable = metrics.flag("enableExporterMetrics")
    if enable is not None:
        found = replace(found, enable_exporter_metrics=enable)
    if file and rows:
        raise reader.error("metrics", "must specify exactly one of file or fields")
    if file:
        return replace(found, collectors_file=Path(file))
    if rows:
        return replace(found, inline_rows=_inline_rows(reader, rows))
    if enable is None:
        raise reader.error("metrics", "must specify file, fields, or enableExporterMetrics")
    return found


def _detect_bind_unbind(reader: _Reader, detect: Section, found: ConfigFile) -> ConfigFile:
    poll = (detect.text("pollInterval") or "").strip()
    if poll:
        ns = reader.go_duration(detect.key_of("pollInterval"), poll)
        if ns <= 0:
            raise detect.error("pollInterval", "must be greater than 0")
        found = replace(found, bind_unbind_poll_s=ns / 1e9)
    enabled = detect.flag("enabled")
    if enabled is not None:
        found = replace(found, bind_unbind_watch=enabled)
    if enabled:  # the chart's default (off) says nothing
        reader.ignored(detect.key, REENUMERATED)
    return found


def _inline_rows(reader: _Reader, rows: list[Section]) -> tuple[Row, ...]:
    found: list[Row] = []
    first: dict[str, int] = {}
    for index, row in enumerate(rows):
        cells = {name: (row.text(name) or "").strip()
                 for name in ("name", "prometheusType", "help")}
        if not cells["name"]:
            raise row.error("name", "is required")
        if cells["name"] in first:
            raise row.error("name", f"duplicates metrics.fields[{first[cells['name']]}]"
                                    f".name {cells['name']!r}")
        first[cells["name"]] = index
        for name in ("prometheusType", "help"):
            if not cells[name]:
                raise row.error(name, "is required")
        found.append((reader.line_of(row.key), cells["name"], cells["prometheusType"],
                      cells["help"]))
    return tuple(found)


def _patterns(tree: Section, name: str) -> tuple[str, ...]:
    items = [p.strip() for p in tree.texts(name) or []]
    if not items:
        raise tree.error(name, "must not be empty")
    for index, item in enumerate(items):
        if not item:
            raise tree.error(f"{name}[{index}]", "is required")
        try:
            compile_go_pattern(item)
        except BadPattern as exc:  # dcgm-exporter refuses it before matching any field
            raise tree.error(f"{name}[{index}]", f"invalid field pattern {item!r}: {exc}") \
                from None
    return tuple(items)


def _pattern_at(reader: _Reader, key: str, count: int) -> tuple[tuple[int, str], ...]:
    keys = [f"{key}[{index}]" for index in range(count)]
    return tuple((reader.line_of(k), k) for k in keys)  # the decoder notes each line


def _group(group: Section, names: set[str]) -> str:
    text = (group.text("name") or "").strip()
    if not text:
        raise group.error("name", "is required")
    if text in names:
        raise group.error("name", f"{text!r} is duplicated")
    names.add(text)
    return text


def _both_zero(tree: Section, retention: Retention, what: str) -> None:
    if retention.max_age_s == 0 and retention.max_samples == 0:
        raise tree.error("", f"{what} cannot both be zero")


Collection = tuple[float | None, Retention, tuple[WatchGroup, ...]]


def _collection_v1(reader: _Reader) -> Collection:
    if "collection" not in reader.root:
        return None, Retention(), ()
    collection = reader.root.section("collection")
    interval = None
    if (collection.text("interval") or "").strip():
        interval = reader.millis("collection.interval", collection.text("interval")) / 1000
    groups: list[WatchGroup] = []
    names: set[str] = set()
    for group in collection.sections("watchGroups"):
        name = _group(group, names)
        millis = reader.millis(group.key_of("interval"), group.text("interval"))
        patterns = _patterns(group, "fields")
        retention = reader.retention(group.section("retention"), "maxAge", "maxSamples")
        _both_zero(group.section("retention"), retention, "maxAge and maxSamples")
        where = located(reader.path, reader.line_of(group.key), None, group.key)
        groups.append(WatchGroup(name, where, millis, patterns, retention,
                                 _pattern_at(reader, group.key_of("fields"), len(patterns))))
    retention = reader.retention(collection.section("retention"), "maxAge", "maxSamples")
    for index in range(len(groups)):
        reader.ignored(f"collection.watchGroups[{index}]", NO_WATCHES)
    return interval, retention, tuple(groups)


def _collections_v2(reader: _Reader) -> Collection:
    dcgm = reader.root.section("sources").section("dcgm")
    retention = reader.retention(dcgm.section("watch"), "maxKeepAge", "maxKeepSamples")
    if "collections" not in reader.root:
        return None, retention, ()
    collections = reader.root.sections("collections")
    if not collections:
        raise reader.error("collections", "must contain at least one collection")
    interval: float | None = None
    default_name: str | None = None
    groups: list[WatchGroup] = []
    names: set[str] = set()
    for collection in collections:
        key = collection.key
        name = _group(collection, names)
        millis = reader.millis(collection.key_of("every"), collection.text("every"))
        metrics = collection.section("metrics")
        patterns = _patterns(metrics, "include")
        watch = collection.section("sources").section("dcgm").section("watch")
        own = reader.retention(watch, "maxKeepAge", "maxKeepSamples")
        _both_zero(watch, own, "maxKeepAge and maxKeepSamples")
        if patterns == ("*",):
            if default_name is not None:
                raise metrics.error("include", "duplicates the all-fields collection "
                                               f"{default_name!r}")
            default_name, interval = name, millis / 1000
            retention = retention.under(own)
            continue
        where = located(reader.path, reader.line_of(key), None, key)
        groups.append(WatchGroup(name, where, millis, patterns, own,
                                 _pattern_at(reader, metrics.key_of("include"),
                                             len(patterns))))
        reader.ignored(key, NO_WATCHES)
    return interval, retention, tuple(groups)

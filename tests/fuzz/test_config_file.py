"""dcgm-exporter's config file parser: any text either parses or is refused with one line
naming the file and a line of it; never another exception. Documents are drawn as arbitrary
text and as YAML built from the real keys of both versions with values of every shape, so
the search reaches past the YAML parser into the schema and the checks."""

from __future__ import annotations

import fnmatch
import re
from pathlib import Path
from typing import Any

import yaml
from hypothesis import example, given
from hypothesis import strategies as st

from exporter.options.config_file import ConfigFile, parse_config_file
from exporter.options.go_glob import BadPattern, compile_go_pattern
from exporter.yamlfiles import YamlError

PATH = Path("/etc/dcgm-exporter/config.yaml")
_REFUSAL = re.compile(rf"^{re.escape(str(PATH))}:(\d+): ")

_SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-3, 2**40),
                     st.sampled_from(["30s", "0s", "-1s", "500us", "1m30s", "30000", "*", ""]),
                     st.text(max_size=12))
_VALUES: st.SearchStrategy[Any] = st.recursive(
    _SCALARS, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                       st.dictionaries(st.text(max_size=8), inner,
                                                       max_size=3)),
    max_leaves=6)
_FIELD = st.fixed_dictionaries({}, optional={"name": _SCALARS, "prometheusType": st.one_of(
    st.sampled_from(["gauge", "counter", "histogram"]), _SCALARS), "help": _SCALARS})
_WATCH = st.fixed_dictionaries({}, optional={"maxKeepAge": _SCALARS,
                                             "maxKeepSamples": _SCALARS})
_METRICS = st.fixed_dictionaries({}, optional={
    "file": _SCALARS, "fields": st.lists(_FIELD, max_size=3),
    "enableExporterMetrics": _SCALARS})
_COLLECTION = st.fixed_dictionaries({}, optional={
    "name": _SCALARS, "every": _SCALARS,
    "metrics": st.fixed_dictionaries({}, optional={"include": st.one_of(
        st.just(["*"]), st.lists(_SCALARS, max_size=2))}),
    "sources": st.fixed_dictionaries({"dcgm": st.fixed_dictionaries({"watch": _WATCH})})})
_DOCUMENTS = st.fixed_dictionaries({"version": st.one_of(st.sampled_from([1, 2]), _SCALARS)},
                                   optional={
    "metrics": _METRICS,
    "server": st.fixed_dictionaries({}, optional={"maxConcurrentScrapes": _SCALARS}),
    "collections": st.lists(_COLLECTION, max_size=3),
    "collection": st.fixed_dictionaries({}, optional={
        "interval": _SCALARS, "retention": _VALUES, "watchGroups": _VALUES}),
    "sources": st.fixed_dictionaries({}, optional={"dcgm": st.fixed_dictionaries(
        {}, optional={"watch": _WATCH, "detectBindUnbind": _VALUES})}),
    "extra": _VALUES,
}).map(lambda d: yaml.safe_dump(d, allow_unicode=True, sort_keys=False))


def _check(text: str) -> None:
    try:
        parsed = parse_config_file(PATH, text)
    except YamlError as exc:
        message = str(exc)
        assert "\n" not in message, message
        match = _REFUSAL.match(message)
        assert match, f"refusal without file:line: {message}"
        assert 1 <= int(match.group(1)) <= max(1, text.count("\n") + 2), message
        return
    assert isinstance(parsed, ConfigFile)
    assert parsed.version in (1, 2)
    if parsed.collect_interval_s is not None:
        assert parsed.collect_interval_s >= 0.001
    if parsed.max_concurrent_scrapes is not None:
        assert parsed.max_concurrent_scrapes > 0


@given(_DOCUMENTS)
def test_any_document_of_the_real_keys_parses_or_is_refused_in_one_line(text: str) -> None:
    _check(text)


@given(st.text(max_size=120))
@example("version: 2\n? [a]\n: b\n")
@example("version: &v 2\nserver: *v\n")
@example("version: 2\nmetrics: &m {file: a}\nx: *m\n")
@example("version: 0o8\n")
@example("\t")
@example("\x1f")  # refused by PyYAML's reader, whose message spans two lines
@example("version: 2\nx: " + "[" * 3000 + "]" * 3000)  # deeper than Python's recursion
def test_any_text_parses_or_is_refused_in_one_line(text: str) -> None:
    _check(text)


@given(st.text(alphabet="DG_*?[]^!-\\/a", max_size=12),
       st.text(alphabet="DG_/a!^-", max_size=8))
def test_any_pattern_compiles_or_is_refused_and_plain_ones_match_as_fnmatch(
        pattern: str, name: str) -> None:
    try:
        regex = compile_go_pattern(pattern)
    except BadPattern:
        return
    matched = regex.fullmatch(name) is not None
    if not set(pattern) & set("[]\\/") and "/" not in name:
        # Without classes, escapes and slashes Go's path.Match and fnmatch agree.
        assert matched is fnmatch.fnmatchcase(name, pattern)

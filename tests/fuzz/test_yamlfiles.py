"""The strict YAML reader and the two readers built on it without a fuzz test of their own
(mig-parted configs, the prices file): any text is read or refused with one line naming the
file and a line of it; never another exception."""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from exporter.partitions.migparted import MigPartedError
from exporter.partitions.migparted import parse as parse_mig_parted
from exporter.report.connection import ReportError
from exporter.report.prices import load_prices
from exporter.yamlfiles import MapOf, Schema, Section, Sequence, YamlError, read_yaml

PATH = "drawn.yaml"
_REFUSAL = re.compile(rf"^{re.escape(PATH)}:(\d+): ")
SCHEMA: Mapping[str, Schema] = {
    "name": "str", "label": "text", "count": "int", "on": "bool", "price": "number",
    "tags": Sequence("str"), "server": {"port": "int", "hosts": Sequence({"host": "str"})},
    "users": MapOf("str"), "extra": "any",
}
_SCALARS = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False),
                     st.text(max_size=12))
_VALUES: st.SearchStrategy[Any] = st.recursive(
    _SCALARS, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                       st.dictionaries(st.text(max_size=8), inner,
                                                       max_size=3)),
    max_leaves=8)
_DOCUMENTS = st.dictionaries(st.sampled_from([*SCHEMA, "other"]), _VALUES, max_size=5).map(
    lambda d: yaml.safe_dump(d, allow_unicode=True))
_TEXTS = st.one_of(st.text(max_size=200), _DOCUMENTS)


def _one_line_with_a_line(message: str, text: str) -> None:
    assert "\n" not in message, message
    match = _REFUSAL.match(message)
    assert match, f"refusal without file:line: {message}"
    assert 1 <= int(match.group(1)) <= max(1, text.count("\n") + 2), message


@given(_TEXTS)
def test_any_text_is_read_or_refused_naming_a_line(text: str) -> None:
    try:
        section = read_yaml(PATH, text, SCHEMA)
    except YamlError as exc:
        _one_line_with_a_line(str(exc), text)
        return
    assert isinstance(section, Section)
    assert set(section) <= set(SCHEMA)


@given(_TEXTS)
def test_any_mig_parted_text_is_read_or_refused_in_one_line(text: str) -> None:
    try:
        parse_mig_parted(text, PATH)
    except MigPartedError as exc:
        message = str(exc)
        assert "\n" not in message, message
        assert message.startswith(PATH), message


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder for the drawn prices files, one for all examples (each overwrites it)."""
    return tmp_path_factory.mktemp("prices")


@given(text=st.one_of(st.text(max_size=200), st.dictionaries(
    st.text(max_size=12), _SCALARS, max_size=4).map(yaml.safe_dump)))
def test_any_prices_text_is_read_or_refused_in_one_line(folder: Path, text: str) -> None:
    path = folder / PATH
    path.write_text(text, encoding="utf-8")
    try:
        load_prices(path, None, "--price-file")
    except ReportError as exc:
        message = str(exc)
        assert "\n" not in message, message
        assert message.startswith(f"--price-file {path}"), message

"""The prices file (`--price-file`): a map of GPU model to price per GPU-hour, read strictly,
every mistake refused in one line naming the option, the file, the line and the model."""

from __future__ import annotations

from pathlib import Path

import pytest

from exporter.report.connection import ReportError
from exporter.report.prices import Prices, load_prices


def test_a_file_of_prices_and_a_default(tmp_path: Path) -> None:
    path = tmp_path / "prices.yaml"
    path.write_text('"NVIDIA H200": 4.10\n"NVIDIA A100-SXM4-80GB": 2\n"*": 2.50\n')
    assert load_prices(path, 9.0, "--price-file") == Prices(
        2.5, {"NVIDIA H200": 4.1, "NVIDIA A100-SXM4-80GB": 2.0})
    json = tmp_path / "prices.json"
    json.write_text('{"NVIDIA H200": 4.1}')
    assert load_prices(json, 9.0, "--price-file") == Prices(9.0, {"NVIDIA H200": 4.1})


# (what is wrong, the file's text, the one line after `--price-file FILE`)
BAD = [
    ("a model twice", '"NVIDIA H200": 4\n"NVIDIA L4": 1\n"NVIDIA H200": 5\n',
     ":3: NVIDIA H200: duplicate YAML key; first defined at line 1"),
    ("a word for a price", '"NVIDIA H200": 4\n"NVIDIA L4": cheap\n',
     ":2: NVIDIA L4: expected a number, found 'cheap'"),
    ("a list for a price", '"*": [1, 2]\n', ":1: *: expected a number, found a list"),
    ("a negative price", '"NVIDIA H200": 4\n\n"NVIDIA L4": -1.5\n',
     ":3: NVIDIA L4: -1.5 is not a price; expected a number, 0 or more"),
    ("no price", '"NVIDIA L4":\n', ":1: NVIDIA L4: null is not a price; expected a number, "
     "0 or more"),
    ("not a map", "- 4.0\n", ":1: the document: expected a mapping, found a list"),
    ("a second document", '"*": 1\n---\n"*": 2\n',
     ":3: multiple YAML documents are not supported"),
    ("empty", "# none yet\n", ": expected a map of GPU model to price per GPU-hour"),
]


@pytest.mark.parametrize(("text", "refusal"), [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_a_malformed_file_is_one_line_naming_file_line_and_model(tmp_path: Path, text: str,
                                                                 refusal: str) -> None:
    path = tmp_path / "prices.yaml"
    path.write_text(text)
    with pytest.raises(ReportError) as raised:
        load_prices(path, None, "--price-file")
    assert str(raised.value) == f"--price-file {path}{refusal}"

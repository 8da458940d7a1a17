"""The XID code -> `err_msg` table shipped with the package is dcgm-exporter's, row for row."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from exporter.fields.xid_messages import (
    DATA_PATH,
    UNKNOWN_ERROR,
    XidTableError,
    parse_xid_messages,
    xid_message,
    xid_messages,
)

FIXTURE = Path(__file__).parents[1] / "fixtures" / "dcgm-exporter" / "xid-messages.csv"


def test_the_shipped_table_is_upstreams_row_for_row() -> None:
    with FIXTURE.open(newline="", encoding="utf-8") as upstream_file:
        upstream = list(csv.reader(upstream_file))
    with DATA_PATH.open(newline="", encoding="utf-8") as shipped_file:
        shipped = list(csv.reader(shipped_file))
    assert len(shipped) == len(upstream)
    for line, (ours, theirs) in enumerate(zip(shipped, upstream, strict=True), start=1):
        assert ours == theirs, f"xid-messages.csv:{line}"
    assert xid_messages() == tuple(row[1] for row in upstream[1:])


def test_codes_map_as_dcgm_exporter_maps_them() -> None:
    assert xid_message(0) == "No Error"
    assert xid_message(79) == "GPU has fallen off the bus"
    assert xid_message(len(xid_messages()) - 1) == "Uncorrectable SRAM Error"
    assert xid_message(len(xid_messages())) == UNKNOWN_ERROR == "Unknown Error"
    assert xid_message(-1) == UNKNOWN_ERROR
    assert len(xid_messages()) == 173  # codes 0-172


@pytest.mark.parametrize(("text", "where"), [
    ("", "t.csv:1: expected the header"),
    ("code,text\n0,No Error\n", "t.csv:1: expected the header"),
    ("code,message\n0,No Error\n2,Skipped\n", "t.csv:3: expected '1,<message>'"),
    ("code,message\n0,No Error,extra\n", "t.csv:2: expected '0,<message>'"),
])
def test_a_malformed_table_names_its_line(text: str, where: str) -> None:
    with pytest.raises(XidTableError, match=where):
        parse_xid_messages(text, "t.csv")

"""The text dcgm-exporter writes in the `err_msg` label of `DCGM_FI_DEV_XID_ERRORS`.

`xid-messages.csv` beside this module is dcgm-exporter's XID code -> message table (its
`xidErrCodeToText`, codes 0-172), one row per code in order. dcgm-exporter labels the last
XID code's series with `err_code` (the code) and `err_msg` (the table's text for a code the
table has, `Unknown Error` for any other), so 0, the value before any XID, reads "No Error".

The table is read once, on first use; the renderer then asks one label pair per code and
poll, never per scrape.
"""

from __future__ import annotations

import csv
import functools
from pathlib import Path

DATA_PATH = Path(__file__).with_name("xid-messages.csv")
UNKNOWN_ERROR = "Unknown Error"
"""`err_msg` of a code past the table's end (or below 0)."""
_HEADER = ["code", "message"]


class XidTableError(ValueError):
    """The shipped table is malformed (a packaging fault, reported with file and line)."""


def parse_xid_messages(text: str, source: str) -> tuple[str, ...]:
    """Return the messages of a `code,message` table, indexed by code; codes must run 0, 1,
    2, ... with no gap, as dcgm-exporter's table is a list indexed by code."""
    rows = list(csv.reader(text.splitlines()))
    if not rows or rows[0] != _HEADER:
        raise XidTableError(f"{source}:1: expected the header 'code,message'")
    messages: list[str] = []
    for line, row in enumerate(rows[1:], start=2):
        if len(row) != 2 or row[0] != str(len(messages)):
            raise XidTableError(
                f"{source}:{line}: expected '{len(messages)},<message>', got {row!r}")
        messages.append(row[1])
    return tuple(messages)


@functools.cache
def xid_messages() -> tuple[str, ...]:
    """Return the shipped table: the message of code N at index N."""
    return parse_xid_messages(DATA_PATH.read_text(encoding="utf-8"), str(DATA_PATH))


def xid_message(code: int) -> str:
    """Return dcgm-exporter's `err_msg` for an XID code."""
    table = xid_messages()
    return table[code] if 0 <= code < len(table) else UNKNOWN_ERROR

"""The consumers' files in tests/fixtures/consumers/ are the ones SOURCE.md lists, byte for
byte (its sha256 column)."""

from __future__ import annotations

import hashlib
import re

from tests.support.paths import fixture_file


def test_every_file_matches_its_listed_checksum() -> None:
    root = fixture_file("consumers")
    listed = dict(re.findall(r"^\| (\S+) \| ([0-9a-f]{64}) \|$",
                             (root / "SOURCE.md").read_text(), re.MULTILINE))
    present = {p.relative_to(root).as_posix() for p in root.rglob("*")
               if p.is_file() and p.name != "SOURCE.md"}
    assert set(listed) == present
    changed = [name for name, digest in listed.items()
               if hashlib.sha256((root / name).read_bytes()).hexdigest() != digest]
    assert changed == []

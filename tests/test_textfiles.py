"""The one way a file a person hands the exporter is read (`exporter.textfiles`): one line
`FILE: cannot read: <reason>` when it cannot be, and `FILE:LINE: key: message` for a place
in it."""

from __future__ import annotations

from pathlib import Path

import pytest

from exporter.textfiles import UnreadableFile, located, read_text


def test_a_readable_file_is_its_text(tmp_path: Path) -> None:
    path = tmp_path / "a.csv"
    path.write_bytes("DCGM_FI_DEV_GPU_TEMP, gauge, température\n".encode())
    assert read_text(path) == "DCGM_FI_DEV_GPU_TEMP, gauge, température\n"


@pytest.mark.parametrize(("name", "content", "encoding", "reason"), [
    ("absent.yaml", None, "utf-8", "No such file or directory"),
    ("folder", "folder", "utf-8", "Is a directory"),
    ("latin1.csv", b"caf\xe9\n", "utf-8", "not UTF-8 text (byte 0xe9 at offset 3)"),
    ("cert.pem", "é".encode(), "ascii", "not ASCII text (byte 0xc3 at offset 0)"),
])
def test_an_unreadable_file_is_one_line_naming_it(tmp_path: Path, name: str,
                                                  content: bytes | str | None, encoding: str,
                                                  reason: str) -> None:
    path = tmp_path / name
    if content == "folder":
        path.mkdir()
    elif isinstance(content, bytes):
        path.write_bytes(content)
    with pytest.raises(UnreadableFile) as caught:
        read_text(path, encoding)
    assert str(caught.value) == f"{path}: cannot read: {reason}"


def test_a_place_in_a_file() -> None:
    assert located("c.yaml", 7, "collection.interval", "must be a Go duration") == \
        "c.yaml:7: collection.interval: must be a Go duration"
    assert located("x.csv", 3, None, "not valid CSV") == "x.csv:3: not valid CSV"
    assert located(Path("web.yml"), None, "tls_server_config", "expected a mapping") == \
        "web.yml: tls_server_config: expected a mapping"

"""The README's flag table is the generator's output, and the generator's command works."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from exporter.options import OPTIONS, for_command
from exporter.options.markdown import BEGIN, END, markdown_table, with_table, write_readme
from tests.conftest import ROOT

README = ROOT / "README.md"


def readme_block(text: str) -> str:
    return text[text.index(BEGIN) + len(BEGIN):text.index(END)].lstrip("\n")


def test_readme_table_matches_the_option_table() -> None:
    assert readme_block(README.read_text(encoding="utf-8")) == markdown_table(), (
        "README.md is out of date: run `python -m exporter.options --write-readme README.md`")


def test_the_table_has_a_row_per_serve_option_and_every_variable() -> None:
    table = markdown_table()
    rows = table.splitlines()[2:]
    assert len(rows) == len(for_command("serve"))
    for option in for_command("serve"):
        for name in (*option.flags, *option.env):
            assert f"`{name}" in table


def test_write_readme_replaces_only_the_block(tmp_path: Path) -> None:
    readme = tmp_path / "README.md"
    readme.write_text(f"# title\n\nbefore\n{BEGIN}\n| stale |\n{END}\nafter\n", encoding="utf-8")
    assert write_readme(readme)
    text = readme.read_text(encoding="utf-8")
    assert text == f"# title\n\nbefore\n{BEGIN}\n{markdown_table()}{END}\nafter\n"
    assert not write_readme(readme)  # already current: the file is left alone


def test_a_readme_without_markers_is_refused() -> None:
    with pytest.raises(ValueError, match="options:begin"):
        with_table("# no table here\n", markdown_table())


def test_module_command_prints_and_writes(tmp_path: Path) -> None:
    printed = subprocess.run([sys.executable, "-m", "exporter.options", "--markdown"],
                             cwd=ROOT, capture_output=True, text=True, timeout=60, check=True)
    assert printed.stdout == markdown_table()
    readme = tmp_path / "README.md"
    readme.write_text(f"{BEGIN}\n{END}\n", encoding="utf-8")
    subprocess.run([sys.executable, "-m", "exporter.options", "--write-readme", str(readme)],
                   cwd=ROOT, capture_output=True, text=True, timeout=60, check=True)
    assert readme.read_text(encoding="utf-8") == f"{BEGIN}\n{markdown_table()}{END}\n"


def test_every_option_is_documented() -> None:
    assert all(option.help.strip() for option in OPTIONS)

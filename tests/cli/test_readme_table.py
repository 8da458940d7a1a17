"""The flag table of docs/configuration.md is the generator's output, and the generator's
command works."""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from exporter.options import OPTIONS, build_parser, resolve
from exporter.options.markdown import BEGIN, END, markdown_table, with_table, write_readme
from tests.conftest import ROOT

FLAG_PAGE = ROOT / "docs" / "configuration.md"
"""The page that holds serve's flag table."""


def table_block(text: str) -> str:
    return text[text.index(BEGIN) + len(BEGIN):text.index(END)].lstrip("\n")


def test_the_flag_table_matches_the_option_table() -> None:
    assert table_block(FLAG_PAGE.read_text(encoding="utf-8")) == markdown_table(), (
        "docs/configuration.md is out of date: run "
        "`python -m exporter.options --write-readme docs/configuration.md`")


class _ReadRecorder(Mapping[str, str]):
    """An environment with nothing set that remembers each variable asked for."""

    def __init__(self) -> None:
        self.asked: set[str] = set()

    def __getitem__(self, key: str) -> str:
        self.asked.add(key)
        raise KeyError(key)

    def get(self, key: str, default: Any = None) -> Any:
        self.asked.add(key)
        return default

    def __iter__(self) -> Iterator[str]:
        return iter(())

    def __len__(self) -> int:
        return 0


def _committed_rows() -> list[tuple[set[str], set[str]]]:
    """Return the flags and the variables of each row of the committed table."""
    rows = []
    for line in table_block(FLAG_PAGE.read_text(encoding="utf-8")).splitlines()[2:]:
        cells = re.split(r"(?<!\\)\|", line.strip().strip("|"))
        flags = set(re.findall(r"`(-[^\s`]+)", cells[0]))
        variables = set(re.findall(r"`([A-Z][A-Z0-9_]*)`", cells[1]))
        rows.append((flags, variables))
    return rows


def test_the_table_has_a_row_per_option_serve_takes_and_every_variable_it_reads() -> None:
    """Counted apart from the table's generator: the flags the `serve` parser accepts (one
    row per option they set, aliases included) and the variables resolving `serve` reads."""
    parser = build_parser("serve")
    accepted = {flag: action.dest.split(":")[0]
                for flag, action in parser._option_string_actions.items()
                if flag not in ("-h", "--help", "--version")}  # argparse's, not the table's
    environment = _ReadRecorder()
    resolve("serve", argparse.Namespace(), environment)
    rows = _committed_rows()
    flagged = [(flags, variables) for flags, variables in rows if flags]
    assert set().union(*(flags for flags, _ in rows)) == set(accepted)
    options = [{accepted[f] for f in flags} for flags, _ in flagged]
    assert all(len(option) == 1 for option in options), options
    assert len(flagged) == len(set(accepted.values())) == len(set().union(*options))
    assert set().union(*(variables for _, variables in rows)) == environment.asked
    # The rows without a flag: settings read from the environment only, one row each.
    env_only = [variables for flags, variables in rows if not flags]
    assert env_only
    assert all(env_only)
    assert sum(map(len, env_only)) == len(environment.asked - set().union(
        *(variables for _, variables in flagged)))


def test_write_readme_replaces_only_the_block(tmp_path: Path) -> None:
    page = tmp_path / "configuration.md"
    page.write_text(f"# title\n\nbefore\n{BEGIN}\n| stale |\n{END}\nafter\n", encoding="utf-8")
    assert write_readme(page)
    text = page.read_text(encoding="utf-8")
    assert text == f"# title\n\nbefore\n{BEGIN}\n{markdown_table()}{END}\nafter\n"
    assert not write_readme(page)  # already current: the file is left alone


def test_a_page_without_markers_is_refused() -> None:
    with pytest.raises(ValueError, match="options:begin"):
        with_table("# no table here\n", markdown_table())


def test_module_command_prints_and_writes(tmp_path: Path) -> None:
    printed = subprocess.run([sys.executable, "-m", "exporter.options", "--markdown"],
                             cwd=ROOT, capture_output=True, text=True, timeout=60, check=True)
    assert printed.stdout == markdown_table()
    page = tmp_path / "configuration.md"
    page.write_text(f"{BEGIN}\n{END}\n", encoding="utf-8")
    subprocess.run([sys.executable, "-m", "exporter.options", "--write-readme", str(page)],
                   cwd=ROOT, capture_output=True, text=True, timeout=60, check=True)
    assert page.read_text(encoding="utf-8") == f"{BEGIN}\n{markdown_table()}{END}\n"


def test_every_option_is_documented() -> None:
    assert all(option.help.strip() for option in OPTIONS)

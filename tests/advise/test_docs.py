"""docs/advise.md lists the options the table declares for `advise`, and the command is wired
into `gpu-exporter`."""

from __future__ import annotations

from pathlib import Path

import pytest

from exporter.cli import main
from exporter.options.markdown import BEGIN, END, markdown_table

ROOT = Path(__file__).resolve().parents[2]


def test_docs_list_every_advise_option() -> None:
    text = (ROOT / "docs" / "advise.md").read_text(encoding="utf-8")
    block = text[text.index(BEGIN) + len(BEGIN):text.index(END)].lstrip("\n")
    assert block == markdown_table("advise"), (
        "docs/advise.md is out of date: run `python -m exporter.options --command advise "
        "--write-readme docs/advise.md`")


def test_the_command_is_wired(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stopped:
        main(["advise", "--help"])
    assert stopped.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: gpu-exporter advise")
    for flag in ("--memory-quantile", "--headroom", "--prometheus", "--price", "--all"):
        assert flag in out


def test_advise_stays_off_the_serve_path() -> None:
    import subprocess
    import sys

    probe = ("import sys, exporter.serve; "
             "print(sorted(m for m in sys.modules if m.split('.')[0] in "
             "('scipy', 'pandas') or m.startswith(('exporter.advise', 'exporter.partitions'))))")
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                            check=True, cwd=ROOT)
    assert result.stdout.strip() == "[]"

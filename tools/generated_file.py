"""The command line every generator in tools/ shares: write its output, or check it."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path


def write_or_check(argv: list[str], module: str, output: Path, derive: Callable[[], str],
                   sources: str) -> int:
    """Write `derive()` to `output` with `--write`, or with `--check` return 1 and say how to
    regenerate it when the committed file differs; return 2 for any other arguments.

    `module` is the generator's `python -m` name and `sources` what the file is derived from,
    both for the messages.
    """
    if argv not in (["--write"], ["--check"]):
        sys.stderr.write(f"usage: python -m {module} --write | --check\n")
        return 2
    text = derive()
    if argv == ["--write"]:
        output.write_text(text, encoding="utf-8")
        return 0
    if output.read_text(encoding="utf-8") != text:
        sys.stderr.write(f"{output} drifted from {sources}: run python -m {module} --write\n")
        return 1
    return 0

"""Every flag the docs name is one the command line takes.

The pages are README.md and docs/*.md. A flag is named in three ways:

- a code span that begins with a flag (`--kubernetes.pod-labels inference`): a flag of some
  gpu-exporter command;
- a code span that runs gpu-exporter (`gpu-exporter report --group-by pod`): a flag of that
  command (`serve` when none is named, as the CLI has it);
- a line of a shell code block that runs gpu-exporter, at the start of a command (also after
  `--`, as in `kubectl exec ... -- gpu-exporter doctor`).

The flags each command takes come from its parser, built from the option tables in
exporter/options, which hold dcgm-exporter's flags too. Other programs' flags are named inside
spans that begin with the program (`bench_serve.py --tls`), which this test leaves alone.
"""

from __future__ import annotations

import re
import shlex
import shutil
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import get_args

from exporter.options import build_parser
from exporter.options.option import Command
from exporter.options.parsing import GO_GRAMMAR, go_spellings
from tests.docs.markdown_scan import code_spans, split_fences
from tests.support.paths import ROOT

SHELLS = frozenset({"sh", "bash", "shell", "console", "zsh"})
"""Info strings of the code blocks read as shell."""

_SEPARATORS = frozenset({"|", "||", "&&", ";", "&", "(", ")", "--"})
"""Tokens after which a shell line starts a new command (`--`: the rest of `kubectl exec`)."""

_FLAG = re.compile(r"^(--?[A-Za-z][A-Za-z0-9._-]*)")
_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")


def command_flags() -> dict[str, frozenset[str]]:
    """Return the flags each gpu-exporter command's parser accepts, `--help` included; for
    the commands read in Go's grammar, each name with one dash and with two."""
    flags = {command: frozenset(build_parser(command)._option_string_actions)
             for command in get_args(Command)}
    for command in GO_GRAMMAR:
        names = {*go_spellings(command), "h", "help", "v", "version"}
        flags[command] = frozenset(f"{dashes}{name}" for name in names
                                   for dashes in ("-", "--"))
    return flags


def doc_pages(root: Path) -> list[Path]:
    """Return README.md and the pages of docs/."""
    return [root / "README.md", *sorted((root / "docs").glob("*.md"))]


def _is_gpu_exporter(word: str) -> bool:
    return word.rsplit("/", 1)[-1] == "gpu-exporter"


def _words(line: str) -> list[str]:
    lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    lexer.commenters = "#"
    try:
        return list(lexer)
    except ValueError:  # an unbalanced quote: take the words as they stand
        return line.split()


def invocations(words: list[str]) -> Iterator[list[str]]:
    """Yield the arguments of each gpu-exporter command in a shell line's words."""
    at_start = True
    for index, word in enumerate(words):
        if word in _SEPARATORS:
            at_start = True
        elif at_start and _ASSIGNMENT.match(word):
            continue  # VAR=value before the command
        elif at_start and _is_gpu_exporter(word):
            arguments = []
            for argument in words[index + 1:]:
                if argument in _SEPARATORS or argument[:1] in "<>" or argument[-1:] == ">":
                    break
                arguments.append(argument)
            yield arguments
            at_start = False
        else:
            at_start = False


def _unknown_in(arguments: list[str], known: Mapping[str, frozenset[str]]) -> Iterator[str]:
    """Yield each flag of one gpu-exporter command line that its command does not take."""
    command = arguments[0] if arguments and arguments[0] in known else "serve"
    for argument in arguments:
        flag = _FLAG.match(argument)
        if flag is not None and flag.group(1) not in known[command]:
            yield f"{flag.group(1)} is no flag of gpu-exporter {command}"


def _shell_lines(lines: tuple[str, ...], first: int) -> Iterator[tuple[int, str]]:
    """Yield a shell block's commands, lines ending in a backslash joined to the next."""
    pending, start = "", first
    for offset, line in enumerate(lines):
        if not pending:
            start = first + offset
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        yield start, pending + line
        pending = ""
    if pending:
        yield start, pending


def unknown_flags(root: Path, known: Mapping[str, frozenset[str]]) -> list[str]:
    """Return one line per flag the pages under `root` name that no command takes."""
    every_flag = frozenset().union(*known.values())
    problems: list[str] = []
    for page in doc_pages(root):
        text = page.read_text(encoding="utf-8")
        name = page.relative_to(root)
        for span in code_spans(text):
            words = span.text.split()
            if not words:
                continue
            flag = _FLAG.match(words[0])
            if flag is not None and flag.group(1) not in every_flag:
                problems.append(f"{name}:{span.line}: `{span.text}`: {flag.group(1)} is no "
                                "flag of gpu-exporter")
            for arguments in invocations(_words(span.text)):
                problems.extend(f"{name}:{span.line}: `{span.text}`: {problem}"
                                for problem in _unknown_in(arguments, known))
        fences, _ = split_fences(text)
        for fence in fences:
            if fence.info not in SHELLS:
                continue
            for number, line in _shell_lines(fence.lines, fence.line):
                for arguments in invocations(_words(line)):
                    problems.extend(f"{name}:{number}: {problem}"
                                    for problem in _unknown_in(arguments, known))
    return problems


def test_every_flag_in_the_docs_exists() -> None:
    problems = unknown_flags(ROOT, command_flags())
    assert problems == [], "\n".join(problems)


def test_the_known_flags_are_each_commands_own() -> None:
    known = command_flags()
    assert {"--collectors", "-f", "--kubernetes.pod-labels", "--remote-hostengine-info"} \
        <= known["serve"]
    assert "--group-by" in known["report"]
    assert "--group-by" not in known["serve"]
    assert "--web.config.file" in known["doctor"]


def test_shell_lines_find_gpu_exporter_where_it_runs() -> None:
    assert list(invocations(_words(
        "kubectl -n gpu-exporter exec ds/gpu-exporter -- gpu-exporter doctor --x"))) \
        == [["doctor", "--x"]]
    assert list(invocations(_words("helm install gpu-exporter charts/gpu-exporter --set a=b"))) \
        == []
    assert list(invocations(_words(
        "A=1 .venv/bin/gpu-exporter -c 5s | grep x && gpu-exporter report --last 1h # -z"))) \
        == [["-c", "5s"], ["report", "--last", "1h"]]


def test_planted_unknown_flags_are_each_reported(tmp_path: Path) -> None:
    shutil.copyfile(ROOT / "README.md", tmp_path / "README.md")
    shutil.copytree(ROOT / "docs", tmp_path / "docs")
    known = command_flags()
    before = set(unknown_flags(tmp_path, known))
    page = tmp_path / "docs" / "configuration.md"
    text = page.read_text(encoding="utf-8")
    planted = ("\nSet `--no-such-flag` or `gpu-exporter report --collectors x`;\n"
               "`helm --not-ours` and `bench_serve.py --rounds 3` are not ours.\n\n"
               "```sh\n"
               "kubectl -n gpu-exporter exec ds/gpu-exporter -- gpu-exporter doctor \\\n"
               "  --web.config.file web.yml --made-up\n"
               "gpu-exporter generate all --group-by namespace\n"
               "```\n")
    page.write_text(text + planted, encoding="utf-8")
    last = len(text.splitlines())
    reported = sorted(set(unknown_flags(tmp_path, known)) - before)
    assert reported == sorted([
        f"docs/configuration.md:{last + 2}: `--no-such-flag`: --no-such-flag is no flag of "
        "gpu-exporter",
        f"docs/configuration.md:{last + 2}: `gpu-exporter report --collectors x`: --collectors "
        "is no flag of gpu-exporter report",
        f"docs/configuration.md:{last + 6}: --made-up is no flag of gpu-exporter doctor",
    ])

"""The flag tables of the docs (serve's in docs/configuration.md, report's in docs/report.md),
generated from the option table.

`python -m exporter.options --markdown` prints one; `--write-readme docs/configuration.md`
replaces the lines between the marker comments, which a test keeps in step with the table.
"""

from __future__ import annotations

from pathlib import Path

from exporter.options.option import Command, Option
from exporter.options.parsing import Table, for_command
from exporter.options.table import OPTIONS
from exporter.options.values import Choice, Value

BEGIN = "<!-- options:begin -->"
END = "<!-- options:end -->"
HEADER = "| flag | environment | default | meaning |\n|---|---|---|---|\n"


def _flags_text(flags: tuple[str, ...], value: Value[object], metavar: str | None) -> str:
    """Return the flag cell's text for one option or alias, e.g. "`-f`, `--collectors`",
    "`--scope {node,pod}`" or "`--sim.fault SPEC`": the placeholder follows the last flag."""
    if not flags:
        return ""
    suffix = ""
    if metavar is not None:
        suffix = f" {metavar}"
    elif isinstance(value, Choice):
        suffix = " {" + ",".join(value.choices()) + "}"
    *first, last = flags
    return ", ".join([*(f"`{f}`" for f in first), f"`{last}{suffix}`"])


def _flag_cell(option: Option[object]) -> str:
    """Return the flag cell: the option's flags with its placeholder, then each alias's flags
    (an alias shows no placeholder, only the choices of a closed set)."""
    parts = [_flags_text(option.flags, option.value, option.metavar),
             *(_flags_text(a.flags, a.value, None) for a in option.aliases)]
    return ", ".join(p for p in parts if p)


def _env_text(env: tuple[str, ...], value: Value[object]) -> str:
    cell = ", ".join(f"`{name}`" for name in env)
    separator = value.env_separator()
    if cell and separator:
        cell += f" (`{separator}`-separated)"
    return cell


def _env_cell(option: Option[object]) -> str:
    parts = [_env_text(option.env, option.value),
             *(_env_text(a.env, a.value) for a in option.aliases)]
    return ", ".join(p for p in parts if p)


def _meaning_cell(option: Option[object]) -> str:
    meaning = option.help
    for alias in option.aliases:
        spellings = ", ".join(f"`{s}`" for s in (*alias.flags, *(f"${e}" for e in alias.env)))
        meaning += f"; {spellings}: {alias.help}"
    if option.ignored is None:
        return meaning
    return f"{meaning}; accepted for compatibility, ignored because {option.ignored}"


def markdown_table(command: Command = "serve", table: Table = OPTIONS) -> str:
    """Return the markdown flag table of `command`: the header, then one row per option with
    its flags, variables, default and meaning, in table order."""
    lines = [HEADER]
    for option in for_command(command, table):
        cells = (_flag_cell(option), _env_cell(option), option.shown_default(),
                 _meaning_cell(option))
        # A | inside a cell would end it; the rest of the markdown is taken as written.
        lines.append("|" + "|".join(f" {c.replace('|', chr(92) + '|')} " if c else " "
                                    for c in cells) + "|\n")
    return "".join(lines)


def with_table(readme: str, table_text: str) -> str:
    """Return `readme` with the text between the markers replaced by `table_text`."""
    start, end = readme.find(BEGIN), readme.find(END)
    if start < 0 or end < start:
        raise ValueError(f"the page has no {BEGIN} ... {END} block")
    return readme[:start + len(BEGIN)] + "\n" + table_text + readme[end:]


def write_readme(path: Path, table_text: str | None = None) -> bool:
    """Rewrite the table block of the page at `path`; return True when the file changed."""
    old = path.read_text(encoding="utf-8")
    new = with_table(old, markdown_table() if table_text is None else table_text)
    if new != old:
        path.write_text(new, encoding="utf-8")
    return new != old

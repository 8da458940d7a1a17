"""dcgm-exporter's command-line grammar: Go's `flag` package under urfave/cli v2.

dcgm-exporter reads its command line with urfave/cli v2, which hands it to Go's `flag`
package (its app does not turn on urfave's combined short options). So a flag is written
with one dash or two (`-collectors` is `--collectors`), its value follows as the next
argument or after `=` (`-c 5000`, `-c=5000`, `--collectors=x.csv`), a switch is bare or
given a Go boolean after `=` (`-k`, `-k=false`), a name is never abbreviated (`--f` is not
`--fake-gpus`), `-debug` is the flag `debug` and never `-d ebug`, and parsing stops at the
first argument that is not a flag or after `--`.

`go_to_argparse` checks a command line by those rules and rewrites each flag into the one
spelling argparse reads unambiguously (`--collectors=x.csv`), so argparse then only checks
values and builds --help. Errors are the line Go writes
(`flag provided but not defined: -x`), raised as GoFlagError.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

HELP_NAMES = frozenset({"h", "help"})
"""What Go's flag package answers with its usage when no flag of that name is defined."""
VERSION_NAMES = frozenset({"v", "version"})
"""urfave/cli's version flag, which it adds to an app that has a version (dcgm-exporter's)."""

GO_TRUE = frozenset({"1", "t", "T", "TRUE", "true", "True"})
GO_FALSE = frozenset({"0", "f", "F", "FALSE", "false", "False"})
"""The texts Go's strconv.ParseBool takes, which a switch accepts after `=`."""


class GoFlagError(ValueError):
    """A command line Go's flag package refuses; the message is Go's own line."""


@dataclass(frozen=True, slots=True)
class Spelling:
    """What one flag name (without its dashes) stands for."""

    canonical: str
    """The spelling argparse is handed (the option's long flag where it has one)."""
    switch: bool
    """A flag without argument, which takes a value only after `=`."""


def name_spellings(flag_sets: Iterable[tuple[Sequence[str], bool]]) -> dict[str, Spelling]:
    """Return each flag name without its dashes -> its Spelling, from (the flags of one
    option or alias, whether they are a switch); ValueError where one name would mean two
    flags (`-x` and `--x` of different options)."""
    names: dict[str, Spelling] = {}
    for flags, switch in flag_sets:
        canonical = next((f for f in flags if f.startswith("--")), flags[0])
        for flag in flags:
            name = flag.lstrip("-")
            known = names.get(name)
            if known is not None and known.canonical != canonical:
                raise ValueError(f"{flag} and {known.canonical} are one flag to Go's grammar")
            names[name] = Spelling(canonical, switch)
    return names


def _go_bool(text: str, name: str) -> str:
    if text in GO_TRUE:
        return "true"
    if text in GO_FALSE:
        return "false"
    raise GoFlagError(f'invalid boolean value "{text}" for -{name}: parse error')


def go_to_argparse(argv: Sequence[str], names: Mapping[str, Spelling]) -> list[str]:
    """Return argv rewritten for argparse after checking it by Go's rules: each flag as its
    canonical spelling with `=value`, `--help` for Go's help names and `--version` for
    urfave's version flag. Flags end at `--` or at the first argument that is not a flag;
    any argument left is refused (GoFlagError)."""
    out: list[str] = []
    index = 0
    while index < len(argv):
        arg = argv[index]
        index += 1
        if len(arg) < 2 or not arg.startswith("-"):
            index -= 1  # not a flag: Go stops here and leaves the rest as arguments
            break
        dashes = 2 if arg.startswith("--") else 1
        if arg == "--":
            break
        name, has_value, text = arg[dashes:].partition("=")
        if not name or name.startswith(("-", "=")):
            raise GoFlagError(f"bad flag syntax: {arg}")
        spelling = names.get(name)
        if spelling is None:
            if name in HELP_NAMES | VERSION_NAMES:
                out.append("--help" if name in HELP_NAMES else "--version")
                continue
            raise GoFlagError(f"flag provided but not defined: -{name}")
        if spelling.switch:
            out.append(f"{spelling.canonical}={_go_bool(text, name)}" if has_value
                       else spelling.canonical)
            continue
        if not has_value:
            if index >= len(argv):
                raise GoFlagError(f"flag needs an argument: -{name}")
            text = argv[index]  # taken whatever it looks like, as Go does
            index += 1
        out.append(f"{spelling.canonical}={text}")
    rest = argv[index:]
    if rest:
        # Go would hand these to the program as arguments; no command here takes any.
        raise GoFlagError(f"unexpected argument after the flags: {' '.join(rest)}")
    return out

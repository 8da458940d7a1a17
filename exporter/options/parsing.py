"""Build each command's argparse parser from the option table, and resolve what argparse
took, with the environment, into a Resolution.

Precedence: the flag when given, else the first variable of the option's `env` that is set
and not empty, else the default. A flag given an empty value stands for the default (and so
still hides the variables). An option's aliases (dcgm-exporter's spellings that read their
text another way) come after its own flags and after its own variables respectively.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping, Sequence
from typing import TypeVar

from exporter import __version__
from exporter.options.go_flags import GoFlagError, Spelling, go_to_argparse, name_spellings
from exporter.options.option import Alias, Command, Option, Resolution, Setting
from exporter.options.table import GROUP_DESCRIPTIONS, OPTIONS
from exporter.options.values import FlagValue, Value

T = TypeVar("T")

Table = Sequence[Option[object]]


def for_command(command: Command, table: Table = OPTIONS) -> list[Option[object]]:
    """Return the options of `table` that `command` takes, in table order."""
    return [o for o in table if command in o.commands]


def check_table(table: Table) -> None:
    """Raise ValueError where two options of one command share a name, flag or variable."""
    names = [o.name for o in table]
    if len(set(names)) != len(names):
        raise ValueError(f"option names repeat: {sorted(n for n in names if names.count(n) > 1)}")
    for command in sorted({c for o in table for c in o.commands}):
        options = for_command(command, table)
        for what, spellings in (("flag", [f for o in options for f in o.all_flags]),
                                ("variable", [e for o in options for e in o.all_env])):
            repeated = sorted({s for s in spellings if spellings.count(s) > 1})
            if repeated:
                raise ValueError(f"`{command}` declares the {what} {repeated} twice")


def _plain(markdown: str) -> str:
    return markdown.replace("`", "")


def _env_note(env: tuple[str, ...], value: Value[object]) -> str:
    separator = value.env_separator()
    listed = ", ".join(env)
    return f"[{listed}, {separator!r}-separated]" if separator else f"[{listed}]"


def help_text(option: Option[object], *, show_env: bool = True) -> str:
    """Return the option's --help line: what it does, its variables (unless `show_env` is
    False), its default, and for a compatibility-only option why it is ignored."""
    parts = [_plain(option.help)]
    if option.env and show_env:
        parts.append(_env_note(option.env, option.value))
    default = _plain(option.shown_default())
    if default and default != "off":
        parts.append(f"(default {default})")
    if option.ignored is not None:
        parts.append(f"(accepted for compatibility; ignored because "
                     f"{_plain(option.ignored)})")
    return " ".join(parts)


def alias_help_text(alias: Alias[object]) -> str:
    """Return an alias's --help line: what it means and the variables it reads."""
    return " ".join([_plain(alias.help), *([_env_note(alias.env, alias.value)]
                                           if alias.env else [])])


def alias_dest(option: Option[object], index: int) -> str:
    """Return the argparse destination of the option's `index`-th alias; it is not an
    identifier, so it can never be another option's name."""
    return f"{option.name}:alias{index}"


def _escaped(help_line: str) -> str:
    return help_line.replace("%", "%%")  # argparse formats help lines with %


def _add_flags(target: argparse._ActionsContainer, flags: tuple[str, ...], dest: str,
               value: Value[object], metavar: str | None, help_line: str) -> None:
    if value.action == "switch":
        target.add_argument(*flags, dest=dest, action="store_const", const=True,
                            help=_escaped(help_line))
        return
    choices = value.choices()
    target.add_argument(
        *flags, dest=dest,
        action="append" if value.action == "append" else "store",
        choices=choices,
        metavar=metavar or (None if choices else value.metavar),
        help=_escaped(help_line),
    )


def add_arguments(parser: argparse.ArgumentParser, command: Command,
                  table: Table = OPTIONS, group_descriptions: Mapping[str, str] | None = None,
                  ) -> None:
    """Declare the command's flags, grouped under the options' headings in table order
    (`group_descriptions` None: the table's descriptions of its headings)."""
    groups: dict[str, argparse._ArgumentGroup] = {}
    from_env_only = [o for o in for_command(command, table) if not o.all_flags]
    if from_env_only:
        listed = "; ".join(f"{'/'.join(o.env)}: {help_text(o, show_env=False)}"
                           for o in from_env_only)
        parser.epilog = f"Read from the environment only - {listed}."
    for option in for_command(command, table):
        if not option.all_flags:
            continue
        if option.group is None:
            target: argparse._ActionsContainer = parser
        elif option.group in groups:
            target = groups[option.group]
        else:
            described = GROUP_DESCRIPTIONS if group_descriptions is None else group_descriptions
            target = groups[option.group] = parser.add_argument_group(
                option.group, described.get(option.group))
        if option.flags:
            _add_flags(target, option.flags, option.name, option.value, option.metavar,
                       help_text(option))
        for index, alias in enumerate(option.aliases):
            if alias.flags:
                _add_flags(target, alias.flags, alias_dest(option, index), alias.value,
                           option.metavar, alias_help_text(alias))


GO_GRAMMAR: frozenset[Command] = frozenset({"serve", "doctor"})
"""The commands that read dcgm-exporter's flags, and so take them in Go's grammar (see
go_flags): every flag of theirs, ours included, is written that way."""


def build_parser(command: Command, table: Table = OPTIONS, description: str | None = None,
                 group_descriptions: Mapping[str, str] | None = None,
                 ) -> argparse.ArgumentParser:
    """Return the command's argparse parser; no flag is ever taken by a prefix of its name."""
    parser = argparse.ArgumentParser(prog=f"gpu-exporter {command}", description=description,
                                     allow_abbrev=False)
    if command in GO_GRAMMAR:
        # urfave/cli gives dcgm-exporter `--version, -v`; go_flags reads both as this one.
        parser.add_argument("--version", action="version",
                            version=f"gpu-exporter version {__version__}")
    add_arguments(parser, command, table, group_descriptions)
    return parser


def _given_text(given: FlagValue, separator: str | None) -> str:
    if isinstance(given, bool):
        return "on"
    if isinstance(given, list):
        return (separator or " ").join(given)
    return given


def _spellings(option: Option[T]) -> list[tuple[Value[T], str | None, tuple[str, ...]]]:
    """Return the value type, the flag named in reports and the variables of the option,
    then of each alias, in precedence order."""
    return [(option.value, option.flag, option.env),
            *((a.value, a.flag, a.env) for a in option.aliases)]


def resolve_option(option: Option[T], given: FlagValue | None, env: Mapping[str, str],
                   aliases_given: Sequence[FlagValue | None] = ()) -> Setting[T]:
    """Return the option's setting from what argparse took for its own flags (`given`) and
    for each alias's (`aliases_given`), and from the environment `env`.

    The first flag given wins (an empty value stands for the default), the option's before
    its aliases'; else the first variable set and not empty, in the same order; else the
    default. ConfigError names a value that does not parse."""
    spellings = _spellings(option)
    for (value, flag, _), taken in zip(spellings, (given, *aliases_given), strict=False):
        if taken is not None and flag is not None:
            text = _given_text(taken, value.env_separator())
            if taken == "":
                return Setting(option, option.default, flag, text)
            return Setting(option, value.from_flag(taken, flag), flag, text)
    for value, _, names in spellings:
        for name in names:
            text = env.get(name, "")
            if text != "":
                return Setting(option, value.parse(text, f"${name}"), f"${name}", text)
    return Setting(option, option.default, None, _plain(option.shown_default()))


def _flag_value(given: object) -> FlagValue | None:
    if given is None or isinstance(given, str | bool):
        return given
    if isinstance(given, list) and all(isinstance(item, str) for item in given):
        return [str(item) for item in given]
    raise TypeError(f"unexpected argparse value {given!r}")


def resolve(command: Command, given: argparse.Namespace, env: Mapping[str, str] | None = None,
            table: Table = OPTIONS) -> Resolution:
    """Resolve every option of `command`; ConfigError names the first bad value."""
    env = os.environ if env is None else env
    settings: dict[str, Setting[object]] = {
        option.name: resolve_option(
            option, _flag_value(getattr(given, option.name, None)), env,
            [_flag_value(getattr(given, alias_dest(option, i), None))
             for i in range(len(option.aliases))])
        for option in for_command(command, table)
    }
    return Resolution(command, settings)


def _switch_dests(command: Command, table: Table) -> dict[str, str]:
    """Return the argparse destination of each flag spelling of the switches `command`
    takes, its aliases' included."""
    dests: dict[str, str] = {}
    for option in for_command(command, table):
        spellings = [(option.name, option.flags, option.value),
                     *((alias_dest(option, i), a.flags, a.value)
                       for i, a in enumerate(option.aliases))]
        for dest, flags, value in spellings:
            if value.action == "switch":
                dests.update(dict.fromkeys(flags, dest))
    return dests


def split_switch_values(argv: Sequence[str], dests: Mapping[str, str]
                        ) -> tuple[list[str], dict[str, str]]:
    """Return `argv` without the switches written with a value, and those values by argparse
    destination (`dests` maps each switch spelling to its destination).

    dcgm-exporter's flag parser takes `--switch=false` (and `-k=true`); argparse takes
    switches only bare, so those are taken out before it runs. Nothing after `--` is an
    option."""
    rest: list[str] = []
    given: dict[str, str] = {}
    for index, arg in enumerate(argv):
        if arg == "--":
            rest.extend(argv[index:])
            break
        flag, sep, text = arg.partition("=")
        if sep and flag in dests:
            given[dests[flag]] = text
        else:
            rest.append(arg)
    return rest, given


def go_spellings(command: Command, table: Table = OPTIONS) -> dict[str, Spelling]:
    """Return each flag name of the command without its dashes -> what it stands for."""
    sets: list[tuple[tuple[str, ...], bool]] = []
    for option in for_command(command, table):
        for flags, value in ((option.flags, option.value),
                             *((a.flags, a.value) for a in option.aliases)):
            if flags:
                sets.append((flags, value.action == "switch"))
    return name_spellings(sets)


def parse_command_line(command: Command, argv: Sequence[str],
                       env: Mapping[str, str] | None = None,
                       parser: argparse.ArgumentParser | None = None,
                       table: Table = OPTIONS) -> Resolution:
    """Return the Resolution of `command` from `argv` and `env`; the GO_GRAMMAR commands read
    `argv` by Go's flag rules first. It exits (status 2) with the error for an unknown or
    malformed flag, and after printing --help; ConfigError names the first bad value."""
    parser = build_parser(command, table) if parser is None else parser
    if command in GO_GRAMMAR:
        try:
            argv = go_to_argparse(argv, go_spellings(command, table))
        except GoFlagError as refused:
            parser.exit(2, f"{parser.prog}: {refused}\n")
    rest, switch_texts = split_switch_values(argv, _switch_dests(command, table))
    given = parser.parse_args(rest)
    for dest, text in switch_texts.items():
        setattr(given, dest, text)  # a switch written with a value: it beats the bare form
    return resolve(command, given, env, table)

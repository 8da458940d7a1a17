"""The option table -> argparse for a command, and argparse's result + environment -> a
Resolution.

Precedence: the flag when given, else the first variable of the option's `env` that is set
and not empty, else the default. A flag given an empty value stands for the default (and so
still hides the variables).
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping, Sequence
from typing import TypeVar

from exporter.options.model import Command, Option, Resolution, Setting
from exporter.options.table import OPTIONS
from exporter.options.values import FlagValue

T = TypeVar("T")

Table = Sequence[Option[object]]


def for_command(command: Command, table: Table = OPTIONS) -> list[Option[object]]:
    return [o for o in table if command in o.commands]


def check_table(table: Table) -> None:
    """Raise ValueError where two options of one command share a name, flag or variable."""
    names = [o.name for o in table]
    if len(set(names)) != len(names):
        raise ValueError(f"option names repeat: {sorted(n for n in names if names.count(n) > 1)}")
    for command in sorted({c for o in table for c in o.commands}):
        options = for_command(command, table)
        for what, spellings in (("flag", [f for o in options for f in o.flags]),
                                ("variable", [e for o in options for e in o.env])):
            repeated = sorted({s for s in spellings if spellings.count(s) > 1})
            if repeated:
                raise ValueError(f"`{command}` declares the {what} {repeated} twice")


def _plain(markdown: str) -> str:
    return markdown.replace("`", "")


def help_text(option: Option[object], *, show_env: bool = True) -> str:
    """The option's --help line: what it does, its variables and its default."""
    parts = [_plain(option.help)]
    if option.env and show_env:
        separator = option.value.env_separator()
        listed = ", ".join(option.env)
        parts.append(f"[{listed}, {separator!r}-separated]" if separator else f"[{listed}]")
    default = _plain(option.shown_default())
    if default and default != "off":
        parts.append(f"(default {default})")
    if option.ignored is not None:
        parts.append(f"(accepted for compatibility; ignored because "
                     f"{_plain(option.ignored)})")
    return " ".join(parts)


def _escaped(help_line: str) -> str:
    return help_line.replace("%", "%%")  # argparse formats help lines with %


def add_arguments(parser: argparse.ArgumentParser, command: Command,
                  table: Table = OPTIONS, group_descriptions: Mapping[str, str] | None = None,
                  ) -> None:
    """Declare the command's flags, grouped under the options' headings in table order."""
    groups: dict[str, argparse._ArgumentGroup] = {}
    from_env_only = [o for o in for_command(command, table) if not o.flags]
    if from_env_only:
        listed = "; ".join(f"{'/'.join(o.env)}: {help_text(o, show_env=False)}"
                           for o in from_env_only)
        parser.epilog = f"Read from the environment only - {listed}."
    for option in for_command(command, table):
        if not option.flags:
            continue
        if option.group is None:
            target: argparse._ActionsContainer = parser
        elif option.group in groups:
            target = groups[option.group]
        else:
            target = groups[option.group] = parser.add_argument_group(
                option.group, (group_descriptions or {}).get(option.group))
        value = option.value
        if value.action == "switch":
            target.add_argument(*option.flags, dest=option.name, action="store_const",
                                const=True, help=_escaped(help_text(option)))
            continue
        choices = value.choices()
        target.add_argument(
            *option.flags, dest=option.name,
            action="append" if value.action == "append" else "store",
            choices=choices,
            metavar=option.metavar or (None if choices else value.metavar),
            help=_escaped(help_text(option)),
        )


def build_parser(command: Command, table: Table = OPTIONS, description: str | None = None,
                 group_descriptions: Mapping[str, str] | None = None,
                 ) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=f"gpu-exporter {command}", description=description)
    add_arguments(parser, command, table, group_descriptions)
    return parser


def _given_text(given: FlagValue, separator: str | None) -> str:
    if isinstance(given, bool):
        return "on"
    if isinstance(given, list):
        return (separator or " ").join(given)
    return given


def resolve_option(option: Option[T], given: FlagValue | None, env: Mapping[str, str]
                   ) -> Setting[T]:
    if given is not None and option.flag is not None:
        text = _given_text(given, option.value.env_separator())
        if given == "":
            return Setting(option, option.default, option.flag, text)
        return Setting(option, option.value.from_flag(given, option.flag), option.flag, text)
    for name in option.env:
        text = env.get(name, "")
        if text != "":
            return Setting(option, option.value.parse(text, f"${name}"), f"${name}", text)
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
        option.name: resolve_option(option, _flag_value(getattr(given, option.name, None)), env)
        for option in for_command(command, table)
    }
    return Resolution(command, settings)


def parse_command_line(command: Command, argv: Sequence[str],
                       env: Mapping[str, str] | None = None,
                       parser: argparse.ArgumentParser | None = None,
                       table: Table = OPTIONS) -> Resolution:
    """argv (argparse exits on unknown flags and for --help) and env -> the Resolution."""
    parser = build_parser(command, table) if parser is None else parser
    return resolve(command, parser.parse_args(list(argv)), env, table)

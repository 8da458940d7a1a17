"""Every option of the table, for every command that takes it: the flag beats the variables,
the first non-empty variable beats the later ones, and the default comes last; a bad value
names where it came from."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

import pytest

from exporter.options import (
    OPTIONS,
    Command,
    ConfigError,
    Option,
    Setting,
    build_parser,
    check_table,
    parse_command_line,
)
from exporter.options.report_table import GroupBy, Instant, Span
from exporter.options.values import (
    Choice,
    Devices,
    Duration,
    Integer,
    Listen,
    Number,
    Regex,
    Switch,
    Value,
)
from tests.support.option_values import expected

CASES = [(command, option) for option in OPTIONS for command in sorted(option.commands)]
WITH_ENV = [(c, o) for c, o in CASES if o.env]
WITH_FLAGS = [(c, o) for c, o in CASES if o.flags]


def ids(cases: list[tuple[Command, Option[object]]]) -> list[str]:
    return [f"{command}:{option.name}" for command, option in cases]


def resolved(command: Command, option: Option[object], argv: Sequence[str],
             env: Mapping[str, str]) -> Setting[object]:
    return parse_command_line(command, argv, env, build_parser(command)).setting(option)


def sample(option: Option[object], index: int) -> str:
    samples = option.value.samples()
    return samples[index % len(samples)]


def flag_argv(option: Option[object], flag: str, text: str) -> list[str]:
    return [flag] if option.value.action == "switch" else [flag, text]




def test_the_table_declares_each_name_flag_and_variable_once_per_command() -> None:
    check_table(OPTIONS)


@pytest.mark.parametrize(("command", "option"), CASES, ids=ids(CASES))
def test_default_when_nothing_is_given(command: Command, option: Option[object]) -> None:
    setting = resolved(command, option, [], {})
    assert setting.source is None
    assert setting.value is option.default  # the table's own object, not a parse of it


@pytest.mark.parametrize(("command", "option"), WITH_ENV, ids=ids(WITH_ENV))
def test_each_variable_alone_is_read(command: Command, option: Option[object]) -> None:
    for index, name in enumerate(option.env):
        text = sample(option, index)
        setting = resolved(command, option, [], {name: text})
        assert (setting.source, setting.text) == (f"${name}", text)
        assert setting.value == expected(option, text), (name, text)


@pytest.mark.parametrize(("command", "option"), WITH_ENV, ids=ids(WITH_ENV))
def test_earlier_variables_win_and_empty_ones_are_skipped(
        command: Command, option: Option[object]) -> None:
    env = {name: sample(option, index + 1) for index, name in enumerate(option.env)}
    for first in range(len(option.env)):
        blanked = {**env, **{name: "" for name in option.env[:first]}}
        setting = resolved(command, option, [], blanked)
        assert setting.source == f"${option.env[first]}"
        assert setting.value == expected(option, env[option.env[first]]), (first, blanked)


@pytest.mark.parametrize(("command", "option"), WITH_FLAGS, ids=ids(WITH_FLAGS))
def test_every_spelling_of_the_flag_beats_every_variable(
        command: Command, option: Option[object]) -> None:
    env = {name: sample(option, index + 1) for index, name in enumerate(option.env)}
    text = sample(option, 0)
    for flag in option.flags:
        setting = resolved(command, option, flag_argv(option, flag, text), env)
        assert setting.source == option.flag
        assert setting.value == expected(option, text), (flag, text)


BAD_TEXT: dict[type[Value[object]], str] = {
    Integer: "x", Number: "x", Duration: "fast", Listen: "9400", Devices: "x", Regex: "(",
    Switch: "maybe", Choice: "nope", Span: "fortnight", Instant: "yesterday", GroupBy: "team",
}
"""A value each type refuses; types that take any text are absent."""

REFUSING = [(c, o) for c, o in CASES if type(o.value) in BAD_TEXT]


@pytest.mark.parametrize(("command", "option"), REFUSING, ids=ids(REFUSING))
def test_a_bad_value_names_its_flag_or_variable(command: Command,
                                                option: Option[object]) -> None:
    bad = BAD_TEXT[type(option.value)]
    for name in option.env:
        with pytest.raises(ConfigError, match=re.escape(f"${name}: {bad!r}")):
            resolved(command, option, [], {name: bad})
    # argparse checks a closed set itself; switches take no argument.
    if option.flag is not None and option.value.action == "store" and \
            option.value.choices() is None:
        with pytest.raises(ConfigError, match=re.escape(f"{option.flag}: {bad!r}")):
            resolved(command, option, [option.flag, bad], {})

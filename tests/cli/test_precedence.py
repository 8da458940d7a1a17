"""Every option of the table, for every command that takes it: the flag beats the variables,
the first non-empty variable beats the later ones, and the default comes last; a bad value
names where it came from."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest

from exporter.devices.filter import DeviceFilter
from exporter.k8s.inference_labels import PodLabelSelection
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


NAMED_AS_GIVEN = ("Text", "Choice", "Regex", "Hostengine", "DeviceSelection", "GroupBy")
"""Value types whose value is the text exactly as given."""

PARSED: dict[tuple[str, str], object] = {
    ("Integer", "7"): 7, ("Integer", "11"): 11, ("Integer", "13"): 13,
    ("Number", "2.5"): 2.5, ("Number", "40"): 40.0, ("Number", "75"): 75.0,
    ("Switch", "true"): True, ("Switch", "1"): True, ("Switch", "yes"): True,
    ("FilePath", "/etc/a.csv"): Path("/etc/a.csv"), ("FilePath", "/etc/b.csv"):
        Path("/etc/b.csv"), ("FilePath", "c.csv"): Path("c.csv"),
    ("Duration", "250ms"): 0.25, ("Duration", "2s"): 2.0, ("Duration", "3m"): 180.0,
    ("GoDuration", "5m0s"): 300.0, ("GoDuration", "90s"): 90.0, ("GoDuration", "1h"): 3600.0,
    ("LenientGoDuration", "5s"): 5.0, ("LenientGoDuration", "1m30s"): 90.0,
    ("LenientGoDuration", "250ms"): 0.25,
    ("Span", "30d"): 30 * 86400.0, ("Span", "1h30m"): 5400.0, ("Span", "15s"): 15.0,
    ("Instant", "2025-05-01T00:00:00Z"): 1746057600.0, ("Instant", "2025-05-02"):
        1746144000.0, ("Instant", "1746057600"): 1746057600.0,
    ("Listen", "127.0.0.1:9401"): ("127.0.0.1", 9401), ("Listen", ":9402"): (None, 9402),
    ("Listen", "[::1]:9403"): ("::1", 9403),
    ("Devices", "g:0,1"): DeviceFilter(gpus=True, instances=False,
                                       gpu_ids=frozenset({0, 1}), instance_ids=None),
    ("Devices", "i"): DeviceFilter(gpus=False, instances=True, gpu_ids=None,
                                   instance_ids=None),
    ("Devices", "g"): DeviceFilter(gpus=True, instances=False, gpu_ids=None,
                                   instance_ids=None),
    ("Repeated", "alpha"): ("alpha",), ("Repeated", "beta"): ("beta",),
    ("Repeated", "gamma"): ("gamma",), ("Repeated", "namespace"): ("namespace",),
    ("Repeated", "namespace,label:team"): ("namespace,label:team",),
    ("Separated", "a.io/gpu"): ("a.io/gpu",), ("Separated", "d.io/gpu"): ("d.io/gpu",),
    ("Separated", "b.io/gpu, c.io/gpu"): ("b.io/gpu", "c.io/gpu"),
    ("RegexList", "^team$"): ("^team$",), ("RegexList", "app.*, tier"): ("app.*", "tier"),
    ("RegexList", "^a"): ("^a",),
    ("PodLabels", "team|app"): PodLabelSelection(regex="team|app"),
    ("PodLabels", "inference"): PodLabelSelection(presets=("inference",)),
    ("PodLabels", "llm-d,kai"): PodLabelSelection(presets=("llm-d", "kai")),
    ("ConfigMapRef", "gpu-operator:metrics"): ("gpu-operator", "metrics"),
    ("ConfigMapRef", "none"): None, ("ConfigMapRef", "monitoring:dcgm"): ("monitoring", "dcgm"),
}
"""What each sample text of each value type means, written out: the expectation of the
precedence tests, stated apart from the parsers that resolve it."""


def expected(option: Option[object], text: str) -> object:
    """The value `text` should give `option`, from the literals above."""
    kind = type(option.value).__name__
    if kind in NAMED_AS_GIVEN:
        return text
    key = (kind, text)
    assert key in PARSED, f"{option.name}: no literal for {key} in PARSED; add the value"
    return PARSED[key]


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

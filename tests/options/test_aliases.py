"""dcgm-exporter's spellings of our own options (aliases) that read their text another way:
each is consulted after the option's own flags and variables, parses with its own type, and
names itself in errors; and the value types only dcgm-exporter's options need."""

from __future__ import annotations

import re

import pytest

from exporter.config import parse_serve_args
from exporter.options import (
    OPTIONS,
    Command,
    ConfigError,
    Option,
    Setting,
    check_table,
    parse_command_line,
)
from exporter.options.markdown import markdown_table
from exporter.options.option import Alias
from exporter.options.serve_table import LOG_LEVEL, XID_COUNT_WINDOW
from exporter.options.values import ConfigMapRef, RegexList, Switch
from tests.support.option_values import expected_of

ALIASED = [(c, o, a) for o in OPTIONS for a in o.aliases for c in sorted(o.commands)]


def ids(cases: list[tuple[Command, Option[object], Alias[object]]]) -> list[str]:
    return [f"{c}:{o.name}:{a.flags[0] if a.flags else a.env[0]}" for c, o, a in cases]


def setting(command: Command, option: Option[object], argv: list[str],
            env: dict[str, str]) -> Setting[object]:
    return parse_command_line(command, argv, env).setting(option)


def test_there_are_aliases_to_check() -> None:
    assert {o.name for _, o, _ in ALIASED} >= {"xid_count_window", "log_level",
                                              "clock_events_count_window"}


@pytest.mark.parametrize(("command", "option", "alias"), ALIASED, ids=ids(ALIASED))
def test_an_alias_flag_beats_every_variable_but_not_the_option_flag(
        command: Command, option: Option[object], alias: Alias[object]) -> None:
    text = alias.value.samples()[0]
    env = {name: option.value.samples()[-1] for name in option.env}
    env.update({name: alias.value.samples()[-1] for name in alias.env})
    for flag in alias.flags:
        argv = [flag] if alias.value.action == "switch" else [flag, text]
        got = setting(command, option, argv, env)
        assert got.source == alias.flag
        assert got.value == expected_of(type(alias.value).__name__, text, flag), text
        own = option.value.samples()[1]
        own_argv = [option.flags[0]] if option.value.action == "switch" else \
            [option.flags[0], own]
        assert setting(command, option, [*argv, *own_argv], env).source == option.flag


@pytest.mark.parametrize(("command", "option", "alias"), ALIASED, ids=ids(ALIASED))
def test_alias_variables_come_after_the_option_variables(
        command: Command, option: Option[object], alias: Alias[object]) -> None:
    for name in alias.env:
        text = alias.value.samples()[1]
        got = setting(command, option, [], {name: text})
        assert (got.source, got.value) == (f"${name}", expected_of(
            type(alias.value).__name__, text, name))
        for own in option.env:
            mine = option.value.samples()[0]
            got = setting(command, option, [], {name: text, own: mine})
            assert (got.source, got.value) == (f"${own}", expected_of(
                type(option.value).__name__, mine, own))


def test_dcgm_window_sizes_are_milliseconds_and_ours_seconds() -> None:
    assert parse_serve_args(["-x", "60000"], env={}).devices.xid_count_window_s == 60.0
    assert parse_serve_args(["--xid-count-window-size", "1500"],
                            env={}).devices.xid_count_window_s == 1.5
    assert parse_serve_args(["--xid-count-window", "60"], env={}).devices.xid_count_window_s == 60.0
    env = {"DCGM_EXPORTER_XID_COUNT_WINDOW_SIZE": "120000",
           "DCGM_EXPORTER_CLOCK_EVENTS_COUNT_WINDOW_SIZE": "30000"}
    cfg = parse_serve_args([], env=env)
    assert (cfg.devices.xid_count_window_s,
            cfg.devices.clock_events_count_window_s) == (120.0, 30.0)
    cfg = parse_serve_args(["--clock-events-count-window", "2m"], env=env)
    assert cfg.devices.clock_events_count_window_s == 120.0
    # With a unit, every spelling means the same.
    assert parse_serve_args(["-x", "2m"], env={}).devices.xid_count_window_s == 120.0


def test_debug_is_log_level_debug() -> None:
    assert parse_serve_args(["--debug"], env={}).log_level == "debug"
    assert parse_serve_args([], env={"DCGM_EXPORTER_DEBUG": "true"}).log_level == "debug"
    assert parse_serve_args([], env={"DCGM_EXPORTER_DEBUG": "false"}).log_level == "info"
    assert parse_serve_args(["--log-level", "error", "--debug"], env={}).log_level == "error"
    env = {"GPU_EXPORTER_LOG_LEVEL": "warning", "DCGM_EXPORTER_DEBUG": "true"}
    assert parse_serve_args([], env=env).log_level == "warning"
    assert parse_serve_args(["--debug"], env=env).log_level == "debug"


def test_an_alias_error_names_the_alias() -> None:
    with pytest.raises(ConfigError, match=re.escape("--xid-count-window-size: 'fast'")):
        parse_serve_args(["-x", "fast"], env={})
    with pytest.raises(ConfigError, match=re.escape("$DCGM_EXPORTER_DEBUG: 'maybe'")):
        parse_serve_args([], env={"DCGM_EXPORTER_DEBUG": "maybe"})


def test_the_readme_row_lists_the_alias_spellings() -> None:
    row = next(line for line in markdown_table().splitlines()
               if line.startswith("| `--xid-count-window`, `-x`, `--xid-count-window-size` |"))
    assert "`GPU_EXPORTER_XID_COUNT_WINDOW`, `DCGM_EXPORTER_XID_COUNT_WINDOW_SIZE`" in row
    assert "`-x`, `--xid-count-window-size`, `$DCGM_EXPORTER_XID_COUNT_WINDOW_SIZE`: " \
           "dcgm-exporter's spelling, a bare number is milliseconds" in row


def test_an_alias_clashing_with_another_flag_or_variable_is_refused() -> None:
    clash = Option("other", Switch(), False, "x", frozenset({"serve"}), flags=("--debug",))
    with pytest.raises(ValueError, match=re.escape("declares the flag ['--debug'] twice")):
        check_table((*OPTIONS, clash))
    clash = Option("other", Switch(), False, "x", frozenset({"serve"}),
                   env=("DCGM_EXPORTER_XID_COUNT_WINDOW_SIZE",))
    with pytest.raises(ValueError, match="declares the variable"):
        check_table((*OPTIONS, clash))
    assert LOG_LEVEL.aliases
    assert XID_COUNT_WINDOW.aliases


@pytest.mark.parametrize(("text", "patterns"), [
    ("^team$", ("^team$",)),
    (" app.* , tier ,", ("app.*", "tier")),
    ("", ()),
])
def test_regex_lists_split_on_commas(text: str, patterns: tuple[str, ...]) -> None:
    assert RegexList().parse(text, "-t") == patterns


def test_a_bad_regex_in_a_list_names_its_source() -> None:
    with pytest.raises(ConfigError, match=re.escape("$V: 'b(' is not a valid regex")):
        RegexList().parse("a, b(", "$V")


@pytest.mark.parametrize(("text", "expected"), [
    ("gpu-operator:metrics-config", ("gpu-operator", "metrics-config")),
    ("none", None), ("None", None),
])
def test_configmap_references(text: str, expected: tuple[str, str] | None) -> None:
    assert ConfigMapRef().parse(text, "-m") == expected


@pytest.mark.parametrize("text", ["metrics", "ns:", ":name", "ns:a:b", "NS:name", "ns name:x"])
def test_malformed_configmap_references_are_refused(text: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(f"--configmap-data: {text!r} is not "
                                                    "NAMESPACE:NAME")):
        parse_serve_args(["-m", text], env={})


def test_kubernetes_settings_reach_the_kubernetes_config_and_imply_nothing() -> None:
    cfg = parse_serve_args(
        ["--kubernetes-gpu-id-type", "device-name", "--kubernetes-enable-pod-labels",
         "--kubernetes-enable-pod-uid", "--kubernetes-pod-label-allowlist-regex", "^app$,tier",
         "--kubernetes-virtual-gpus", "--kubernetes-enable-dra", "-m", "ns:cm"], env={})
    k8s = cfg.kubernetes
    assert (k8s.gpu_id_type, k8s.enable_pod_labels, k8s.enable_pod_uid) == \
        ("device-name", True, True)
    assert k8s.pod_label_allowlist == ("^app$", "tier")
    assert (k8s.virtual_gpus, k8s.dra, k8s.configmap) == (True, True, ("ns", "cm"))
    assert not k8s.enabled  # like --kubernetes.pod-labels: `-k` stays the switch
    assert parse_serve_args([], env={}).kubernetes.gpu_id_type == "uid"

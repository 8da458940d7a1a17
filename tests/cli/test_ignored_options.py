"""The hook for dcgm-exporter flags that are accepted but mean nothing here: taken on the
command line and from the environment, one start-up warning each when set, none otherwise."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pytest

from exporter.config import serve_config
from exporter.options import (
    OPTIONS,
    ConfigError,
    Option,
    Resolution,
    build_parser,
    check_table,
    parse_command_line,
)
from exporter.options.markdown import markdown_table
from exporter.options.parsing import help_text
from exporter.options.values import Switch, Text

FAKE_GPUS: Option[bool] = Option(
    "fake_gpus", Switch(), False, "accept DCGM's fake GPUs", frozenset({"serve"}),
    flags=("--fake-gpus",), env=("DCGM_EXPORTER_USE_FAKE_GPUS",),
    ignored="there is no DCGM here; `--backend sim` simulates a node")
DUMP_DIRECTORY: Option[str] = Option(
    "dump_directory", Text(), "/tmp/dcgm-exporter-debug", "where debug dumps go",
    frozenset({"serve"}), flags=("--dump-directory",), env=("DCGM_EXPORTER_DUMP_DIRECTORY",),
    ignored="this exporter writes no debug dumps")
TABLE = (*OPTIONS, FAKE_GPUS, DUMP_DIRECTORY)


def serve_resolution(argv: Sequence[str], env: Mapping[str, str]) -> Resolution:
    return parse_command_line("serve", argv, env, build_parser("serve", TABLE), TABLE)


def test_the_extended_table_is_consistent() -> None:
    check_table(TABLE)


def test_unset_compatibility_flags_say_nothing() -> None:
    assert serve_resolution([], {}).warnings() == []
    assert serve_config(serve_resolution(["-c", "5s"], {})).startup_warnings == ()


def test_a_flag_on_the_command_line_warns_once() -> None:
    resolution = serve_resolution(["--fake-gpus", "--backend", "sim"], {})
    assert resolution.warnings() == [
        "--fake-gpus: accepted for compatibility; ignored because there is no DCGM here; "
        "--backend sim simulates a node"]
    assert resolution[FAKE_GPUS] is True


def test_variables_warn_with_the_value_they_had() -> None:
    env = {"DCGM_EXPORTER_USE_FAKE_GPUS": "true", "DCGM_EXPORTER_DUMP_DIRECTORY": "/var/dump"}
    warnings = serve_resolution([], env).warnings()
    assert warnings == [
        "$DCGM_EXPORTER_USE_FAKE_GPUS=true: accepted for compatibility; ignored because there "
        "is no DCGM here; --backend sim simulates a node",
        "$DCGM_EXPORTER_DUMP_DIRECTORY=/var/dump: accepted for compatibility; ignored because "
        "this exporter writes no debug dumps",
    ]


def test_the_serve_config_carries_the_warnings_for_start_up() -> None:
    cfg = serve_config(serve_resolution(["--dump-directory", "/d"], {"NODE_NAME": "n"}))
    assert cfg.startup_warnings == (
        "--dump-directory=/d: accepted for compatibility; ignored because this exporter "
        "writes no debug dumps",)
    assert cfg.hostname == "n"


def test_an_ignored_option_still_refuses_a_malformed_value() -> None:
    with pytest.raises(ConfigError, match=r"\$DCGM_EXPORTER_USE_FAKE_GPUS: 'maybe'"):
        serve_resolution([], {"DCGM_EXPORTER_USE_FAKE_GPUS": "maybe"})


def test_help_and_readme_say_it_is_ignored() -> None:
    assert "(accepted for compatibility; ignored because there is no DCGM here; --backend " \
           "sim simulates a node)" in help_text(FAKE_GPUS)
    row = next(line for line in markdown_table("serve", TABLE).splitlines()
               if line.startswith("| `--fake-gpus` |"))
    assert row.endswith("accepted for compatibility, ignored because there is no DCGM here; "
                        "`--backend sim` simulates a node |")


def test_a_flag_declared_twice_for_one_command_is_refused() -> None:
    clash: Option[bool] = Option("no_dcgm", Switch(), False, "x", frozenset({"serve"}),
                                 flags=("--fake-gpus",))
    with pytest.raises(ValueError, match="`serve` declares the flag \\['--fake-gpus'\\] twice"):
        check_table((*TABLE, clash))

"""dcgm-exporter flags that are accepted but mean nothing here: taken on the command line and
from the environment, one start-up warning each when set, none otherwise."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest

from exporter.config import serve_config
from exporter.options import (
    OPTIONS,
    ConfigError,
    Option,
    Resolution,
    check_table,
    parse_command_line,
)
from exporter.options.dcgm_table import (
    DUMP_DIRECTORY,
    FAKE_GPUS,
    REMOTE_HOSTENGINE_INFO,
)
from exporter.options.markdown import markdown_table
from exporter.options.parsing import help_text
from exporter.options.serve_table import WEB_CONFIG_FILE
from exporter.options.values import Switch

IGNORED = [o for o in OPTIONS if o.ignored is not None]


def serve_resolution(argv: Sequence[str], env: Mapping[str, str]) -> Resolution:
    return parse_command_line("serve", argv, env)


def test_ignored_options_are_serve_options_with_dcgm_variables_only() -> None:
    assert len(IGNORED) >= 15
    for option in IGNORED:
        assert option.commands == frozenset({"serve"}), option.name
        assert not any(name.startswith("GPU_EXPORTER_") for name in option.env), option.name


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


def test_the_hostengine_of_the_sample_cluster_policy_only_warns() -> None:
    # config/samples/v1_clusterpolicy.yaml turns DCGM on, which sets this variable.
    cfg = serve_config(serve_resolution([], {"DCGM_REMOTE_HOSTENGINE_INFO": "nvidia-dcgm:5555"}))
    assert cfg.startup_warnings == (
        "$DCGM_REMOTE_HOSTENGINE_INFO=nvidia-dcgm:5555: accepted for compatibility; ignored "
        "because no DCGM hostengine is used; NVML is read directly",)
    assert serve_resolution(["-r", "[::1]:5555"], {})[REMOTE_HOSTENGINE_INFO] == "[::1]:5555"


def test_dcgm_exporters_web_config_spelling_is_our_web_config() -> None:
    settings = serve_resolution(["--web-config-file", "/etc/web.yml"], {})
    assert settings[WEB_CONFIG_FILE] == Path("/etc/web.yml")
    assert settings.warnings() == []
    from_env = serve_resolution([], {"DCGM_EXPORTER_WEB_CONFIG_FILE": "/etc/web.yml"})
    assert from_env[WEB_CONFIG_FILE] == Path("/etc/web.yml")


def test_the_serve_config_carries_the_warnings_for_start_up() -> None:
    cfg = serve_config(serve_resolution(["--dump-directory", "/d"], {"NODE_NAME": "n"}))
    assert cfg.startup_warnings == (
        "--dump-directory=/d: accepted for compatibility; ignored because this exporter "
        "writes no debug dumps",)
    assert cfg.sampler.host.value == "n"


def test_an_ignored_option_still_refuses_a_malformed_value() -> None:
    with pytest.raises(ConfigError, match=r"\$DCGM_EXPORTER_USE_FAKE_GPUS: 'maybe'"):
        serve_resolution([], {"DCGM_EXPORTER_USE_FAKE_GPUS": "maybe"})


def test_help_and_readme_say_it_is_ignored() -> None:
    assert "(accepted for compatibility; ignored because there is no DCGM here; --backend " \
           "sim simulates a node)" in help_text(FAKE_GPUS)
    row = next(line for line in markdown_table().splitlines()
               if line.startswith("| `--fake-gpus` |"))
    assert row.endswith("accepted for compatibility, ignored because there is no DCGM here; "
                        "`--backend sim` simulates a node |")
    assert DUMP_DIRECTORY.ignored == "this exporter writes no debug dumps"


def test_a_flag_declared_twice_for_one_command_is_refused() -> None:
    clash: Option[bool] = Option("no_dcgm", Switch(), False, "x", frozenset({"serve"}),
                                 flags=("--fake-gpus",))
    with pytest.raises(ValueError, match="`serve` declares the flag \\['--fake-gpus'\\] twice"):
        check_table((*OPTIONS, clash))

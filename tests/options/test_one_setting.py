"""A setting is declared once: the option's declaration names the settings field it fills,
and the declaration alone lists it and carries its value there (docs/architecture.md,
"Where to change what")."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

import pytest

from exporter.config import SETTINGS, filled, serve_config
from exporter.options import OPTIONS, Command, Option, parse_command_line
from exporter.options import dcgm_table as dcgm
from exporter.options import serve_table as opt
from exporter.options.option import declared_options
from exporter.options.values import Duration, Integer, Switch

EXPORTER = Path(__file__).resolve().parents[2] / "exporter"

SERVE_ONLY: frozenset[Command] = frozenset({"serve"})

# Declared here as a new option would be in serve_table.py: it fills an existing field
# under a flag and a variable of its own.
PROBE_REQUIRE_GPUS: Option[bool] = Option(
    "probe_require_gpus", Switch(), False, commands=SERVE_ONLY,
    flags=("--probe-require-gpus",), env=("GPU_EXPORTER_PROBE_REQUIRE_GPUS",),
    help="a new switch", fills="web.health_require_gpus")
# The same for the device layer and the exposition layer.
PROBE_CLOCK_WINDOW: Option[float] = Option(
    "probe_clock_window", Duration("s"), 300.0, commands=SERVE_ONLY,
    flags=("--probe-clock-window",), help="a new window",
    fills="devices.clock_events_count_window_s")
PROBE_DASHED_MODEL: Option[bool] = Option(
    "probe_dashed_model", Switch(), False, commands=SERVE_ONLY,
    flags=("--probe-dashed-model",), help="a new switch",
    fills="exposition.replace_blanks_in_model_name")


def _table_with(probe: Option[object], replaced: Option[object]) -> tuple[Option[object], ...]:
    """Every option, with the probe in place of the option that fills the same field."""
    return (*(o for o in OPTIONS if o is not replaced), probe)


def _table_with_probe() -> tuple[Option[object], ...]:
    return _table_with(PROBE_REQUIRE_GPUS, opt.HEALTH_REQUIRE_GPUS)


@pytest.mark.parametrize(("argv", "env", "expected"), [
    ([], {}, False),
    (["--probe-require-gpus"], {}, True),
    ([], {"GPU_EXPORTER_PROBE_REQUIRE_GPUS": "true"}, True),
    (["--probe-require-gpus=false"], {"GPU_EXPORTER_PROBE_REQUIRE_GPUS": "true"}, False),
])
def test_a_new_option_reaches_its_settings_field_with_no_other_edit(
        argv: list[str], env: dict[str, str], expected: bool) -> None:
    resolution = parse_command_line("serve", argv, env, table=_table_with_probe())
    assert serve_config(resolution).web.health_require_gpus is expected, (argv, env)


@pytest.mark.parametrize(("probe", "replaced", "argv", "field", "expected"), [
    (PROBE_REQUIRE_GPUS, opt.HEALTH_REQUIRE_GPUS, ["--probe-require-gpus"],
     "web.health_require_gpus", True),
    (PROBE_CLOCK_WINDOW, dcgm.CLOCK_EVENTS_COUNT_WINDOW, ["--probe-clock-window", "2m"],
     "devices.clock_events_count_window_s", 120.0),
    (PROBE_DASHED_MODEL, dcgm.REPLACE_BLANKS_IN_MODEL_NAME, ["--probe-dashed-model"],
     "exposition.replace_blanks_in_model_name", True),
], ids=["web", "devices", "exposition"])
def test_a_new_option_of_each_layer_reaches_the_settings_serve_wires(
        probe: Option[object], replaced: Option[object], argv: list[str], field: str,
        expected: object) -> None:
    layer, _, name = field.partition(".")
    table = _table_with(probe, replaced)
    given = getattr(getattr(serve_config(parse_command_line("serve", argv, {}, table=table)),
                            layer), name)
    default = getattr(getattr(serve_config(parse_command_line("serve", [], {}, table=table)),
                              layer), name)
    assert (given, default != expected) == (expected, True), field


@dataclass(frozen=True)
class _ProbeSettings:
    """A layer's settings, as a new layer would declare them."""

    retries: int = 3
    verbose: bool = False


PROBE_RETRIES: Option[int] = Option(
    "probe_retries", Integer(minimum=0), 3, commands=SERVE_ONLY, flags=("--probe-retries",),
    env=("GPU_EXPORTER_PROBE_RETRIES",), help="retries", fills="probe.retries")
PROBE_VERBOSE: Option[bool] = Option(
    "probe_verbose", Switch(), False, commands=SERVE_ONLY, flags=("--probe-verbose",),
    help="verbose", fills="probe.verbose")


def test_a_settings_object_is_filled_from_the_options_naming_it() -> None:
    table = declared_options(globals())
    assert table == (PROBE_REQUIRE_GPUS, PROBE_CLOCK_WINDOW, PROBE_DASHED_MODEL, PROBE_RETRIES,
                     PROBE_VERBOSE)
    resolution = parse_command_line("serve", ["--probe-verbose"],
                                    {"GPU_EXPORTER_PROBE_RETRIES": "7"}, table=table)
    assert filled("probe", _ProbeSettings, resolution) == _ProbeSettings(7, True)


def test_a_config_file_value_sits_between_the_default_and_a_flag() -> None:
    table = (PROBE_RETRIES,)
    from_file = {"probe_retries": 5}
    default = parse_command_line("serve", [], {}, table=table)
    flagged = parse_command_line("serve", ["--probe-retries", "1"], {}, table=table)
    assert filled("probe", _ProbeSettings, default, from_file).retries == 5
    assert filled("probe", _ProbeSettings, flagged, from_file).retries == 1


def test_every_fills_names_a_field_of_a_settings_object_once() -> None:
    seen: dict[str, str] = {}
    for option in OPTIONS:
        if option.fills is None:
            continue
        owner, _, name = option.fills.partition(".")
        assert owner in SETTINGS, f"{option.name}: no settings object {owner!r}"
        fields = {f.name for f in dataclasses.fields(SETTINGS[owner])}
        assert name in fields, f"{option.name}: {owner} has no field {name!r}"
        assert option.fills not in seen, f"{option.name} and {seen[option.fills]} both fill " \
                                         f"{option.fills}"
        seen[option.fills] = option.name


@pytest.mark.parametrize(("constant", "field", "files"), [
    ("HEALTH_REQUIRE_GPUS", "health_require_gpus", (
        "options/serve_table.py",  # declared, naming the field it fills
        "web/config.py",  # the field
        "web/app.py",  # the use: /health's answer
    )),
    ("CLOCK_EVENTS_COUNT_WINDOW", "clock_events_count_window_s", (
        "options/dcgm_table.py",
        "devices/config.py",
        "devices/nvml.py",  # the use: the clock event counter's window
    )),
    ("REPLACE_BLANKS_IN_MODEL_NAME", "replace_blanks_in_model_name", (
        "options/dcgm_table.py",
        "exposition/config.py",
        "exposition/publisher.py",  # the use: the label style
    )),
], ids=["web", "devices", "exposition"])
def test_a_flag_is_declared_once_and_used_once(constant: str, field: str,
                                               files: tuple[str, str, str]) -> None:
    """The option, its field and its use: no list, builder or signature repeats it."""
    def files_naming(word: str) -> set[str]:
        return {str(p.relative_to(EXPORTER)) for p in EXPORTER.rglob("*.py")
                if word in p.read_text(encoding="utf-8")}

    declared_in = files[0]
    assert files_naming(constant) == {declared_in}, constant
    assert files_naming(field) == set(files), field

"""dcgm-exporter's command lines in Go's flag grammar, for every flag and alias of its own
app.go (the 4.8.4 copy in tests/fixtures): one dash or two, the value as the next argument
or after `=`, a switch bare or given a Go boolean, no name taken by a prefix, and Go's own
line for a flag it does not define."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from exporter.options import Option, for_command, parse_command_line
from exporter.options.option import Resolution
from tests.cli.test_dcgm_flags import NEEDS, SIM, BareExporter, option_of, reader_of, valid_text
from tests.cli.upstream_app import APP_GO, Upstream, upstream_flags
from tests.conftest import ROOT

UPSTREAM = upstream_flags()
SPELLINGS = [(u, s) for u in UPSTREAM for s in u.flags]
"""Every flag and alias app.go declares, each with its flag."""
GO_TRUE = ("1", "t", "T", "TRUE", "true", "True")
GO_FALSE = ("0", "f", "F", "FALSE", "false", "False")
"""strconv.ParseBool's texts, as Go's documentation lists them."""


def _resolved(argv: list[str], option: Option[object]) -> tuple[object, str | None]:
    setting = parse_command_line("serve", argv, {}).setting(option)
    return setting.value, setting.source


def test_the_app_does_not_combine_short_options() -> None:
    """Without urfave's UseShortOptionHandling `-debug` is one flag, never `-d ebug`."""
    assert "UseShortOptionHandling" not in APP_GO.read_text(encoding="utf-8")


@pytest.mark.parametrize(("upstream", "spelling"), SPELLINGS,
                         ids=[s for _, s in SPELLINGS])
def test_every_spelling_in_every_form(upstream: Upstream, spelling: str) -> None:
    option = option_of(spelling)
    value, reported = reader_of(option, spelling)
    needs, _ = NEEDS.get(upstream.flags[0], ([], {}))
    name = spelling.lstrip("-")
    if value.action == "switch":
        on, source = _resolved([spelling, *needs], option)
        off = _resolved([*needs], option)[0]
        assert source == reported, spelling
        forms = {f"-{name}": on, f"--{name}": on}
        forms |= {f"-{name}={t}": on for t in GO_TRUE}
        forms |= {f"--{name}={t}": off for t in GO_FALSE}
        assert on != off, spelling
        for form, expected in forms.items():
            assert _resolved([form, *needs], option) == (expected, reported), form
        return
    text = valid_text(value, upstream)
    expected = _resolved([spelling, text, *needs], option)
    assert expected[1] == reported, spelling
    spelled: list[list[str]] = [[f"-{name}", text], [f"--{name}", text], [f"-{name}={text}"],
                               [f"--{name}={text}"]]
    for argv in spelled:
        assert _resolved([*argv, *needs], option) == expected, argv


def test_a_value_is_the_next_argument_whatever_it_looks_like() -> None:
    option = option_of("--collectors")
    value, source = _resolved(["-collectors", "-k.csv"], option)
    assert (str(value), source) == ("-k.csv", "--collectors")


@pytest.mark.parametrize("argv", [["-debug"], ["--debug"], ["-debug=true"]])
def test_debug_is_the_debug_flag(argv: list[str]) -> None:
    settings = parse_command_line("serve", argv, {})
    assert [s.source for s in settings.changed()] == ["--debug"], argv


def test_a_short_alias_with_two_dashes_is_that_alias_not_a_prefix() -> None:
    """`--f 1` is dcgm-exporter's `-f` (the collectors file), never `--fake-gpus`."""
    settings = parse_command_line("serve", ["--f", "1"], {})
    assert [(s.option.name, s.text) for s in settings.changed()] == [("collectors", "1")]


def _refusal(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit) as stopped:
        parse_command_line("serve", argv, {})
    assert stopped.value.code == 2, argv
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    return err


def prefixes() -> list[str]:
    """For each long name of app.go, its longest proper prefix that names no flag."""
    names = {s.lstrip("-") for _, s in SPELLINGS}
    found = []
    for u in UPSTREAM:
        name = u.flags[0][2:]
        cut = next((name[:n] for n in range(len(name) - 1, 0, -1) if name[:n] not in names),
                   None)
        if cut is not None:
            found.append(cut)
    return found


@pytest.mark.parametrize("prefix", prefixes())
def test_no_flag_is_taken_by_a_prefix(prefix: str,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    for form in (f"-{prefix}", f"--{prefix}"):
        err = _refusal([form, "1"], capsys)
        assert err == f"gpu-exporter serve: flag provided but not defined: -{prefix}\n", form


@pytest.mark.parametrize(("argv", "line"), [
    (["-x-y"], "flag provided but not defined: -x-y"),
    (["--fake", "1"], "flag provided but not defined: -fake"),
    (["-c", "5000", "--nope=1"], "flag provided but not defined: -nope"),
    (["---collectors", "x.csv"], "bad flag syntax: ---collectors"),
    (["-=x"], "bad flag syntax: -=x"),
    (["-collectors"], "flag needs an argument: -collectors"),
    (["-k=yes"], 'invalid boolean value "yes" for -k: parse error'),
])
def test_go_refuses_with_its_own_line(argv: list[str], line: str,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    assert _refusal(argv, capsys) == f"gpu-exporter serve: {line}\n"


@pytest.mark.parametrize(("argv", "left"), [(["-c", "5000", "--", "-k"], "-k"),
                                            (["-c", "5000", "extra", "-k"], "extra -k")])
def test_flags_end_at_a_double_dash_or_the_first_argument(
        argv: list[str], left: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert _refusal(argv, capsys) == (
        f"gpu-exporter serve: unexpected argument after the flags: {left}\n")


@pytest.mark.parametrize("argv", [["--sim.profile=l4-1", "-web.enable-openmetrics"],
                                  ["-sim.profile", "l4-1", "--web.enable-openmetrics=true"]])
def test_our_own_serve_flags_take_the_same_grammar(argv: list[str]) -> None:
    settings = parse_command_line("serve", argv, {})
    assert {s.source: s.text for s in settings.changed()} == {
        "--sim.profile": "l4-1", "--web.enable-openmetrics": "on"
        if argv[1].endswith("openmetrics") else "true"}


def test_doctor_takes_go_grammar_too() -> None:
    settings: Resolution = parse_command_line("doctor", ["-m=none", "-scope", "pod"], {})
    assert [(s.source, s.text) for s in settings.changed()] == [("--scope", "pod"),
                                                                ("--configmap-data", "none")]


@pytest.mark.parametrize("help_flag", ["-h", "-help", "--help"])
def test_go_help_names(help_flag: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stopped:
        parse_command_line("serve", [help_flag], {})
    assert stopped.value.code == 0
    assert "--collectors" in capsys.readouterr().out


@pytest.mark.parametrize("version_flag", ["-v", "--v", "-version", "--version"])
def test_urfaves_version_flag(version_flag: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stopped:
        parse_command_line("serve", ["-c", "5000", version_flag], {})
    assert stopped.value.code == 0
    assert re.fullmatch(r"gpu-exporter version \d+\.\d+\.\d+\S*\n", capsys.readouterr().out)


def test_every_serve_flag_name_is_one_flag() -> None:
    """Go's grammar makes `-x` and `--x` one name: no two serve options may share one."""
    names = [f.lstrip("-") for o in for_command("serve") for f in o.all_flags]
    assert len(names) == len(set(names))


def test_the_process_names_an_unknown_flag_in_one_line_and_fails() -> None:
    done = subprocess.run([sys.executable, "-m", "exporter", "-address", "127.0.0.1:0",
                           "-bogus"], cwd=ROOT, capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.returncode != 0
    assert done.stderr == "gpu-exporter serve: flag provided but not defined: -bogus\n"


def test_a_process_started_with_one_dash_flags(tmp_path: Path) -> None:
    csv = tmp_path / "counters.csv"
    csv.write_text("DCGM_FI_DEV_GPU_TEMP, gauge, GPU temperature (in C).\n")
    proc = BareExporter(["-collectors", str(csv), "-c=5000", "-debug", "-k=false"], SIM)
    try:
        proc.wait_ready()
        text = proc.metrics()
        assert 'DCGM_FI_DEV_GPU_TEMP{gpu="0",UUID="GPU-' in text
        assert "DCGM_FI_DEV_POWER_USAGE" not in text
        assert "gpu_exporter_collect_interval_seconds 5\n" in text
        assert " DEBUG " in proc.output()
    finally:
        proc.close()

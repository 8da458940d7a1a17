"""The command and the library call build a report the one same way
(`exporter.report.request`): the same defaults, the table's, and each bad value refused with
the same message, naming the option as each caller writes it (the flag or its variable, the
keyword). Every refusal here happens before any query: the server address answers nothing."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import cast

import pytest

from exporter.options import ConfigError, Option, parse_command_line
from exporter.options import report_table as opt
from exporter.report import ReportOptions, cli, usage_report
from exporter.report.request import KEYWORD_OPTIONS, build, from_keywords

NOWHERE = "http://127.0.0.1:9"
"""The discard port: a query sent there would fail, so a refusal cannot come from one."""
NOW = 1_746_144_000.0

FLAGS = {o.name: o.flag or o.name for o in opt.REPORT_OPTIONS}
KEYWORDS = {o.name: o.name for o in opt.REPORT_OPTIONS} | {opt.PROMETHEUS.name: "prometheus"}


def parse_refusal(option: Option[object], text: str) -> str:
    """The option's own parser's message for `text`, with the option's name as `{name}`."""
    with pytest.raises(ConfigError) as refused:
        option.value.parse(text, "\0")
    return str(refused.value).replace("\0", "{" + option.name + "}")


@dataclass(frozen=True)
class Bad:
    what: str
    argv: tuple[str, ...]
    keywords: dict[str, object]
    message: str
    """Over option names: `{idle_below}` is `--idle-below` or `idle_below`."""
    url: str = NOWHERE


CASES = [
    Bad("the end before the start", ("--start", "2025-05-02", "--end", "2025-05-01"),
        {"start": "2025-05-02", "end": "2025-05-01"}, "{start} must come before {end}"),
    Bad("idle below zero", ("--idle-below", "0"), {"idle_below": 0},
        "{idle_below} 0: expected a percentage above 0, up to 100"),
    Bad("idle above a hundred", ("--idle-below", "150"), {"idle_below": 150.0},
        "{idle_below} 150: expected a percentage above 0, up to 100"),
    Bad("a negative top", ("--top", "-1"), {"top": -1}, "{top} must not be negative"),
    Bad("a top that is no integer", ("--top", "2.5"), {"top": 2.5},
        parse_refusal(opt.TOP, "2.5")),
    Bad("an empty chunk", ("--chunk", "0s"), {"max_chunk": "0s"},
        parse_refusal(opt.MAX_CHUNK, "0s")),
    Bad("a range that is no duration", ("--last", "fortnight"), {"last": "fortnight"},
        parse_refusal(opt.LAST, "fortnight")),
    Bad("a timeout without a unit", ("--timeout", "30"), {"timeout": 30},
        parse_refusal(opt.TIMEOUT, "30")),
    Bad("a start that is no time", ("--start", "yesterday"), {"start": "yesterday"},
        parse_refusal(opt.START, "yesterday")),
    Bad("an unknown grouping", ("--group-by", "team"), {"group_by": "team"},
        parse_refusal(opt.GROUP_BY, "team")),
    Bad("chart steps too many", ("--last", "30d", "--step", "1s"),
        {"last": "30d", "step": "1s"},
        "{step} 1s cuts the 30d range into 2,592,000 windows, more than 100,000: make {step} "
        "longer or the range shorter"),
    Bad("idle windows too many", ("--last", "30d", "--idle-window", "10s"),
        {"last": "30d", "idle_window": "10s"},
        "{idle_window} 10s cuts the 30d range into 259,200 windows, more than 100,000: make "
        "{idle_window} longer or the range shorter"),
    Bad("a negative price", ("--price", "-1"), {"price": -1.0},
        "{price} -1: expected zero or more"),
    Bad("a negative grid intensity", ("--grid-intensity", "-5"), {"grid_intensity": -5},
        "{grid_intensity} -5: expected zero or more"),
    Bad("a price file that is not there", ("--price-file", "/nonexistent/prices.yaml"),
        {"price_file": Path("/nonexistent/prices.yaml")},
        "{price_file} /nonexistent/prices.yaml: cannot read: No such file or directory"),
    Bad("a server that is no http URL", (), {}, "{prometheus_url} 'ftp://x': expected an "
        "http:// or https:// URL", url="ftp://x"),
    Bad("a header without a colon", ("--header", "no-colon"), {"headers": ["no-colon"]},
        "{headers} 'no-colon': expected 'NAME: VALUE'"),
    Bad("a key without its certificate", ("--key-file", "k.pem"), {"key_file": "k.pem"},
        "{key_file} needs {cert_file}"),
    Bad("a password without a user", ("--basic-auth-password", "p"),
        {"basic_auth_password": "p"}, "a basic authentication password needs {basic_auth_user}"),
    Bad("a token file that cannot be read", ("--bearer-token-file", "/nonexistent/token"),
        {"bearer_token_file": "/nonexistent/token"},
        "{bearer_token_file} /nonexistent/token: No such file or directory"),
    Bad("a token and a user", ("--bearer-token", "t", "--basic-auth-user", "u"),
        {"bearer_token": "t", "basic_auth_user": "u"},
        "give a bearer token or basic authentication, not both"),
]


@pytest.fixture(autouse=True)
def _no_report_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    for option in opt.REPORT_OPTIONS:
        for name in option.all_env:
            monkeypatch.delenv(name, raising=False)


def _call(url: str, keywords: dict[str, object]) -> None:
    usage_report(url, **cast(ReportOptions, keywords))


@pytest.mark.parametrize("bad", CASES, ids=[c.what for c in CASES])
def test_each_bad_value_is_refused_alike_by_the_command_and_the_call(
        bad: Bad, capsys: pytest.CaptureFixture[str]) -> None:
    code = cli.main(["--prometheus", bad.url, "--progress", "off", *bad.argv])
    assert code == 2
    assert capsys.readouterr().err == f"gpu-exporter report: {bad.message.format(**FLAGS)}\n"
    with pytest.raises(ConfigError) as refused:
        _call(bad.url, bad.keywords)
    assert str(refused.value) == bad.message.format(**KEYWORDS)


def test_a_value_from_the_environment_is_named_by_its_variable(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("GPU_EXPORTER_PROMETHEUS_URL", "ftp://x")
    assert cli.main(["--progress", "off"]) == 2
    assert capsys.readouterr().err == ("gpu-exporter report: $GPU_EXPORTER_PROMETHEUS_URL "
                                       "'ftp://x': expected an http:// or https:// URL\n")


def test_a_closed_choice_is_refused_by_both() -> None:
    # argparse checks a flag's choices itself (and lists them in --help); the call gets the
    # table's message.
    with pytest.raises(SystemExit) as exited:
        cli.main(["--prometheus", NOWHERE, "--source", "cooked"])
    assert exited.value.code == 2
    with pytest.raises(ConfigError, match=r"^source: 'cooked'; expected auto, rules or raw$"):
        _call(NOWHERE, {"source": "cooked"})


def test_the_call_refuses_a_keyword_the_command_has_no_option_for() -> None:
    with pytest.raises(ConfigError, match=r"^idle_bellow: not an option of the report "
                                          r"\(expected one of .*idle_below.*\)$"):
        _call(NOWHERE, {"idle_bellow": 3})
    with pytest.raises(ConfigError, match=r"^format: not an option"):
        _call(NOWHERE, {"format": "csv"})  # the call returns frames, it writes no format


def test_the_call_takes_every_option_of_the_command_but_its_output_ones() -> None:
    assert ReportOptions.__optional_keys__ == {o.name for o in KEYWORD_OPTIONS}
    assert {o.name for o in opt.REPORT_OPTIONS} - {o.name for o in KEYWORD_OPTIONS} == {
        "prometheus_url", "format", "output", "progress"}
    # As docs/report.md states the keywords' names: the flag's, but for two.
    renamed = {o.flag: o.name for o in KEYWORD_OPTIONS
               if o.name != (o.flag or "").removeprefix("--").replace("-", "_")}
    assert renamed == {"--chunk": "max_chunk", "--header": "headers"}


def test_the_defaults_are_the_tables_for_both() -> None:
    by_flags = build(parse_command_line("report", ["--prometheus", NOWHERE], {}), NOW, "flags")
    by_keywords = build(from_keywords(NOWHERE, {}), NOW, "keywords")
    assert by_flags == by_keywords
    _, request = by_keywords
    assert (request.start, request.end) == (NOW - opt.LAST.default, NOW)
    assert (request.resolution_s, request.idle_below_pct, request.idle_window_s,
            request.top, request.group_by, request.source) == (
        opt.RESOLUTION.default, opt.IDLE_BELOW.default, opt.IDLE_WINDOW.default,
        opt.TOP.default, opt.GROUP_BY.default, opt.SOURCE.default)
    assert request.max_chunk_s is None  # not given: the source decides


def test_the_same_options_give_the_same_report_either_way() -> None:
    argv = ["--prometheus", NOWHERE, "--start", "2025-05-01", "--end", "1746144000",
            "--group-by", "label:team", "--step", "1h", "--resolution", "30s", "--source",
            "raw", "--chunk", "2d", "--idle-below", "2.5", "--idle-window", "15m", "--top",
            "3", "--price", "1.5", "--grid-intensity", "300", "--header", "X-Scope-OrgID: a",
            "--bearer-token", "t", "--timeout", "30s", "--insecure-skip-verify"]
    keywords: dict[str, object] = {
        "start": datetime(2025, 5, 1, tzinfo=UTC), "end": 1746144000, "group_by": "label:team",
        "step": "1h", "resolution": "30s", "source": "raw", "max_chunk": "2d",
        "idle_below": 2.5, "idle_window": "15m", "top": 3, "price": 1.5,
        "grid_intensity": 300, "headers": {"X-Scope-OrgID": "a"}, "bearer_token": "t",
        "timeout": "30s", "insecure_skip_verify": True}
    by_flags = build(parse_command_line("report", argv, {}), NOW, "flags")
    by_keywords = build(from_keywords(NOWHERE, keywords), NOW, "keywords")
    assert by_flags == by_keywords
    connection, request = by_keywords
    assert request.max_chunk_s == 2 * 86400
    assert ("X-Scope-OrgID", "a") in connection.headers
    assert connection.insecure_skip_verify

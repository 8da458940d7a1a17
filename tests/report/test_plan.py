"""How a report cuts its range into windows and queries, names its groups and reads its
options; and that docs/report.md lists the options the table declares."""

from __future__ import annotations

import pytest

from exporter.options import ConfigError
from exporter.options.markdown import BEGIN, END, markdown_table
from exporter.options.report_table import parse_instant, parse_span
from exporter.report.query_plan import (
    MAX_POINTS,
    aligned_windows,
    auto_step,
    calls,
    grouping,
    multiple_of,
    windows,
)
from tests.support.paths import ROOT

DAY = 86400.0


def test_windows_tile_the_range_with_a_shorter_last_one() -> None:
    parts = windows(1000.0, 1000.0 + 2.5 * DAY, DAY)
    assert [w.length_s for w in parts] == [DAY, DAY, DAY / 2]
    assert [w.end for w in parts] == [1000 + DAY, 1000 + 2 * DAY, 1000 + 2.5 * DAY]


def test_calls_cover_every_window_once_within_the_point_limit() -> None:
    step = 60.0
    parts = windows(0.0, 365 * DAY + 30, step)
    planned = calls(parts, max_chunk_s=10 * 365 * DAY)
    covered: list[float] = []
    for call in planned:
        points = round((call.last - call.first) / call.step_s) + 1
        assert points <= MAX_POINTS
        covered += [call.first + i * call.step_s for i in range(points)]
    assert covered == pytest.approx([w.end for w in parts])
    assert planned[-1].instant
    assert planned[-1].step_s == 30


def test_calls_respect_the_chunk_length() -> None:
    planned = calls(windows(0.0, 30 * DAY, 3600.0), max_chunk_s=DAY)
    assert len(planned) == 30
    assert all(c.last - c.first == 23 * 3600 for c in planned)


def test_idle_windows_lie_inside_the_range_aligned_to_their_length() -> None:
    ends = aligned_windows(1000.0, 10_000.0, 1800.0)
    assert ends == [3600.0, 5400.0, 7200.0, 9000.0]
    assert ends[0] - 1800 >= 1000
    assert ends[-1] <= 10_000
    assert aligned_windows(0.0, 1000.0, 1800.0) == []


def test_steps() -> None:
    assert auto_step(30 * DAY, 60) == DAY
    assert auto_step(6 * 3600, 60) == 3600
    assert auto_step(3600, 60) == 120
    assert auto_step(60, 60) == 60
    assert multiple_of(90, 60) == 120
    assert multiple_of(120, 60) == 120


def test_groups() -> None:
    node = grouping("node")
    assert node.key({"Hostname": "a", "instance": "1.2.3.4:9400"}) == "a"
    assert node.key({"instance": "1.2.3.4:9400"}) == "1.2.3.4:9400"
    assert grouping("pod").key({"namespace": "ns", "pod": "p"}) == "ns/p"
    team = grouping("label:example.com/team")
    assert team.labels == ("label_example_com_team", "example_com_team")
    assert team.key({"example_com_team": "ml"}) == "ml"
    # As the exporter writes them: no extra `_` after our `label_` prefix.
    assert grouping("label:3scale.net/tier").labels == ("label_3scale_net_tier",
                                                         "_3scale_net_tier")


def test_inference_groups_read_the_preset_labels() -> None:
    role = grouping("role")
    assert role.key({"llm_d_ai_role": "decode"}) == "decode"
    assert role.key({"nvidia_com_dynamo_sub_component_type": "prefill"}) == "prefill"
    assert role.key({"nvidia_com_dynamo_component_type": "prefill"}) == "prefill"
    # A Dynamo component type that is not a phase (frontend, worker) names no role.
    assert role.key({"nvidia_com_dynamo_component_type": "worker"}) == ""
    assert grouping("queue").key({"kai_scheduler_queue": "chat"}) == "chat"
    model = grouping("served-model")
    assert model.key({"llm_d_ai_model": "qwen3-8b",
                      "nvidia_com_dynamo_base_model": "other"}) == "qwen3-8b"
    assert grouping("model").labels == ("modelName",)


def test_durations_and_times() -> None:
    assert parse_span("90d", "x") == 90 * DAY
    assert parse_span("1h30m", "x") == 5400
    assert parse_span("2w", "x") == 14 * DAY
    for bad in ("", "1x", "h", "0s", "1h 30m"):
        with pytest.raises(ConfigError):
            parse_span(bad, "--last")
    assert parse_instant("2025-05-01T00:00:00Z", "x") == 1746057600
    assert parse_instant("2025-05-01", "x") == 1746057600
    assert parse_instant("2025-05-01T02:00:00+02:00", "x") == 1746057600
    assert parse_instant("1746057600.5", "x") == 1746057600.5
    with pytest.raises(ConfigError, match="--start: 'yesterday' is not a time"):
        parse_instant("yesterday", "--start")


def test_docs_list_every_report_option() -> None:
    text = (ROOT / "docs" / "report.md").read_text(encoding="utf-8")
    block = text[text.index(BEGIN) + len(BEGIN):text.index(END)].lstrip("\n")
    assert block == markdown_table("report"), (
        "docs/report.md is out of date: run `python -m exporter.options --command report "
        "--write-readme docs/report.md`")

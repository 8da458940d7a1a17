"""The report against a Prometheus holding a backfilled history (tests/report/history.py): a
counter reset inside the range, utilisation as the activity source, prices and the library
call; and its failures: an unreachable server, an HTTP 422 from the server, an empty range -
each a clear message, exit status 1 and no file written."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from exporter.report import usage
from tests.report.history import Gpu, History, Tenancy, backfill
from tests.support.exporter_process import free_port
from tests.support.paths import ROOT
from tests.support.prometheus import PrometheusProcess
from tests.support.wait import wait_until

pytestmark = pytest.mark.e2e

INTERVAL_S = 30.0
HOUR = 3600.0
START = 1_760_000_400.0
"""2025-10-09T08:20:00Z: an hour boundary long enough ago to be backfilled."""
END = START + 2 * HOUR
TRAINER = Gpu("node-a", 0)
NOTEBOOK = Gpu("node-a", 1)
HISTORY = History(
    START - HOUR, END + HOUR, INTERVAL_S, (TRAINER, NOTEBOOK),
    (Tenancy(TRAINER, "ml", "trainer", START, END, 0.6),
     Tenancy(NOTEBOOK, "research", "notebook", START + HOUR, END, 0.0)),
    resets=frozenset({(TRAINER.uuid, START + HOUR + 10 * INTERVAL_S)}))
LOOKBACK = f"--query.lookback-delta={int(INTERVAL_S * 1.5)}s"


@dataclass
class Backfilled:
    prometheus: PrometheusProcess
    tsdb: Path


@pytest.fixture(scope="module")
def backfilled(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Backfilled]:
    tmp = tmp_path_factory.mktemp("backfilled")
    tsdb = backfill(HISTORY, tmp)
    prometheus = PrometheusProcess(tmp / "prometheus", {"global": {}}, tsdb=tsdb,
                                   args=(LOOKBACK,)).wait_ready()
    try:
        wait_until(lambda: prometheus.query("count(DCGM_FI_DEV_FB_USED)", END), 60.0, 0.2,
                   what="the blocks loaded")
        yield Backfilled(prometheus, tsdb)
    finally:
        prometheus.stop()


def run_report(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "exporter", "report", "--progress", "off",
                           *args], cwd=ROOT, capture_output=True, text=True, timeout=120)


def report_json(url: str, *args: str) -> dict[str, Any]:
    result = run_report("--prometheus", url, "--start", f"{START}", "--end", f"{END}",
                        "--resolution", "1m", "--format", "json", *args)
    assert result.returncode == 0, result.stderr
    document: dict[str, Any] = json.loads(result.stdout)
    return document


def _groups(document: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {row["group"]: row for row in document["groups"]}


def test_energy_across_a_counter_reset(backfilled: Backfilled) -> None:
    """The window holding the reset counts from the counter's first step after it: of the
    report's 4-minute windows, 64-68 minutes in holds the reset (just after 65), so the two
    minutes up to the step at 66 are lost, and nothing else."""
    assert backfilled.prometheus.query(
        f'resets(DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{{UUID="{TRAINER.uuid}"}}[2h])',
        END)[0]["value"][1] == "1", "the history has no reset in the range"
    document = report_json(backfilled.prometheus.url)
    assert document["step"] == 240
    groups = _groups(document)
    trainer = HISTORY.tenancies[0]
    assert groups["ml"]["energy_kwh"] == pytest.approx(
        trainer.power_w * (2 * HOUR - 120) / 3.6e6, rel=0.01)
    assert groups["ml"]["allocated_gpu_hours"] == pytest.approx(2.0, rel=0.02)


def test_utilisation_is_the_activity_source_without_profiling(backfilled: Backfilled) -> None:
    groups = _groups(report_json(backfilled.prometheus.url, "--idle-window", "30m"))
    ml, research = groups["ml"], groups["research"]
    assert ml["activity_source"] == research["activity_source"] == "utilisation"
    assert ml["active_gpu_hours"] == pytest.approx(0.6 * 2.0, rel=0.02)
    assert research["active_gpu_hours"] == pytest.approx(0.0, abs=1e-9)
    # The notebook held its GPU idle for an hour: two whole 30-minute windows.
    assert research["idle_gpu_hours"] == pytest.approx(1.0, rel=0.05)
    assert ml["idle_gpu_hours"] == 0.0


def test_library_frame_and_prices(backfilled: Backfilled, tmp_path: Path) -> None:
    prices = tmp_path / "prices.yaml"
    prices.write_text('"NVIDIA H100 80GB HBM3": 4.0\n"*": 1.0\n')
    frame = usage(backfilled.prometheus.url, start=START, end=END, resolution="1m",
                  price_file=prices, grid_intensity=500.0)
    assert list(frame.index) == ["ml", "research"]
    rows = frame.to_dict("index")
    assert rows["ml"]["cost"] == pytest.approx(4.0 * 2.0, rel=0.02)
    assert rows["research"]["cost"] == pytest.approx(4.0 * 1.0, rel=0.02)
    assert rows["ml"]["co2_kg"] == pytest.approx(rows["ml"]["energy_kwh"] * 0.5)
    assert frame.attrs["source"] == "raw series (resolution 1m)"


def test_unreachable_server(tmp_path: Path) -> None:
    out = tmp_path / "report.csv"
    result = run_report("--prometheus", f"http://127.0.0.1:{free_port()}", "--last", "1h",
                        "--format", "csv", "-o", str(out))
    assert result.returncode == 1
    assert "cannot reach Prometheus at http://127.0.0.1:" in result.stderr
    assert "Traceback" not in result.stderr
    assert not out.exists()
    assert list(tmp_path.iterdir()) == []


def test_http_422_from_the_server(backfilled: Backfilled, tmp_path: Path) -> None:
    # A second server over a copy of the same blocks, allowed to load only a few samples:
    # it answers the report's first query with 422 (execution error).
    copy = tmp_path / "tsdb"
    shutil.copytree(backfilled.tsdb, copy, ignore=shutil.ignore_patterns("lock", "wal*",
                                                                         "queries.active"))
    tight = PrometheusProcess(tmp_path / "prometheus", {"global": {}}, tsdb=copy,
                              args=(LOOKBACK, "--query.max-samples=10")).wait_ready()
    try:
        out = tmp_path / "out" / "report.html"
        out.parent.mkdir()
        result = run_report("--prometheus", tight.url, "--start", f"{START}", "--end",
                            f"{END}", "--format", "html", "-o", str(out))
    finally:
        tight.stop()
    assert result.returncode == 1, result.stderr
    assert f"{tight.url} rejected a query (HTTP 422 execution)" in result.stderr
    assert "too many samples" in result.stderr
    assert "query: " in result.stderr
    assert list(out.parent.iterdir()) == []


def test_empty_range(backfilled: Backfilled, tmp_path: Path) -> None:
    out = tmp_path / "report.json"
    result = run_report("--prometheus", backfilled.prometheus.url, "--start",
                        f"{START - 30 * 86400}", "--end", f"{START - 29 * 86400}",
                        "--format", "json", "-o", str(out))
    assert result.returncode == 1
    assert "no GPU was held by any pod between 2025-09-09" in result.stderr
    assert not out.exists()


def test_bad_options_exit_2() -> None:
    for args, message in (
            (["--last", "1h"], "--prometheus URL is required"),
            (["--prometheus", "ftp://x"], "expected an http:// or https:// URL"),
            (["--prometheus", "http://x", "--group-by", "team"], "label:<pod label key>"),
            (["--prometheus", "http://x", "--last", "fortnight"], "is not a duration"),
            (["--prometheus", "http://x", "--start", "2025-05-02", "--end", "2025-05-01"],
             "--start must come before --end")):
        result = run_report(*args)
        assert result.returncode == 2, (args, result.stderr)
        assert message in result.stderr, (args, result.stderr)

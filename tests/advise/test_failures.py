"""Bad input to `gpu-exporter advise`: an empty window, a GPU model the profile table does not
know, series without pod labels, a server that refuses, bad options. Each is one line on
standard error and a non-zero exit, and the output file is neither created nor touched."""

from __future__ import annotations

import http.server
import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.report.history import Series, backfill_file, write_openmetrics
from tests.support.prometheus import PrometheusProcess
from tests.support.wait import wait_until

ROOT = Path(__file__).resolve().parents[2]
HOUR = 3600.0
B200_START = 1_760_000_400.0
UNLABELLED_START = B200_START + 4 * HOUR


def _series() -> Iterator[Series]:
    times = [B200_START + 60 * i for i in range(120)]
    held = (("gpu", "0"), ("UUID", "GPU-b200"), ("modelName", "NVIDIA B200"),
            ("Hostname", "b200-a"), ("namespace", "ml"), ("pod", "trainer"))
    unlabelled_times = [UNLABELLED_START + 60 * i for i in range(120)]
    bare = (("gpu", "0"), ("UUID", "GPU-h100"), ("modelName", "NVIDIA H100 80GB HBM3"),
            ("hostname", "h100-a"))
    yield Series("DCGM_FI_DEV_FB_USED", held, times, [20_000.0] * len(times))
    yield Series("DCGM_FI_DEV_FB_USED", bare, unlabelled_times, [1_000.0] * len(times))
    yield Series("DCGM_FI_PROF_GR_ENGINE_ACTIVE", held, times, [0.2] * len(times))


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrometheusProcess]:
    tmp = tmp_path_factory.mktemp("advise-failures")
    source = tmp / "history.om"
    with source.open("w") as out:
        write_openmetrics(_series(), out)
        out.write("# EOF\n")
    backfill_file(source, tmp / "tsdb", 24)
    server = PrometheusProcess(tmp / "prometheus", {"global": {}}, tsdb=tmp / "tsdb",
                               args=("--query.lookback-delta=90s",)).wait_ready()
    try:
        wait_until(lambda: server.query("count(DCGM_FI_DEV_FB_USED)", B200_START + HOUR),
                   60.0, 0.2, what="the blocks loaded")
        yield server
    finally:
        server.stop()


def _advise(url: str, start: float, out: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "exporter", "advise", "--progress", "off", "--prometheus", url,
         "--start", f"{start}", "--end", f"{start + 2 * HOUR}", "--format", "json",
         "-o", str(out), *args],
        cwd=ROOT, capture_output=True, text=True, timeout=120)


def _one_line_error(result: subprocess.CompletedProcess[str], code: int = 1) -> str:
    assert result.returncode == code, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


def test_an_empty_window(prometheus: PrometheusProcess, tmp_path: Path) -> None:
    out = tmp_path / "advice.json"
    line = _one_line_error(_advise(prometheus.url, B200_START - 30 * 86400, out))
    assert "no DCGM_FI_DEV_FB_USED samples between" in line
    assert "an empty window" in line
    assert not out.exists()


def test_a_model_not_in_the_table(prometheus: PrometheusProcess, tmp_path: Path) -> None:
    out = tmp_path / "advice.json"
    out.write_text("the previous advice\n")
    line = _one_line_error(_advise(prometheus.url, B200_START, out))
    assert "GPU model 'NVIDIA B200' (1 holder) is not in the MIG profile table" in line
    assert "--skip-unknown-models" in line
    assert out.read_text() == "the previous advice\n"
    assert [p.name for p in tmp_path.iterdir()] == ["advice.json"]  # no temporary left
    # Asked to, it says so for that pool and advises nothing there.
    result = _advise(prometheus.url, B200_START, out, "--skip-unknown-models")
    assert result.returncode == 0, result.stderr
    document = json.loads(out.read_text())
    assert document["not_advised"] == [{
        "namespace": "ml", "pod": "trainer", "node": "b200-a", "gpu_model": "NVIDIA B200",
        "now": "whole", "reason": "GPU model 'NVIDIA B200' is not in the MIG profile table"}]
    assert document["pools"][0]["known"] is False


def test_series_without_pod_labels(prometheus: PrometheusProcess, tmp_path: Path) -> None:
    out = tmp_path / "advice.json"
    line = _one_line_error(_advise(prometheus.url, UNLABELLED_START, out))
    assert "DCGM_FI_DEV_FB_USED has no series with pod labels (namespace, pod)" in line
    assert not out.exists()


class _Refusing(http.server.BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        body = json.dumps({"status": "error", "errorType": "unauthorized",
                           "error": "authentication required"}).encode()
        self.send_response(401)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_: object) -> None:
        return


def test_a_server_that_refuses(tmp_path: Path) -> None:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Refusing)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        out = tmp_path / "advice.json"
        url = f"http://127.0.0.1:{server.server_address[1]}"
        line = _one_line_error(_advise(url, B200_START, out))
        assert "refused the credentials (HTTP 401)" in line
        assert not out.exists()
    finally:
        server.shutdown()
        server.server_close()


def test_nothing_listening(tmp_path: Path) -> None:
    out = tmp_path / "advice.json"
    line = _one_line_error(_advise("http://127.0.0.1:9", B200_START, out))
    assert "cannot reach Prometheus at http://127.0.0.1:9" in line
    assert not out.exists()


@pytest.mark.parametrize(("args", "says"), [
    (("--memory-quantile", "1.5"), "--memory-quantile 1.5: expected a quantile above 0, up to 1"),
    (("--max-replicas", "0"), "--max-replicas must be at least 1"),
    (("--step", "3h"), "--step 3h: the range 2h is shorter than --step"),
])
def test_bad_options(tmp_path: Path, args: tuple[str, ...], says: str) -> None:
    out = tmp_path / "advice.json"
    result = _advise("http://127.0.0.1:9", B200_START, out, *args)
    assert says in result.stderr
    assert result.returncode == 2
    assert len(result.stderr.strip().splitlines()) == 1
    assert not out.exists()

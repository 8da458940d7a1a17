"""`report`, `advise` and `generate` end the same way: exit status 2 and one line for a usage
error (nothing tried), 1 and one line for a failure (the server unreachable, the output not
written), as `exporter.options.exit_status` maps them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from exporter.options.exit_status import stopped
from exporter.report.cli import write_whole
from tests.support.exporter_process import free_port
from tests.support.paths import ROOT


def _tool(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "exporter", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)


def _one_line(result: subprocess.CompletedProcess[str], status: int, says: str) -> None:
    assert result.returncode == status, (result.returncode, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert says in lines[0], lines[0]


NOWHERE = "http://127.0.0.1:{port}"
RANGE = ("--start", "2025-10-09T08:00:00Z", "--end", "2025-10-09T10:00:00Z")


@pytest.mark.parametrize(("args", "says"), [
    (("report", "--prometheus", "ftp://x"), "expected an http:// or https:// URL"),
    (("advise", "--prometheus", "http://x", "--max-replicas", "0", *RANGE),
     "--max-replicas must be at least 1"),
    (("generate", "keda", "--namespace", "n", "--metric", "util", "--target", "50"),
     "--deployment"),
], ids=["report", "advise", "generate"])
def test_a_usage_error_is_2(args: tuple[str, ...], says: str) -> None:
    _one_line(_tool(*args, *(("--progress", "off") if args[0] != "generate" else ())), 2, says)


@pytest.mark.parametrize("command", ["report", "advise"])
def test_an_unreachable_server_is_1(command: str, tmp_path: Path) -> None:
    url = NOWHERE.format(port=free_port())
    out = tmp_path / "out.json"
    result = _tool(command, "--progress", "off", "--prometheus", url, *RANGE,
                   "--format", "json", "-o", str(out))
    _one_line(result, 1, f"cannot reach Prometheus at {url}")
    assert not out.exists()


def test_generate_into_an_unwritable_place_is_1(tmp_path: Path) -> None:
    blocking = tmp_path / "a-file"
    blocking.write_text("not a folder\n")
    result = _tool("generate", "dashboards", "--out", str(blocking))
    _one_line(result, 1, f"gpu-exporter generate: error: cannot write {blocking}")


def test_an_output_that_cannot_be_written_is_1(tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    """`report` and `advise` write through `write_whole`; its failure is a failure (1)."""
    target = tmp_path / "missing-folder" / "report.csv"
    with pytest.raises(FileNotFoundError) as raised:
        write_whole(target, "a,b\n")
    assert stopped("report", raised.value) == 1
    line = capsys.readouterr().err.strip()
    assert line.startswith(f"gpu-exporter report: error: cannot write {target.parent}/"), line
    assert line.endswith(": No such file or directory"), line

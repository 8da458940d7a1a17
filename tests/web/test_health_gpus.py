"""`--health-require-gpus`: /health answers 503 with `X-GPU-Collectors: 0` while the
exporter serves no GPU, 200 during a reload, and the header is absent with the option off.
The simulated node serves no GPU under a device filter that selects none (`-d i`: MIG
instances only, on a node without MIG)."""

from __future__ import annotations

import os
import threading
from pathlib import Path

from exporter.fields.csv import default_collectors_path
from tests.support.exporter_process import ExporterProcess, http_get
from tests.support.wait import wait_until

SIM = ["--backend", "sim", "--sim.profile", "l4-1", "-c", "200ms"]


def _health(proc: ExporterProcess) -> tuple[int, dict[str, str], str]:
    status, headers, body = http_get(proc.base + "/health")
    return status, headers, body.decode()


def _started(proc: ExporterProcess) -> None:
    """Until the first poll is served (/health may say 503, so /ready is asked)."""
    def ready() -> bool:
        try:
            return proc.proc.poll() is not None or proc.get("/ready")[0] == 200
        except OSError:  # not listening yet
            return False

    wait_until(ready, 30.0, what="the first poll")
    assert proc.proc.poll() is None, proc.output()


def test_no_gpu_served_is_503_with_the_header(exporter: type[ExporterProcess]) -> None:
    proc = exporter([*SIM, "-d", "i", "--health-require-gpus"])
    _started(proc)
    status, headers, body = _health(proc)
    assert status == 503, body
    assert headers["X-GPU-Collectors"] == "0"
    assert "no GPU collector registered" in body
    assert "DCGM_FI_DEV_GPU_TEMP" not in proc.metrics()  # indeed nothing of a GPU


def test_gpus_served_is_200_with_the_header(exporter: type[ExporterProcess]) -> None:
    proc = exporter([*SIM, "--health-require-gpus"])
    _started(proc)
    status, headers, body = _health(proc)
    assert (status, headers["X-GPU-Collectors"], body) == (200, "1", "ok\n")


def test_without_the_option_health_is_200_without_the_header(
        exporter: type[ExporterProcess]) -> None:
    proc = exporter([*SIM, "-d", "i"])
    _started(proc)
    status, headers, body = _health(proc)
    assert (status, body) == (200, "ok\n")
    assert "X-GPU-Collectors" not in headers


def test_a_reload_in_progress_is_200_even_without_a_gpu(
        exporter: type[ExporterProcess], tmp_path: Path) -> None:
    collectors = tmp_path / "counters.csv"
    csv = default_collectors_path().read_text()
    collectors.write_text(csv)
    proc = exporter([*SIM, "-d", "i", "--health-require-gpus", "-f", str(collectors)])
    _started(proc)
    assert _health(proc)[0] == 503
    # The collectors file becomes a FIFO: the reload it triggers reads it, and waits there
    # until the test writes, so the reload stays in progress as long as the test likes.
    collectors.unlink()
    os.mkfifo(collectors)
    try:
        wait_until(lambda: _health(proc)[0] == 200, 10.0, what="a reload in progress")
        status, headers, _ = _health(proc)
        assert (status, headers["X-GPU-Collectors"]) == (200, "0")
    finally:
        writer = threading.Thread(target=collectors.write_text, args=(csv,), daemon=True)
        writer.start()
        writer.join(10)
    wait_until(lambda: _health(proc)[0] == 503, 10.0, what="the reload done")

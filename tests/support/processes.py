"""Ending the servers the tests start (Prometheus, VictoriaMetrics, vmalert)."""

from __future__ import annotations

import subprocess
from typing import Any


def stop_process(proc: subprocess.Popen[Any], grace_s: float = 15.0) -> None:
    """SIGTERM, then SIGKILL if it has not exited within `grace_s`; waits for it either way."""
    if proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(grace_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()

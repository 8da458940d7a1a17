"""The exporter as a user runs it: `python -m exporter serve ...` in its own process, talked to
over HTTP on a free loopback port."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import urllib.error
import urllib.request
from collections.abc import Sequence

from tests.support.paths import ROOT
from tests.support.wait import wait_until

Response = tuple[int, dict[str, str], bytes]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def http_get(url: str, headers: dict[str, str] | None = None,
             timeout: float = 5.0) -> Response:
    """Status, headers and body; an HTTP error status is returned, not raised."""
    request = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), exc.read()


def answers(url: str) -> bool:
    """Whether `url` answers 200 now (False while nothing listens yet)."""
    try:
        return http_get(url, timeout=1.0)[0] == 200
    except OSError:
        return False


PYTHON_EXPORTER = (sys.executable, "-m", "exporter")
"""How the exporter is started unless a test says otherwise."""


class ExporterProcess:
    """`python -m exporter serve ...` on a free loopback port, stopped by the test.

    `launcher` replaces `python -m exporter` (a wrapper that still ends in the exporter's
    `main`); `stdin=subprocess.PIPE` gives the test a channel into it; `cwd` is where it runs.
    """

    def __init__(self, args: list[str], env: dict[str, str] | None = None, *,
                 launcher: Sequence[str] = PYTHON_EXPORTER, stdin: int | None = None,
                 cwd: str | os.PathLike[str] = ROOT) -> None:
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        full_env = {**os.environ, **(env or {})}
        # A file, not a pipe: nobody reads a pipe while the test runs, and a full one would
        # block the exporter's logging.
        self._log = tempfile.TemporaryFile(mode="w+")  # noqa: SIM115 - closed in close()
        self.proc = subprocess.Popen(
            [*launcher, "serve", "-a", f"127.0.0.1:{self.port}", *args],
            cwd=cwd, env=full_env, stdin=stdin, stdout=self._log, stderr=subprocess.STDOUT,
            text=True,
        )

    def _answers(self, path: str) -> bool:
        if self.proc.poll() is not None:
            raise AssertionError(f"exporter exited {self.proc.returncode}:\n{self.output()}")
        return answers(self.base + path)

    def wait_http(self, timeout: float = 30.0) -> None:
        """Until the server answers /health (NVML may still be down)."""
        wait_until(lambda: self._answers("/health"), timeout, what="exporter answering /health")

    def wait_ready(self, timeout: float = 30.0) -> None:
        """Until /ready says 200: the first poll succeeded."""
        self.wait_http(timeout)
        wait_until(lambda: self._answers("/ready"), timeout, what="exporter ready")

    def get(self, path: str, headers: dict[str, str] | None = None) -> Response:
        return http_get(self.base + path, headers)

    def metrics(self) -> str:
        status, _, body = self.get("/metrics")
        assert status == 200
        return body.decode()

    def output(self) -> str:
        self._log.seek(0)
        return self._log.read()

    def sim_started_at(self) -> float | None:
        """Return the Unix time the simulated node's `--sim.fault` times count from, as the
        exporter logged it at start (to the millisecond), or None when it has not."""
        found = re.search(r"--sim\.fault times count from Unix time (\d+\.\d+)", self.output())
        return float(found.group(1)) if found else None

    def stop(self, timeout: float = 10.0) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode

    def close(self) -> None:
        self.stop()
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        self._log.close()

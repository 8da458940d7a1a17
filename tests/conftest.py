"""Helpers shared by the whole suite: paths, free ports, and a real exporter process."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared"
FIXTURES = SHARED / "fixtures"


def shared_fixture(*parts: str) -> Path:
    """A file under ../shared/fixtures, or a clean skip where the checkout has none."""
    path = FIXTURES.joinpath(*parts)
    if not path.exists():
        pytest.skip(f"{path} is not present in this checkout")
    return path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def http_get(url: str, headers: dict[str, str] | None = None,
             timeout: float = 5.0) -> tuple[int, dict[str, str], bytes]:
    request = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), exc.read()


class ExporterProcess:
    """`python -m exporter serve ...` on a free loopback port, stopped by the test."""

    def __init__(self, args: list[str], env: dict[str, str] | None = None) -> None:
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        full_env = {**os.environ, **(env or {})}
        # A file, not a pipe: nobody reads a pipe while the test runs, and a full one would
        # block the exporter's logging.
        self._log = tempfile.TemporaryFile(mode="w+")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "exporter", "serve", "-a", f"127.0.0.1:{self.port}", *args],
            cwd=ROOT, env=full_env, stdout=self._log, stderr=subprocess.STDOUT, text=True,
        )

    def wait_http(self, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"exporter exited {self.proc.returncode}:\n{self.output()}")
            try:
                status, _, _ = http_get(self.base + "/health", timeout=1.0)
                if status == 200:
                    return
            except OSError:
                pass
            time.sleep(0.05)
        raise AssertionError(f"exporter did not answer within {timeout}s")

    def wait_ready(self, timeout: float = 30.0) -> None:
        self.wait_http(timeout)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.get("/ready")[0] == 200:
                return
            time.sleep(0.05)
        raise AssertionError("exporter did not become ready")

    def get(self, path: str, headers: dict[str, str] | None = None
            ) -> tuple[int, dict[str, str], bytes]:
        return http_get(self.base + path, headers)

    def metrics(self) -> str:
        status, _, body = self.get("/metrics")
        assert status == 200
        return body.decode()

    def output(self) -> str:
        self._log.seek(0)
        return self._log.read()

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
        self._log.close()


@pytest.fixture
def exporter() -> Iterator[type[ExporterProcess]]:
    """Factory: `exporter(args, env)` starts a process that is stopped after the test."""
    started: list[ExporterProcess] = []

    class _Tracked(ExporterProcess):
        def __init__(self, args: list[str], env: dict[str, str] | None = None) -> None:
            super().__init__(args, env)
            started.append(self)

    yield _Tracked
    for proc in started:
        proc.close()

"""VictoriaMetrics (Debian's `victoria-metrics` 1.79) on free loopback ports: the single-node
server, which serves the Prometheus query API, scrapes targets itself
(`-promscrape.config`) and takes Prometheus' remote write; and `vmalert`, which evaluates
recording and alerting rules against it and writes their results back.

Both run with the settings a test needs to see data seconds old: the server answers for the
time asked (`-search.latencyOffset=0s`; by default it answers a query about the last 30 s
for 30 s earlier) and caches nothing. vmalert evaluates three seconds back
(`-datasource.lookback`), after the samples of that time have reached the server; it needs
somewhere to send alerts, which `AlertSink` takes and keeps.
"""

from __future__ import annotations

import json
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import yaml

from tests.support.exporter_process import answers, free_port, http_get
from tests.support.processes import stop_process
from tests.support.prometheus import QueryApi
from tests.support.requirements import require_tool
from tests.support.wait import wait_until

PACKAGE = "victoria-metrics"


class _Process:
    """A server binary writing its log under `tmp`, stopped by the test."""

    def __init__(self, tmp: Path, name: str, argv: list[str]) -> None:
        self.log_path = tmp / f"{name}.log"
        self._log = self.log_path.open("w")
        self.name = name
        self.proc = subprocess.Popen(argv, stdout=self._log, stderr=subprocess.STDOUT,
                                     text=True)

    def _wait(self, url: str, timeout: float) -> None:
        def ready() -> bool:
            if self.proc.poll() is not None:
                raise AssertionError(f"{self.name} exited:\n{self.log_path.read_text()}")
            return answers(url)
        wait_until(ready, timeout, 0.2, what=f"{self.name} ready")

    def stop(self) -> None:
        stop_process(self.proc)
        self._log.close()


class VictoriaMetricsProcess(QueryApi, _Process):
    """The single-node server; `scrape_configs` (as in prometheus.yml) makes it scrape."""

    def __init__(self, tmp: Path, scrape_configs: list[dict[str, Any]] | None = None,
                 scrape_interval: str = "1s", args: tuple[str, ...] = ()) -> None:
        binary = require_tool("victoria-metrics", PACKAGE)
        tmp.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        argv = [binary, f"-storageDataPath={tmp / 'data'}",
                f"-httpListenAddr=127.0.0.1:{self.port}", "-retentionPeriod=100y",
                "-search.latencyOffset=0s", "-search.disableCache", "-loggerLevel=WARN"]
        if scrape_configs is not None:
            config = {"global": {"scrape_interval": scrape_interval},
                      "scrape_configs": scrape_configs}
            (tmp / "scrape.yml").write_text(yaml.safe_dump(config))
            argv.append(f"-promscrape.config={tmp / 'scrape.yml'}")
        _Process.__init__(self, tmp, "victoria-metrics", [*argv, *args])

    @property
    def write_url(self) -> str:
        """Where Prometheus' `remote_write` sends samples."""
        return f"{self.url}/api/v1/write"

    def wait_ready(self, timeout: float = 60.0) -> VictoriaMetricsProcess:
        self._wait(f"{self.url}/health", timeout)
        return self


class AlertSink:
    """An HTTP endpoint that takes what vmalert notifies (Alertmanager's API) and keeps it."""

    def __init__(self) -> None:
        received: list[Any] = []
        self.received = received

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                received.append(json.loads(self.rfile.read(length) or b"null"))
                self.send_response(200)
                self.end_headers()

            def log_message(self, *_: object) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()


class VmalertProcess(_Process):
    """vmalert evaluating `rule_files` against `datasource`, writing recorded series (and
    alert state) to `remote_write`, alerts to `notifier`."""

    def __init__(self, tmp: Path, rule_files: list[Path], datasource: str,
                 remote_write: str | None = None, notifier: str | None = None,
                 evaluation_interval: str = "1s", args: tuple[str, ...] = ()) -> None:
        binary = require_tool("vmalert", PACKAGE)
        tmp.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        argv = [binary, *(f"-rule={path}" for path in rule_files),
                f"-datasource.url={datasource}", "-datasource.lookback=3s",
                f"-httpListenAddr=127.0.0.1:{self.port}",
                f"-evaluationInterval={evaluation_interval}", "-loggerLevel=WARN"]
        if remote_write is not None:
            argv += [f"-remoteWrite.url={remote_write}", "-remoteWrite.flushInterval=200ms"]
        if notifier is not None:
            argv.append(f"-notifier.url={notifier}")
        super().__init__(tmp, "vmalert", [*argv, *args])

    def wait_ready(self, timeout: float = 60.0) -> VmalertProcess:
        self._wait(f"{self.url}/health", timeout)
        return self

    def rules(self) -> list[dict[str, Any]]:
        """Every rule with its state (`health`, `lastError`, `lastEvaluation`, `lastSamples`)
        and the name of its group (`group`)."""
        status, _, body = http_get(f"{self.url}/api/v1/rules", timeout=10.0)
        assert status == 200, body
        groups: list[dict[str, Any]] = json.loads(body)["data"]["groups"]
        return [{**rule, "group": group["name"]} for group in groups
                for rule in group["rules"]]


def dry_run(rule_files: list[Path]) -> subprocess.CompletedProcess[str]:
    """`vmalert -dryRun`: parses the rule files and their expressions (MetricsQL), then
    exits."""
    binary = require_tool("vmalert", PACKAGE)
    return subprocess.run([binary, "-dryRun", *(f"-rule={path}" for path in rule_files)],
                          capture_output=True, text=True, timeout=60)

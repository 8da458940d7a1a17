"""A real Prometheus (Debian's `prometheus`) on a free loopback port, for tests that query
what it scraped or what was backfilled into its storage."""

from __future__ import annotations

import json
import subprocess
import urllib.parse
from pathlib import Path
from typing import Any

import yaml

from tests.support.exporter_process import answers, free_port, http_get
from tests.support.processes import stop_process
from tests.support.requirements import require_tool
from tests.support.wait import wait_until


class QueryApi:
    """The Prometheus HTTP query API at `url`, which VictoriaMetrics serves too."""

    url: str

    def query(self, expr: str, at: float | None = None) -> list[dict[str, Any]]:
        params = {"query": expr, **({"time": f"{at:.3f}"} if at is not None else {})}
        status, _, body = http_get(f"{self.url}/api/v1/query?{urllib.parse.urlencode(params)}",
                                   timeout=30.0)
        payload = json.loads(body)
        assert status == 200, (expr, payload)
        assert payload["status"] == "success", (expr, payload)
        result: list[dict[str, Any]] = payload["data"]["result"]
        return result

    def query_range(self, expr: str, start: float, end: float, step: float
                    ) -> list[dict[str, Any]]:
        params = {"query": expr, "start": f"{start:.3f}", "end": f"{end:.3f}",
                  "step": f"{step}"}
        status, _, body = http_get(
            f"{self.url}/api/v1/query_range?{urllib.parse.urlencode(params)}", timeout=60.0)
        payload = json.loads(body)
        assert status == 200, (expr, payload)
        assert payload["status"] == "success", (expr, payload)
        result: list[dict[str, Any]] = payload["data"]["result"]
        return result


class PrometheusProcess(QueryApi):
    """Started with `config` (a prometheus.yml as a dict) and optional rule groups; its
    storage is `tsdb` (default: a fresh folder under `tmp`)."""

    def __init__(self, tmp: Path, config: dict[str, Any],
                 rules: list[dict[str, Any]] | None = None, tsdb: Path | None = None,
                 args: tuple[str, ...] = ()) -> None:
        binary = require_tool("prometheus", "prometheus")
        tmp.mkdir(parents=True, exist_ok=True)
        config = dict(config)
        if rules is not None:
            (tmp / "rules.yml").write_text(yaml.safe_dump({"groups": rules}))
            config["rule_files"] = [str(tmp / "rules.yml")]
        (tmp / "prometheus.yml").write_text(yaml.safe_dump(config))
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._log = (tmp / "prometheus.log").open("w")
        self.proc = subprocess.Popen(
            [binary, f"--config.file={tmp / 'prometheus.yml'}",
             f"--storage.tsdb.path={tsdb or tmp / 'tsdb'}",
             f"--web.listen-address=127.0.0.1:{self.port}", *args],
            stdout=subprocess.DEVNULL, stderr=self._log, text=True)
        self.log_path = tmp / "prometheus.log"

    def wait_ready(self, timeout: float = 60.0) -> PrometheusProcess:
        def ready() -> bool:
            if self.proc.poll() is not None:
                raise AssertionError(f"prometheus exited:\n{self.log_path.read_text()}")
            return answers(f"{self.url}/-/ready")
        wait_until(ready, timeout, 0.2, what="Prometheus ready")
        return self

    def stop(self) -> None:
        stop_process(self.proc)
        self._log.close()

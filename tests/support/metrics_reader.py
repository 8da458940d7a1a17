"""Reading a running exporter's /metrics the way the container tests check it.

`MetricsReader` holds the reading and waiting; a subclass says how to GET a path (a process
on a published port, a container under podman).
"""

from __future__ import annotations

import re
from collections.abc import Callable

from prometheus_client.parser import text_string_to_metric_families

from tests.support.wait import wait_until


class MetricsReader:
    def get(self, path: str, timeout: float = 5.0) -> tuple[int, str]:
        """(HTTP status, body) of GET `path` on the exporter."""
        raise NotImplementedError

    def wait_for_metrics(self, done: Callable[[set[str]], bool]) -> str:
        """/metrics once `done(names of the DCGM series)` holds; waits up to two poll
        intervals (as the exporter reports its own) and a margin."""
        interval = next(v for name, _, v in self.samples()
                        if name == "gpu_exporter_collect_interval_seconds")
        served: set[str] = set()

        def body_once_done() -> str | None:
            status, text = self.get("/metrics")
            assert status == 200, text
            # Names from the text itself: the client library's parser renames counters.
            served.clear()
            served.update(re.findall(r"^(DCGM_\w+)[{ ]", text, flags=re.MULTILINE))
            return text if done(served) else None

        return wait_until(body_once_done, timeout=2 * interval + 10, interval=0.2,
                          what="the served DCGM series to match")

    def samples(self) -> list[tuple[str, dict[str, str], float]]:
        status, text = self.get("/metrics")
        assert status == 200, text
        return [(s.name, s.labels, s.value)
                for family in text_string_to_metric_families(text) for s in family.samples]

    def gpu_series(self, gpu: str) -> list[dict[str, str]]:
        return [labels for name, labels, _ in self.samples()
                if name.startswith("DCGM_FI_") and labels.get("gpu") == gpu]

    def labelled_gpu_series(self, gpu: str, label: str, timeout: float = 30.0
                            ) -> list[dict[str, str]]:
        """The GPU's series once they carry `label`: labels learned from the API server (a
        watch) or from the kubelet arrive a poll or more after start. After `timeout` the
        series as they are, for the caller's assertion to show."""
        last: list[dict[str, str]] = []

        def labelled() -> list[dict[str, str]] | None:
            last[:] = self.gpu_series(gpu)
            return list(last) if last and all(label in s for s in last) else None

        try:
            return wait_until(labelled, timeout=timeout, interval=0.2,
                              what=f"GPU {gpu}'s series labelled {label}")
        except AssertionError:
            return last

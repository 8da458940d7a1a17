"""A stand-in for the model servers' /metrics in the end-to-end test: vLLM's serving metrics
for each inference pod of the simulated node, and Dynamo's frontend metrics, labelled with
`namespace` and `pod` as a PodMonitor scrape labels them.

The dashboards pair serving metrics with GPU series by (namespace, pod); only with a target
like this can the test show that those joins find each other's labels. Values are fixed
per pod; histogram counts grow with time so rates and quantiles have something to show.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

TTFT_BUCKETS = ((0.1, 0.2), (0.5, 0.7), (1.0, 0.9), (float("inf"), 1.0))
"""(upper bound, share of requests at or under it)."""


def _histogram(name: str, labels: str, count: int) -> list[str]:
    """The samples of one histogram series (the `# TYPE` line is the caller's)."""
    lines = []
    for bound, share in TTFT_BUCKETS:
        le = "+Inf" if bound == float("inf") else repr(bound)
        lines.append(f'{name}_bucket{{{labels},le="{le}"}} {int(count * share)}')
    lines += [f"{name}_sum{{{labels}}} {0.35 * count}", f"{name}_count{{{labels}}} {count}"]
    return lines


class ServingTarget:
    def __init__(self, pods: Iterable[tuple[str, str]]) -> None:
        """`pods`: (namespace, pod) of every model server to publish metrics for."""
        self.pods = sorted(pods)
        self._started = time.monotonic()
        target = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                body = target.exposition().encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def start(self) -> ServingTarget:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def exposition(self) -> str:
        count = 10 + int(10 * (time.monotonic() - self._started))
        waiting = ["# TYPE vllm:num_requests_waiting gauge"]
        kv = ["# TYPE vllm:kv_cache_usage_perc gauge"]
        ttft = ["# TYPE vllm:time_to_first_token_seconds histogram"]
        for i, (namespace, pod) in enumerate(self.pods):
            labels = f'namespace="{namespace}",pod="{pod}",model_name="m",engine="0"'
            waiting.append(f"vllm:num_requests_waiting{{{labels}}} {i % 4}")
            kv.append(f"vllm:kv_cache_usage_perc{{{labels}}} {0.3 + 0.05 * (i % 10)}")
            ttft += _histogram("vllm:time_to_first_token_seconds", labels, count)
        frontend = ('namespace="inference",pod="qwen3-32b-frontend-6c9d7-abcde",'
                    'model="Qwen/Qwen3-32B",dynamo_namespace="inference-qwen3-32b"')
        lines = [*waiting, *kv, *ttft,
                 "# TYPE dynamo_frontend_queued_requests gauge",
                 f"dynamo_frontend_queued_requests{{{frontend}}} 2",
                 "# TYPE dynamo_frontend_time_to_first_token_seconds histogram",
                 *_histogram("dynamo_frontend_time_to_first_token_seconds", frontend, count)]
        return "\n".join(lines) + "\n"

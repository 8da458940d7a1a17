"""Clients that scrape /metrics flat out, in a process of their own (so that they do not
take the test's scraper's interpreter lock): `python -m tests.stress.load PORT CLIENTS`.

They run until stdin closes, then print one JSON line: requests made and the failures (not a
200, or a body that does not end a line).
"""

from __future__ import annotations

import http.client
import json
import sys
import threading


class Load:
    def __init__(self, port: int, clients: int) -> None:
        self._port = port
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self.requests = 0
        self.failures: list[str] = []
        self._threads = [threading.Thread(target=self._client, daemon=True)
                         for _ in range(clients)]

    def run_until_stdin_closes(self) -> None:
        for thread in self._threads:
            thread.start()
        sys.stdin.read()
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=30)

    def _client(self) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", self._port, timeout=5)
        while not self._stop.is_set():
            try:
                conn.request("GET", "/metrics")
                response = conn.getresponse()
                body = response.read()
                problem = None if response.status == 200 and body.endswith(b"\n") \
                    else f"HTTP {response.status}, {len(body)} bytes"
            except (OSError, http.client.HTTPException) as exc:
                conn.close()
                conn = http.client.HTTPConnection("127.0.0.1", self._port, timeout=5)
                problem = repr(exc)
            with self._lock:
                self.requests += 1
                if problem:
                    self.failures.append(problem)
        conn.close()


def main() -> int:
    load = Load(int(sys.argv[1]), int(sys.argv[2]))
    load.run_until_stdin_closes()
    print(json.dumps({"requests": load.requests, "failures": load.failures[:20],
                      "failed": len(load.failures)}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

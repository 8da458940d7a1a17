"""A Prometheus stand-in that never stops scraping: /metrics and /ready at a fixed rate.

Each tick sends one /metrics request, rotating through the four encodings a scraper may ask
for (text, text+gzip, OpenMetrics, OpenMetrics+gzip), then one /ready probe, over one
keep-alive connection as Prometheus does. Every body is checked and parsed as it arrives, so
the test can wait on what the exporter serves, and every finding is kept for the verdict.
"""

from __future__ import annotations

import gzip
import http.client
import math
import queue
import re
import threading
import time
import zlib
from dataclasses import dataclass, field

from prometheus_client.openmetrics.parser import (
    text_string_to_metric_families as parse_openmetrics,
)
from prometheus_client.parser import text_string_to_metric_families as parse_text

Labels = tuple[tuple[str, str], ...]
_BARE_COUNTER = re.compile(r"^# TYPE (\S+(?<!_total)) counter$", re.MULTILINE)
SeriesKey = tuple[str, Labels]

TICK_S = 0.04
"""25 Hz: above the 20 Hz the matrix promises, with room for a slow tick."""

OPENMETRICS = "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5"
VARIANTS: tuple[tuple[str, dict[str, str]], ...] = (
    ("text", {}),
    ("text+gzip", {"Accept-Encoding": "gzip"}),
    ("openmetrics", {"Accept": OPENMETRICS}),
    ("openmetrics+gzip", {"Accept": OPENMETRICS, "Accept-Encoding": "gzip"}),
)

# Finding categories, in the order the results list them.
STATUS = "non-200"
BLANK = "blank"
TRUNCATED = "truncated"
REJECTED = "rejected"
VALUE = "wrong value"
CATEGORIES = (STATUS, BLANK, TRUNCATED, REJECTED, VALUE)


@dataclass(slots=True)
class Scrape:
    """One /metrics request and what came of it."""

    at: float
    """time.monotonic() when it was sent."""
    variant: str
    status: int = 0
    """0: no HTTP answer at all (refused, reset, timed out)."""
    text: str | None = None
    samples: dict[SeriesKey, float] | None = None
    """None when the body could not be parsed."""
    problems: list[tuple[str, str]] = field(default_factory=list)
    """(category, detail) found in the answer itself."""

    def value(self, name: str, **labels: str) -> float | None:
        """The value of the one series `name` whose labels include `labels`, if any."""
        found = self.matching(name, **labels)
        return found[0][1] if found else None

    def matching(self, name: str, **labels: str) -> list[tuple[dict[str, str], float]]:
        if self.samples is None:
            return []
        out = []
        for (n, lab), v in self.samples.items():
            if n == name:
                as_dict = dict(lab)
                if all(as_dict.get(k) == want for k, want in labels.items()):
                    out.append((as_dict, v))
        return out


@dataclass(frozen=True, slots=True)
class Probe:
    at: float
    status: int


def _decode(scrape: Scrape, raw: bytes, headers: http.client.HTTPMessage) -> None:
    if headers.get("Content-Encoding") == "gzip":
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError, zlib.error) as exc:
            scrape.problems.append((TRUNCATED, f"gzip stream broken: {exc}"))
            return
    if not raw:
        scrape.problems.append((BLANK, "empty body"))
        return
    scrape.text = raw.decode("utf-8", errors="replace")
    om = scrape.variant.startswith("openmetrics")
    if om and not scrape.text.endswith("# EOF\n"):
        scrape.problems.append((TRUNCATED, "OpenMetrics body without its closing # EOF"))
    elif not scrape.text.endswith("\n"):
        scrape.problems.append((TRUNCATED, "body does not end with a newline"))


def _parse(scrape: Scrape) -> None:
    assert scrape.text is not None
    samples: dict[SeriesKey, float] = {}
    om = scrape.variant.startswith("openmetrics")
    # The text parser names a counter's samples `<name>_total` even where the wire has no
    # `_total` (dcgm's counters): keyed here by the names on the wire.
    bare_counters = set() if om else set(_BARE_COUNTER.findall(scrape.text))
    try:
        for family in (parse_openmetrics if om else parse_text)(scrape.text):
            for s in family.samples:
                name = family.name if family.name in bare_counters else s.name
                key = (name, tuple(sorted(s.labels.items())))
                if key in samples:
                    # Prometheus rejects the whole scrape for this; the Python parser does not.
                    scrape.problems.append((REJECTED, f"duplicate series {key}"))
                samples[key] = s.value
    except Exception as exc:
        scrape.problems.append((REJECTED, f"parser: {exc}"))
        return
    if not samples:
        scrape.problems.append((BLANK, "no samples"))
    nan = [k for k, v in samples.items() if k[0].startswith("DCGM_") and not math.isfinite(v)]
    if nan:
        scrape.problems.append((VALUE, f"non-finite DCGM values: {nan[:3]}"))
    scrape.samples = samples


class Scraper:
    """Scrapes /metrics and /ready from a thread until `stop()`; a second thread checks and
    parses each body, so parsing never slows the scrape rate. `scrapes` (parsed, in order)
    and `probes` grow meanwhile."""

    def __init__(self, host: str, port: int, tick_s: float = TICK_S) -> None:
        self._host, self._port, self._tick_s = host, port, tick_s
        self.scrapes: list[Scrape] = []
        self.probes: list[Probe] = []
        self.sent = 0
        self._stop = threading.Event()
        self._cond = threading.Condition()
        self._raw: queue.SimpleQueue[tuple[Scrape, bytes, http.client.HTTPMessage | None]
                                     | None] = queue.SimpleQueue()
        self._sender = threading.Thread(target=self._send, name="scraper", daemon=True)
        self._checker = threading.Thread(target=self._check, name="scrape-checker",
                                         daemon=True)
        self._conn: http.client.HTTPConnection | None = None
        self.started_at = 0.0
        self.stopped_at = 0.0

    def start(self) -> Scraper:
        self.started_at = time.monotonic()
        self._sender.start()
        self._checker.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._sender.join(timeout=30)
        self.stopped_at = time.monotonic()
        self._raw.put(None)
        self._checker.join(timeout=120)
        if self._conn is not None:
            self._conn.close()

    @property
    def rate_hz(self) -> float:
        elapsed = (self.stopped_at or time.monotonic()) - self.started_at
        return self.sent / elapsed if elapsed > 0 else 0.0

    def wait_for_scrapes(self, count: int, timeout: float = 60.0) -> None:
        """Until `count` more scrapes have been checked (how long a fault is held)."""
        with self._cond:
            target = len(self.scrapes) + count
            if not self._cond.wait_for(lambda: len(self.scrapes) >= target, timeout):
                raise AssertionError(f"{count} scrapes not made within {timeout}s")

    def wait_new(self, after: int, timeout: float, *, probes: bool = False) -> bool:
        """Until more than `after` scrapes (or /ready probes) exist; False on timeout."""
        made = self.probes if probes else self.scrapes
        with self._cond:
            return self._cond.wait_for(lambda: len(made) > after, timeout)

    def _request(self, path: str, headers: dict[str, str]
                 ) -> tuple[int, bytes, http.client.HTTPMessage]:
        if self._conn is None:
            self._conn = http.client.HTTPConnection(self._host, self._port, timeout=5)
        try:
            self._conn.request("GET", path, headers=headers)
            response = self._conn.getresponse()
            body = response.read()
            return response.status, body, response.headers
        except Exception:
            self._conn.close()
            self._conn = None
            raise

    def _scrape(self, variant: str, headers: dict[str, str]
                ) -> tuple[Scrape, bytes, http.client.HTTPMessage | None]:
        scrape = Scrape(time.monotonic(), variant)
        try:
            scrape.status, raw, answer_headers = self._request("/metrics", headers)
        except http.client.IncompleteRead as exc:
            scrape.status = 200
            scrape.problems.append((TRUNCATED, f"connection closed mid-body: {exc!r}"))
            return scrape, b"", None
        except (OSError, http.client.HTTPException) as exc:
            scrape.problems.append((STATUS, f"no answer: {exc!r}"))
            return scrape, b"", None
        if scrape.status != 200:
            scrape.problems.append((STATUS, f"HTTP {scrape.status}: {raw[:200]!r}"))
            return scrape, b"", None
        return scrape, raw, answer_headers

    def _probe(self) -> Probe:
        at = time.monotonic()
        try:
            status, _, _ = self._request("/ready", {})
        except (OSError, http.client.HTTPException):
            status = 0
        return Probe(at, status)

    def _send(self) -> None:
        next_tick = time.monotonic()
        while not self._stop.is_set():
            variant, headers = VARIANTS[self.sent % len(VARIANTS)]
            self._raw.put(self._scrape(variant, headers))
            probe = self._probe()
            with self._cond:
                self.sent += 1
                self.probes.append(probe)
                self._cond.notify_all()
            next_tick += self._tick_s
            delay = next_tick - time.monotonic()
            if delay < -1.0:
                next_tick = time.monotonic()  # far behind (a stalled machine): don't burst
            elif delay > 0:
                self._stop.wait(delay)  # the scrape interval

    def _check(self) -> None:
        while (item := self._raw.get()) is not None:
            scrape, raw, headers = item
            if headers is not None:
                _decode(scrape, raw, headers)
                if scrape.text is not None:
                    _parse(scrape)
            with self._cond:
                self.scrapes.append(scrape)
                self._cond.notify_all()

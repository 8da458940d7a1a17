"""One fault-matrix case: an exporter, a scraper on it, the fault's marks, and the verdict.

A case starts the exporter and the scraper, marks when it injects and clears its fault,
holds each phase for a number of scrapes (never a fixed sleep), waits for recovery as the
scraper sees it, and ends with `finish`, which checks every scrape and every /ready probe:

- a scrape fails when it is not a 200, is blank or truncated, is rejected by the parser
  (or, for a sample of bodies, by `promtool check metrics`), or shows a value the case says
  must be absent at that moment (`Rule`);
- /ready's distinct states in order must be what the case expects;
- recovery is the time from clearing the fault to the first scrape (and /ready 200, where
  readiness is expected back) showing the recovered state.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from tests.stress.scraper import CATEGORIES, REJECTED, STATUS, VALUE, Scrape, Scraper
from tests.support.exporter_process import ExporterProcess
from tests.support.promtool import promtool_problems

PROMTOOL_EVERY = 25
"""Every 25th text body (and the first and last) also goes through promtool."""


class StressRun:
    """Marks and waits of one running case; `marks` hold time.monotonic() stamps."""

    def __init__(self, exporter: ExporterProcess) -> None:
        self.exporter = exporter
        self.scraper = Scraper("127.0.0.1", exporter.port)
        self.marks: dict[str, float] = {}

    def start(self, ready_timeout: float = 30.0) -> StressRun:
        self.exporter.wait_http(ready_timeout)
        self.scraper.start()
        self.mark("start")
        return self

    def mark(self, name: str) -> float:
        self.marks[name] = time.monotonic()
        return self.marks[name]

    def alive(self) -> None:
        if self.exporter.proc.poll() is not None:
            raise AssertionError(f"exporter exited {self.exporter.proc.returncode}:\n"
                                 f"{self.exporter.output()[-4000:]}")

    def hold(self, scrapes: int) -> None:
        """Keep the current phase for `scrapes` more scrapes."""
        self.scraper.wait_for_scrapes(scrapes)
        self.alive()

    def wait_served(self, predicate: Callable[[Scrape], bool], what: str,
                    timeout: float = 30.0, since: str | None = None) -> Scrape:
        """The first scrape (sent after mark `since`, or from now) that satisfies
        `predicate`; fails after `timeout` with the last scrape's problems."""
        after = self.marks[since] if since else time.monotonic()
        seen = 0
        deadline = time.monotonic() + timeout
        while True:
            scrapes = self.scraper.scrapes
            for scrape in scrapes[seen:]:
                if scrape.at >= after and scrape.samples is not None and predicate(scrape):
                    return scrape
            seen = len(scrapes)
            self.alive()
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not self.scraper.wait_new(seen, remaining):
                last = scrapes[-1] if scrapes else None
                raise AssertionError(
                    f"{what}: not served within {timeout}s; last scrape: "
                    f"{last.problems if last else 'none'}\n{self.exporter.output()[-3000:]}")

    def wait_ready(self, status: int, since: str, timeout: float = 30.0) -> float:
        """When /ready first answered `status` after mark `since`."""
        after = self.marks[since]
        deadline = time.monotonic() + timeout
        seen = 0
        while True:
            probes = self.scraper.probes
            for probe in probes[seen:]:
                if probe.at >= after and probe.status == status:
                    return probe.at
            seen = len(probes)
            self.alive()
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not self.scraper.wait_new(seen, remaining, probes=True):
                raise AssertionError(f"/ready did not answer {status} within {timeout}s")

    def recovered(self, predicate: Callable[[Scrape], bool], what: str, *,
                  ready: bool = True, timeout: float = 30.0) -> float:
        """Seconds from mark "clear" to the recovered state (and /ready 200 when `ready`);
        also marks "recovered" at that moment."""
        served = self.wait_served(predicate, what, timeout, since="clear").at
        at = max(served, self.wait_ready(200, "clear", timeout)) if ready else served
        self.marks["recovered"] = at
        return at - self.marks["clear"]


Rule = Callable[[Scrape, dict[str, float]], list[str]]
"""What a case forbids in one parsed scrape, given the marks: a list of violations."""


@dataclass
class CaseResult:
    name: str
    """The table's wording of the case."""
    scrapes: int = 0
    rate_hz: float = 0.0
    failed: int = 0
    """Scrapes with any finding."""
    by_category: dict[str, int] = field(default_factory=dict)
    examples: list[str] = field(default_factory=list)
    promtool_bodies: int = 0
    ready: list[int] = field(default_factory=list)
    """/ready's distinct states in order (0: no answer)."""
    ready_expected: list[int] = field(default_factory=list)
    recovery_s: float | None = None
    fault_s: float | None = None
    """How long the fault was held: from mark "fault" to mark "clear"."""
    note: str = ""
    problems: list[str] = field(default_factory=list)
    """Case-level failures: a fault not seen, /ready not as expected, too slow a scraper."""

    @property
    def ok(self) -> bool:
        return self.failed == 0 and not self.problems

    def explain(self) -> str:
        return (f"{self.name}: {self.failed} of {self.scrapes} scrapes failed "
                f"{self.by_category}; problems: {self.problems}; examples: {self.examples}")


def _ready_states(run: StressRun) -> list[int]:
    states: list[int] = []
    for probe in run.scraper.probes:
        if not states or states[-1] != probe.status:
            states.append(probe.status)
    return states


def _promtool_sample(scrapes: Sequence[Scrape]) -> list[Scrape]:
    texts = [s for s in scrapes if s.text is not None and s.variant.startswith("text")]
    if not texts:
        return []
    picked = texts[::PROMTOOL_EVERY]
    return [*picked, texts[-1]] if picked[-1] is not texts[-1] else picked


def finish(run: StressRun, name: str, *, ready: Sequence[int], rules: Sequence[Rule] = (),
           recovery_s: float | None = None, note: str = "",
           extra_problems: Sequence[str] = ()) -> CaseResult:
    """Stops the scraper and judges the case (the exporter is stopped by its fixture)."""
    run.alive()
    run.scraper.stop()
    scrapes = run.scraper.scrapes
    for scrape in _promtool_sample(scrapes):
        assert scrape.text is not None
        for problem in promtool_problems(scrape.text):
            scrape.problems.append((REJECTED, f"promtool: {problem}"))
    for scrape in scrapes:
        if scrape.samples is not None:
            for rule in rules:
                scrape.problems += [(VALUE, v) for v in rule(scrape, run.marks)]
    marks = run.marks
    held = marks["clear"] - marks["fault"] if "fault" in marks and "clear" in marks else None
    result = CaseResult(name, scrapes=len(scrapes), rate_hz=run.scraper.rate_hz, fault_s=held,
                        ready=_ready_states(run), ready_expected=list(ready),
                        recovery_s=recovery_s, note=note,
                        promtool_bodies=len(_promtool_sample(scrapes)),
                        problems=list(extra_problems))
    for category in CATEGORIES:
        result.by_category[category] = sum(
            1 for s in scrapes if any(c == category for c, _ in s.problems))
    failed = [s for s in scrapes if s.problems]
    result.failed = len(failed)
    result.examples = [f"{s.variant} at +{s.at - run.marks['start']:.2f}s: {s.problems[0][1]}"
                       for s in failed[:5]]
    if result.ready != result.ready_expected:
        result.problems.append(f"/ready went {result.ready}, expected {result.ready_expected}")
    if result.rate_hz < 20:
        result.problems.append(f"scraped at {result.rate_hz:.1f} Hz, below 20 Hz")
    if result.by_category.get(STATUS):
        result.problems.append(f"exporter log tail:\n{run.exporter.output()[-2000:]}")
    return result

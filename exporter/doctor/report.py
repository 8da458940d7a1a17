"""One doctor line per check: its verdict, what it found and, when something is wrong, the fix."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import TextIO

OK, INFO, WARN, FAIL = "OK", "INFO", "WARN", "FAIL"


@dataclass
class Report:
    """Doctor's output: each check's line written to `out` as soon as it is made, and the
    count of each verdict for the summary."""

    out: TextIO
    verdicts: Counter[str] = field(default_factory=Counter)

    def line(self, verdict: str, check: str, found: str, fix: str | None = None) -> None:
        """Write one line, `[VERDICT] check: found -> fix: fix` (no fix when None), and count
        the verdict."""
        self.verdicts[verdict] += 1
        text = f"[{verdict:>4}] {check}: {found}"
        if fix:
            text += f" -> fix: {fix}"
        print(text, file=self.out, flush=True)

    @property
    def failed(self) -> bool:
        """Return whether any check failed."""
        return self.verdicts[FAIL] > 0

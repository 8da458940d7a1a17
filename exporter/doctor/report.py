"""One doctor line per check: its verdict, what it found and, when something is wrong, the fix."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import TextIO

OK, INFO, WARN, FAIL = "OK", "INFO", "WARN", "FAIL"


@dataclass
class Report:
    out: TextIO
    verdicts: Counter[str] = field(default_factory=Counter)

    def line(self, verdict: str, check: str, found: str, fix: str | None = None) -> None:
        self.verdicts[verdict] += 1
        text = f"[{verdict:>4}] {check}: {found}"
        if fix:
            text += f" -> fix: {fix}"
        print(text, file=self.out, flush=True)

    @property
    def failed(self) -> bool:
        return self.verdicts[FAIL] > 0

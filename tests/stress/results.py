"""The fault matrix's cases, its results file, and the table of docs/testing.md made from it.

The suite writes `results.json` when run with $STRESS_RESULTS set (as
`scripts/fault_matrix.py --run` does); the table of docs/testing.md between the
`fault-matrix` markers is rendered from that file and nothing else, and
`tests/stress/test_table.py` fails when the two differ, when the file does not cover exactly
the cases below, or when a case run now ends otherwise than its row says.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict
from pathlib import Path
from typing import Any

from tests.stress.harness import CaseResult

RESULTS_FILE = Path(__file__).with_name("results.json")
BEGIN = "<!-- fault-matrix:begin -->"
END = "<!-- fault-matrix:end -->"

CASES: dict[str, tuple[str, str]] = {
    "gpu-lost": ("GPU lost mid-run, and back",
                 "GPU 1 of 4 answers GPU_IS_LOST, then is restored"),
    "nvml-down-at-start": ("NVML down at start",
                           "every nvmlInit fails (DRIVER_NOT_LOADED) until cleared"),
    "nvml-down-mid-run": ("NVML down mid-run, then recovery",
                          "driver unloaded under a running exporter (every call "
                          "UNINITIALIZED, nvmlInit failing), then loadable again"),
    "nvml-hang": ("One NVML call hung for minutes",
                  "GPU 1's power call blocks for 10 min; released after the hold"),
    "mig-rebuilt": ("A MIG layout rebuilt",
                    "GPU 2's two GPU instances destroyed, one 7g instance created"),
    "kubelet-absent": ("Kubelet socket absent at start",
                       "no socket; the kubelet starts after the hold"),
    "kubelet-restart": ("Kubelet restarted, socket re-created",
                        "kubelet stopped (socket removed), a new one started"),
    "kubelet-slow": ("Kubelet slow past the deadline",
                     "every List answers after 3 s (deadline 2 s), then promptly"),
    "kubelet-garbage": ("Kubelet answering malformed or oversized messages",
                        "bytes that are no protobuf, then a 17 MiB answer, then good"),
    "malformed-ids": ("Malformed device ids",
                      "pods holding empty, malformed, control-character and 10 kB ids"),
    "bad-csv": ("A bad CSV reload",
                "collectors file replaced by a broken one (SIGHUP too), then a good one"),
    "sighup-storm": ("SIGHUP ten times a second under load",
                     "50 SIGHUPs in 5 s while 4 more clients scrape flat out"),
    "apiserver-down": ("API server unreachable, pod-label enrichment on",
                       "`--kubernetes.pod-labels` with nothing listening at the API "
                       "address, then the API server up"),
    "full-disk": ("A full disk",
                  "HOME, TMPDIR and cwd on a full filesystem; every file-writing "
                  "system call traced"),
}
"""id -> (the table's wording, what the case does), in the table's order."""


def load_results(path: Path = RESULTS_FILE) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(path.read_text())
    return loaded


def write_results(results: Mapping[str, CaseResult], path: Path) -> None:
    """Writes the cases run, merged into what `path` already holds."""
    document: dict[str, Any] = {"cases": {}}
    if path.exists():
        document = load_results(path)
    for case_id, result in results.items():
        document["cases"][case_id] = asdict(result)
    document["cases"] = {k: document["cases"][k] for k in CASES if k in document["cases"]}
    path.write_text(json.dumps(document, indent=1, sort_keys=False) + "\n")


def write_environment(path: Path, environment: str) -> None:
    """Records the machine the results came from (shown under the table)."""
    document = load_results(path)
    document["environment"] = environment
    path.write_text(json.dumps(document, indent=1) + "\n")


def _ready(states: list[int]) -> str:
    return " → ".join("none" if s == 0 else str(s) for s in states)


def _seconds(seconds: float | None) -> str:
    return "n/a" if seconds is None else f"{seconds:.1f} s"


def render_table(document: Mapping[str, Any]) -> str:
    """Return the table of docs/testing.md for a results document."""
    lines = [
        "| case | what the suite does | fault held | scrapes (rate) | failed scrapes | "
        "`/ready` | recovery |",
        "|---|---|---|---|---|---|---|",
    ]
    cases = document["cases"]
    for case_id, (title, how) in CASES.items():
        r = cases[case_id]
        done = f"{how} ({r['note']})" if r["note"] else how
        lines.append(
            f"| {title} | {done} | {_seconds(r['fault_s'])} | {r['scrapes']} "
            f"({r['rate_hz']:.0f} Hz) | {r['failed']} | "
            f"{_ready(r['ready'])} | {_seconds(r['recovery_s'])} |")
    scrapes = sum(cases[c]["scrapes"] for c in CASES)
    promtool = sum(cases[c]["promtool_bodies"] for c in CASES)
    lines += ["", f"{scrapes} scrapes in all, each parsed by prometheus_client's text or "
              f"OpenMetrics parser, {promtool} of them also by `promtool check metrics`; "
              f"{document.get('environment', 'machine not recorded')}. Generated by "
              "`python scripts/fault_matrix.py --run` from `tests/stress/results.json`."]
    return "\n".join(lines) + "\n"


def replace_block(readme: str, table: str) -> str:
    head, begin, rest = readme.partition(BEGIN)
    _, end, tail = rest.partition(END)
    if not begin or not end:
        raise ValueError(f"the page has no {BEGIN} ... {END} block")
    return f"{head}{BEGIN}\n{table}{END}{tail}"


def readme_block(readme: str) -> str:
    _, begin, rest = readme.partition(BEGIN)
    block, end, _ = rest.partition(END)
    if not begin or not end:
        raise ValueError(f"the page has no {BEGIN} ... {END} block")
    return block.removeprefix("\n")

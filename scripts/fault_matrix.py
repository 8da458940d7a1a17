"""The fault matrix's table in docs/testing.md, generated from the suite's own results.

    python scripts/fault_matrix.py --run     # run tests/stress, keep its results, write the table
    python scripts/fault_matrix.py --write   # the table from the kept results (no run)
    python scripts/fault_matrix.py --check   # exit 1 if the table differs from the kept results

`--run` keeps the results (`tests/stress/results.json`) only when every case ran and passed;
`tests/stress/test_table.py` does what `--check` does, in the test command, and checks each
row against the cases run in that test run (one of them when it runs alone).
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.stress.results import (  # noqa: E402 - after the path is set
    CASES,
    RESULTS_FILE,
    load_results,
    readme_block,
    render_table,
    replace_block,
    write_environment,
)

TABLE_PAGE = ROOT / "docs" / "testing.md"


def run_suite() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        results = Path(tmp) / "results.json"
        env = {**os.environ, "STRESS_RESULTS": str(results)}
        code = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                               "tests/stress", "--ignore", "tests/stress/test_table.py"],
                              cwd=ROOT, env=env, check=False).returncode
        if code != 0:
            print("the fault matrix failed: results not kept", file=sys.stderr)
            return code
        document = load_results(results)
        missing = set(CASES) - set(document["cases"])
        if missing:
            print(f"cases not run: {sorted(missing)}; results not kept", file=sys.stderr)
            return 1
        write_environment(results, f"{os.cpu_count()} CPUs, {platform.machine()}, "
                                   f"Python {platform.python_version()}")
        RESULTS_FILE.write_text(results.read_text())
    return write_table()


def write_table() -> int:
    TABLE_PAGE.write_text(replace_block(TABLE_PAGE.read_text(), render_table(load_results())))
    print(f"wrote the fault-matrix table into {TABLE_PAGE.relative_to(ROOT)}")
    return 0


def check() -> int:
    if readme_block(TABLE_PAGE.read_text()) != render_table(load_results()):
        print("docs/testing.md's fault-matrix table differs from tests/stress/results.json; run "
              "`python scripts/fault_matrix.py --write` (or --run)", file=sys.stderr)
        return 1
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--run", action="store_true")
    group.add_argument("--write", action="store_true")
    group.add_argument("--check", action="store_true")
    args = parser.parse_args()
    if args.run:
        return run_suite()
    return write_table() if args.write else check()


if __name__ == "__main__":
    sys.exit(main())

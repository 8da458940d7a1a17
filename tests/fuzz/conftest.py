"""Property-based tests with a bounded budget, run in the test command.

Each property draws at most `FUZZ_EXAMPLES` examples (200 unless $FUZZ_EXAMPLES says more, for
a longer local hunt). No example database is written, so a run leaves the checkout as it was;
a failure prints the example and a `@reproduce_failure` blob to replay it. In CI the search is
derandomized, so a red build is reproducible.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

settings.register_profile(
    "bounded",
    max_examples=int(os.environ.get("FUZZ_EXAMPLES", "200")),
    deadline=None,
    database=None,
    print_blob=True,
    derandomize=bool(os.environ.get("CI")),
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile("bounded")

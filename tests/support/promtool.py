"""`promtool check metrics` on an exposition, with the findings dcgm-exporter's names force.

promtool exits 1 when it cannot parse the body and 3 when it only has lint findings. The
lint findings that compatibility makes unavoidable (camelCase labels such as `modelName` and
`UUID`, DCGM counter names without `_total`) are dropped; anything else is returned.
"""

from __future__ import annotations

import subprocess

from tests.support.requirements import require_tool

_DCGM_NAMING = ('should have "_total" suffix', "metric name should not include type")


def promtool_problems(text: str) -> list[str]:
    """What promtool objects to in `text`, beyond dcgm-exporter's inherited names; a body it
    cannot parse gives one line starting with "parse error"."""
    promtool = require_tool("promtool", "prometheus")
    result = subprocess.run([promtool, "check", "metrics"], input=text, text=True,
                            capture_output=True, timeout=60, check=False)
    if result.returncode not in (0, 3):
        return [f"parse error (exit {result.returncode}): {result.stderr.strip()[:500]}"]
    findings = [line for line in (result.stdout + result.stderr).splitlines() if line.strip()]
    return [f for f in findings if "snake_case" not in f
            and not (f.startswith("DCGM_") and any(d in f for d in _DCGM_NAMING))]

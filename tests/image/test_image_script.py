"""scripts/image.py as a user runs it: both architectures, tagged by the package's version,
in one manifest list (what `podman manifest push --all` publishes).

Run under a repository name of this checkout's own, so that it never retags another's.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from collections.abc import Iterator

import pytest

from exporter import __version__
from scripts.podman import inspect_format, podman
from tests.support.image import require_build_tools
from tests.support.paths import ROOT

pytestmark = pytest.mark.timeout(1800)  # builds both images when nothing is cached

CHECKOUT = hashlib.sha256(str(ROOT).encode()).hexdigest()[:8]
REPOSITORY = f"localhost/gpu-exporter-script-test-{CHECKOUT}"


@pytest.fixture
def built() -> Iterator[subprocess.CompletedProcess[str]]:
    require_build_tools()
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "image.py"),
                           "--repository", REPOSITORY], capture_output=True, text=True,
                          timeout=1700, check=False)
    try:
        yield proc
    finally:
        podman("manifest", "rm", f"{REPOSITORY}:{__version__}", check=False)
        for arch in ("amd64", "arm64"):
            podman("rmi", f"{REPOSITORY}:{__version__}-{arch}", check=False)


def test_both_architectures_under_the_version(built: subprocess.CompletedProcess[str]) -> None:
    assert built.returncode == 0, built.stderr[-3000:]
    assert built.stdout.strip() == f"{REPOSITORY}:{__version__}"
    listed = json.loads(podman("manifest", "inspect", f"{REPOSITORY}:{__version__}").stdout)
    assert sorted((m["platform"]["os"], m["platform"]["architecture"])
                  for m in listed["manifests"]) == [("linux", "amd64"), ("linux", "arm64")]
    for arch in ("amd64", "arm64"):
        assert inspect_format(f"{REPOSITORY}:{__version__}-{arch}", "{{.Architecture}}") == arch

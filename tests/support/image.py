"""The container image of this checkout, as tests build it (`built_image` in tests/conftest.py).

Built by scripts/image.py exactly as a user builds it (stand-in bases, host wheels, no
network during the build); podman's layer cache makes an unchanged rebuild take seconds.
The tag carries a digest of this checkout's path, so that two checkouts on one machine never
run each other's image.
"""

from __future__ import annotations

import hashlib

from scripts.image import build_image, image_tag
from tests.support.paths import ROOT
from tests.support.requirements import require_tool

BUILD_TOOLS = {"podman": "podman", "runc": "runc", "mmdebstrap": "mmdebstrap",
               "dpkg-deb": "dpkg"}
"""Executable -> the Debian package that has it (scripts/test.sh installs them)."""


def checkout_tag(arch: str) -> str:
    return f"{image_tag(arch)}-test-{hashlib.sha256(str(ROOT).encode()).hexdigest()[:8]}"


def require_build_tools() -> None:
    """Skips the test without them, or fails it in CI (tests/support/requirements.py)."""
    for tool, package in BUILD_TOOLS.items():
        require_tool(tool, package)


def checkout_image(arch: str) -> str:
    """This checkout's image for `arch`, built (or found in podman's cache) now."""
    require_build_tools()
    return build_image(arch, tag=checkout_tag(arch))

"""The image these tests run: built once per session by scripts/image.py, as a user builds it
(stand-in bases, host wheels, no network during the build); podman's layer cache makes an
unchanged rebuild take seconds.

The tag carries a digest of this checkout's path, so that two checkouts on one machine never
run each other's image.
"""

from __future__ import annotations

import hashlib

import pytest

from scripts.image import image_tag
from tests.support.paths import ROOT
from tests.support.requirements import require_tool

BUILD_TOOLS = {"podman": "podman", "runc": "runc", "mmdebstrap": "mmdebstrap",
               "dpkg-deb": "dpkg"}


def checkout_tag(arch: str) -> str:
    return f"{image_tag(arch)}-test-{hashlib.sha256(str(ROOT).encode()).hexdigest()[:8]}"


def require_build_tools() -> None:
    for tool, package in BUILD_TOOLS.items():
        require_tool(tool, package)


@pytest.fixture(scope="session")
def built_image() -> str:
    """The amd64 image of this checkout."""
    from scripts.image import build_image

    require_build_tools()
    return build_image("amd64", tag=checkout_tag("amd64"))

"""The simulated node every image test module runs its containers on."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.image.node import ContainerNode


@pytest.fixture(scope="module")
def node(nvmlsim_lib: Path) -> Iterator[ContainerNode]:
    started = ContainerNode.start(nvmlsim_lib)
    try:
        yield started
    finally:
        started.stop()

"""The simulated nodes, started once for the consumer-contract modules that query them."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.consumers.consumer_queries import every_query_text
from tests.consumers.nodes import Node, field_names, running_nodes


# Package scope: the nodes (five exporters polling every 500 ms, five Prometheus servers)
# stop once a worker leaves tests/consumers, rather than running on beside every later file.
@pytest.fixture(scope="package")
def nodes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Node]]:
    """Every generation's node, with every field any consumer's query reads enabled."""
    fields = field_names(every_query_text())
    with running_nodes(tmp_path_factory.mktemp("consumers"), fields) as running:
        yield running

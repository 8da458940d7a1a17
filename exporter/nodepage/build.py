"""One poll -> the node page's view (`exporter.nodepage.view`).

Pure and cheap: lookups in what the poll already holds. The page (`exporter.nodepage.page`)
calls it at most once per poll, on the first request for the page after that poll, so a poll
nobody looks at costs nothing more than before.
"""

from __future__ import annotations

from exporter.nodepage.cards import gpu_views
from exporter.nodepage.holders import attribution_on, holdings
from exporter.nodepage.status import exporter_view
from exporter.nodepage.view import NodeView
from exporter.sampling.snapshot import Snapshot
from exporter.sampling.stats import PollStats
from exporter.series import Family


def node_view(snapshot: Snapshot | None, stats: PollStats, families: list[Family],
              backend: str) -> NodeView:
    """Return the view of one poll. `families`: the self-metric families that went into its
    exposition besides the poll loop's own (the backend's, attribution's, the endpoint's);
    `snapshot` None: before the first poll."""
    exporter = exporter_view(snapshot, stats, families, backend)
    if snapshot is None:
        return NodeView(exporter, ())
    return NodeView(exporter, gpu_views(snapshot, holdings(snapshot, families),
                                        attribution_on(families)))

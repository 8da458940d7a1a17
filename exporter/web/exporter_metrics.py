"""`--enable-exporter-metrics`: the process's own standard families, as dcgm-exporter 4.8.4
adds Go's (`go_*`, `process_*`, `promhttp_*`) to `/metrics`.

Python's counterparts come from prometheus-client's collectors, under the names every Python
exporter uses: `process_*` (CPU, memory, file descriptors, start time: /proc/self),
`python_info`, `python_gc_*`. They are read once per poll on the render thread, never on the
event loop (/proc reads are blocking calls) and rendered with the poll's body, after all its
other families; only `promhttp_metric_handler_*`, which count the scrapes themselves, are
written per scrape (`exporter.web.scrapes`). This module, and prometheus-client with it, is
imported only when the option is on.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, get_args

from exporter.series import Family, FamilyType, Sample

if TYPE_CHECKING:
    from prometheus_client.registry import Collector

_OUR_TYPES = frozenset(get_args(FamilyType))


class ProcessFamilies:
    """prometheus-client's process, platform and GC collectors, as families."""

    def __init__(self) -> None:
        # prometheus-client only here: the serve path without the option never loads it.
        from prometheus_client import GCCollector, PlatformCollector, ProcessCollector
        from prometheus_client.registry import CollectorRegistry

        # A private registry: nothing registers itself globally.
        registry = CollectorRegistry(auto_describe=False)
        self._collectors: tuple[Collector, ...] = (
            ProcessCollector(registry=registry),
            PlatformCollector(registry=registry),
            GCCollector(registry=registry),
        )

    def __call__(self) -> list[Family]:
        """Return the families as they are now. It reads /proc/self, so call it off the event
        loop."""
        families = []
        for collector in self._collectors:
            for metric in collector.collect():
                kind = metric.type
                if kind not in _OUR_TYPES or not metric.samples:
                    continue
                # The family's own samples only (a counter's `_created` would need a
                # family of its own in text format).
                own = (metric.name, metric.name + "_total")
                families.append(Family(
                    metric.name, kind, metric.documentation,  # type: ignore[arg-type]
                    tuple(Sample(tuple(s.labels.items()), float(s.value))
                          for s in metric.samples if s.name in own)))
        return families

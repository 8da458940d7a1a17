"""The label budget (`--label-limit`): no series carries more labels than a store accepts.

Mimir and Grafana Cloud refuse a series with more than 30 label names (the metric name
counted); Prometheus' `label_limit` fails the whole scrape. Copied pod labels are what makes
a series long, and they are the only labels cut: the exporter's own (every name
`exporter.label_registry` declares, `pod_uid` included) always stay, so a series is never
dropped or refused here, only shortened.

Order: copied pod labels are removed from the end of the series backwards. They are written
sorted by name, so the name that sorts last goes first, until the series fits.

Runs once per poll on the render thread, over label sets that repeat from family to family:
each distinct label set is cut once.
"""

from __future__ import annotations

import logging

from exporter.label_registry import is_declared
from exporter.series import Family, Labels, Sample

log = logging.getLogger(__name__)

_LOGGED_MEMORY = 1024
"""Distinct cut label names remembered so each is logged once; bounded under pod churn."""


class LabelLimit:
    """Cuts copied pod labels beyond `limit` labels per series (0: no limit)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.trimmed_series = 0
        """Series of the last `apply` that lost copied labels."""
        self._logged: set[str] = set()

    def apply(self, families: list[Family]) -> list[Family]:
        """Return the families with copied pod labels cut from every series that has more labels
        than the limit, and count the series cut."""
        self.trimmed_series = 0
        if self.limit <= 0:
            return families
        cut: dict[Labels, Labels] = {}
        out: list[Family] = []
        for family in families:
            # The metric name counts as one label in every store's limit.
            if all(len(s.labels) < self.limit for s in family.samples):
                out.append(family)
                continue
            samples = []
            for sample in family.samples:
                if len(sample.labels) >= self.limit:
                    if sample.labels not in cut:
                        cut[sample.labels] = self._trim(sample.labels)
                    if cut[sample.labels] is not sample.labels:
                        self.trimmed_series += 1
                        sample = Sample(cut[sample.labels], sample.value)
                samples.append(sample)
            out.append(Family(family.name, family.type, family.help, tuple(samples)))
        return out

    def _trim(self, labels: Labels) -> Labels:
        excess = len(labels) + 1 - self.limit
        copied = [i for i, (name, _) in enumerate(labels) if not is_declared(name)]
        dropped = set(copied[len(copied) - min(excess, len(copied)):])
        if not dropped:
            return labels  # Only the exporter's own labels are left, and they are kept whole.
        for i in sorted(dropped):
            self._note(labels[i][0])
        return tuple(pair for i, pair in enumerate(labels) if i not in dropped)

    def _note(self, name: str) -> None:
        if name in self._logged:
            return
        if len(self._logged) >= _LOGGED_MEMORY:
            self._logged.clear()
        self._logged.add(name)
        log.warning("pod label %r left off series longer than --label-limit %d labels",
                    name, self.limit)

"""The samples of dcgm-exporter's own fields (`DCGM_EXP_*`) that are not plain device values.

Each takes the entity label sets the renderer built (`SeriesLabels`) and appends the field's
own labels after them, as dcgm-exporter does (collector labels sorted by name).
"""

from __future__ import annotations

from collections.abc import Mapping

from exporter import label_registry as names
from exporter.devices.model import EntityKey, Readings
from exporter.series import Labels, Sample

SeriesLabels = Mapping[EntityKey, tuple[Labels, ...]]

XID_COUNT_FIELD = "DCGM_EXP_XID_ERRORS_COUNT"
XID_TOTAL_FIELD = "DCGM_EXP_XID_ERRORS_TOTAL"
CLOCK_EVENTS_TOTAL_FIELD = "DCGM_EXP_CLOCK_EVENTS_TOTAL"
HEALTH_FIELD = "DCGM_EXP_GPU_HEALTH_STATUS"


def window_label(window_s: float) -> Labels:
    """Return the `window_size_in_ms` label for a window of this many seconds."""
    return ((names.WINDOW_SIZE_IN_MS, str(int(window_s * 1000))),)


def xid_window_samples(readings: Readings, base: SeriesLabels,
                       mig_parents: frozenset[int]) -> tuple[Sample, ...]:
    """Return, per entity and XID code, the number of events within the window; an entity without
    any has one series of 0 without `xid`, as dcgm-exporter's expcollector.go does. A GPU in MIG
    mode is counted through its GPU instances, as the field's scope says."""
    window = window_label(readings.xid_window_s)
    by_key: dict[EntityKey, list[Sample]] = {}
    for c in readings.xid_window:
        by_key.setdefault(c.entity_key, []).extend(
            Sample((*series, (names.XID, str(c.xid)), *window), float(c.count))
            for series in base.get(c.entity_key, ()))
    samples: list[Sample] = []
    for key, label_sets in base.items():
        if key in by_key:
            samples += by_key[key]
        elif not (key[1] == -1 and key[0] in mig_parents):
            samples += [Sample((*series, *window), 0.0) for series in label_sets]
    return tuple(samples)


def xid_total_samples(readings: Readings, base: SeriesLabels) -> tuple[Sample, ...]:
    """Return, per entity and XID code seen since start, how many events there were; there is no
    series before the first."""
    return tuple(Sample((*series, (names.XID, str(t.xid))), float(t.total))
                 for t in readings.xid_totals for series in base.get(t.entity_key, ()))


def clock_event_total_samples(readings: Readings, base: SeriesLabels) -> tuple[Sample, ...]:
    """Return, per GPU and reason that turned on since start, how often it did."""
    return tuple(Sample((*series, (names.CLOCK_EVENT, t.reason)), float(t.total))
                 for t in readings.clock_event_totals for series in base.get(t.entity_key, ()))


def health_samples(readings: Readings, base: SeriesLabels) -> tuple[Sample, ...]:
    """Return, per GPU, one series per health watch, valued with DCGM's result (0, 10 or 20)."""
    samples: list[Sample] = []
    for gpu, incidents in sorted(readings.health.items()):
        for series in base.get((gpu, -1), ()):
            samples += [Sample((*series,
                                (names.HEALTH_ERROR_CATEGORY, i.category),
                                (names.HEALTH_ERROR_CODE, i.code),
                                (names.HEALTH_ERROR_SEVERITY, i.severity),
                                (names.HEALTH_WATCH, i.watch)), float(i.result))
                        for i in incidents]
    return tuple(samples)

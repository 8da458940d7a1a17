"""The node page's account of the exporter itself: the poll, NVML, the kubelet and API
server connections and the fields, from the poll's counters and the self-metric families of
its exposition (so the page and `/metrics` cannot disagree)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from exporter import __version__
from exporter.devices.clock_events import CLOCK_EVENTS_COUNT_FIELD
from exporter.devices.model import EntityKey
from exporter.exposition.exp_fields import XID_COUNT_FIELD
from exporter.fields.catalog import MetricType, Reader, Scope
from exporter.fields.csv import EnabledField
from exporter.nodepage.view import Connection, ExporterView, FieldServed, NvmlError
from exporter.sampling.snapshot import Snapshot
from exporter.sampling.stats import PollStats
from exporter.selfmetrics import (
    DRA_SLICE_WATCH_ERRORS,
    DRA_SLICE_WATCH_UP,
    GPU_LOST,
    HTTP_CONNECTIONS_REFUSED,
    KUBELET_LAST_REFRESH_SUCCESS,
    KUBELET_REFRESH_ERRORS,
    KUBELET_UP,
    KUBERNETES_API_ERRORS,
    KUBERNETES_API_UP,
    NVML_ERRORS,
    NVML_UP,
    UNATTRIBUTED_DEVICES,
    SelfMetric,
)
from exporter.series import Family

EVENT_COUNT_FIELDS = frozenset({XID_COUNT_FIELD, CLOCK_EVENTS_COUNT_FIELD})
"""Fields with a series only for events within their window: none is no fault."""


class _Families:
    def __init__(self, families: Iterable[Family]) -> None:
        self._by_name = {f.name: f for f in families}

    def single(self, metric: SelfMetric) -> float | None:
        family = self._by_name.get(metric.name)
        return family.samples[0].value if family is not None and family.samples else None

    def by_label(self, metric: SelfMetric, label: str) -> tuple[tuple[str, int], ...]:
        family = self._by_name.get(metric.name)
        if family is None:
            return ()
        return tuple((dict(s.labels).get(label, ""), int(s.value)) for s in family.samples)

    def nvml_errors(self) -> tuple[NvmlError, ...] | None:
        family = self._by_name.get(NVML_ERRORS.name)
        if family is None:
            return None
        errors = []
        for s in family.samples:
            labels = dict(s.labels)
            errors.append(NvmlError(labels.get("function", ""), labels.get("code", ""),
                                    int(s.value)))
        return tuple(sorted(errors, key=lambda e: (-e.count, e.function, e.code)))

    def connection(self, up: SelfMetric, errors: SelfMetric, *, by: str | None = None,
                   last_success: SelfMetric | None = None) -> Connection | None:
        state = self.single(up)
        if state is None:
            return None
        counts = self.by_label(errors, by) if by is not None else (
            (("errors", int(self.single(errors) or 0)),))
        return Connection(state == 1.0,
                          self.single(last_success) if last_success is not None else None,
                          tuple((code, n) for code, n in counts if n))


def _visible(snapshot: Snapshot, key: EntityKey) -> bool:
    visible = snapshot.attribution.visible
    return visible is None or key in visible


def _served_count(snapshot: Snapshot, enabled: EnabledField) -> int:
    """Visible entities (or links, or GPU pairs) with a value of the field in this poll."""
    spec, readings = enabled.spec, snapshot.readings
    name = spec.name
    if name == XID_COUNT_FIELD:
        keys = {c.entity_key for c in readings.xid_window}
    elif name == CLOCK_EVENTS_COUNT_FIELD:
        keys = {c.entity_key for c in readings.clock_events if c.reason is not None}
    elif spec.reader is Reader.DRIVER:
        known = snapshot.inventory.driver_version is not None
        keys = {e.key for e in (*snapshot.inventory.gpus, *snapshot.inventory.instances)
                if known}
    elif enabled.type is MetricType.LABEL:
        keys = {k for k, labels in readings.labels.items() if name in labels}
    elif spec.scope is Scope.LINK:
        return sum(1 for (gpu, _), v in readings.links.items()
                   if name in v and _visible(snapshot, (gpu, -1)))
    elif spec.scope is Scope.PEER:
        return sum(1 for (gpu, _), v in readings.peers.items()
                   if name in v and _visible(snapshot, (gpu, -1)))
    else:
        keys = {k for k, v in readings.values.items() if name in v}
    return sum(1 for k in keys if _visible(snapshot, k))


def _fields(snapshot: Snapshot | None) -> tuple[str, tuple[FieldServed, ...], tuple[str, ...]]:
    if snapshot is None:
        return "", (), ()
    collectors = snapshot.collectors
    served = tuple(FieldServed(f.spec.name, _served_count(snapshot, f))
                   for f in collectors.fields)
    return collectors.source, served, collectors.warnings


def exporter_view(snapshot: Snapshot | None, stats: PollStats, families: Iterable[Family],
                  backend: str) -> ExporterView:
    """Return the exporter's own state at one poll: the poll, its connections (kubelet, API
    server, DRA), NVML's errors and the fields served, read from the poll's counters and the
    self-metric families that went into its exposition (`snapshot` None: before the first)."""
    found = _Families(families)
    pod_scope = snapshot is not None and snapshot.attribution.visible is not None
    nvml_up = found.single(NVML_UP)
    lost = found.single(GPU_LOST)
    source, served, skipped = _fields(snapshot)
    return ExporterView(
        version=__version__, backend=backend, scope="pod" if pod_scope else "node",
        host=snapshot.host.value if snapshot is not None else "",
        driver_version=snapshot.inventory.driver_version if snapshot is not None else None,
        taken_at=snapshot.taken_at if snapshot is not None else None,
        interval_s=stats.collect_interval_s, poll_duration_s=stats.last_duration_s,
        last_success=stats.last_success,
        poll_errors=_nonzero(stats.errors),
        scrapes=stats.scrapes,
        nvml_up=None if nvml_up is None else nvml_up == 1.0,
        nvml_errors=None if pod_scope else found.nvml_errors(),
        gpus_lost=None if lost is None else int(lost),
        kubelet=found.connection(KUBELET_UP, KUBELET_REFRESH_ERRORS, by="code",
                                 last_success=KUBELET_LAST_REFRESH_SUCCESS),
        api_server=found.connection(KUBERNETES_API_UP, KUBERNETES_API_ERRORS),
        dra=found.connection(DRA_SLICE_WATCH_UP, DRA_SLICE_WATCH_ERRORS),
        unattributed=tuple((r, n) for r, n in found.by_label(UNATTRIBUTED_DEVICES, "reason")
                           if n),
        collectors=source, fields_served=served, fields_skipped=skipped,
        connections_refused=tuple(
            (r, n) for r, n in found.by_label(HTTP_CONNECTIONS_REFUSED, "reason") if n),
    )


def _nonzero(counts: Mapping[str, int]) -> tuple[tuple[str, int], ...]:
    return tuple((k, n) for k, n in sorted(counts.items()) if n)

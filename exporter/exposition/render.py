"""The exposition bodies rendered from a snapshot, once per poll.

Both wire formats are produced from one list of families so they can never disagree. dcgm
field counters keep their names without `_total` (dashboards match on them); since
OpenMetrics requires `_total` on counters, they are typed `unknown` there.
"""

from __future__ import annotations

import gzip
import math
import zlib
from collections.abc import Iterable
from dataclasses import dataclass

from exporter import label_registry as names
from exporter.devices.clock_events import CLOCK_EVENTS_COUNT_FIELD
from exporter.devices.model import Entity, EntityKey
from exporter.exposition import exp_fields
from exporter.exposition.exp_fields import XID_COUNT_FIELD
from exporter.exposition.labels import (
    DEFAULT_STYLE,
    LabelStyle,
    entity_labels,
    format_labels,
    link_labels,
    pod_labels,
    with_xid_attributes,
)
from exporter.fields.catalog import MetricType, Reader, Scope
from exporter.k8s.hpc_jobs import HPC_JOB_LABEL, NO_JOBS, JobMap
from exporter.k8s.virtual_gpus import within
from exporter.sampling.snapshot import Snapshot
from exporter.selfmetrics import GPU_FAULT, XID_ERRORS, XID_LAST_SEEN
from exporter.series import Family, FamilyType, Labels, Sample

TEXT_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
OPENMETRICS_CONTENT_TYPE = "application/openmetrics-text; version=1.0.0; charset=utf-8"

GZIP_LEVEL = 1
"""Scrape bodies are small and re-compressed every poll: speed matters more than ratio."""


class OpenGzip:
    """A body compressed as the start of one gzip member, flushed but not finished, so that
    a scrape can append a few lines of its own (`finish`) without compressing the body
    again: the copy of the compressor's state and the tail are all it pays for."""

    __slots__ = ("_state", "head")

    def __init__(self, body: bytes) -> None:
        state = zlib.compressobj(GZIP_LEVEL, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
        self.head = state.compress(body) + state.flush(zlib.Z_SYNC_FLUSH)
        self._state = state

    def finish(self, tail: bytes) -> bytes:
        """Return the gzip member of the body followed by `tail`. It works on a copy of the
        compressor, so several threads may call it at once."""
        state = self._state.copy()
        return self.head + state.compress(tail) + state.flush()


@dataclass(frozen=True, slots=True)
class Rendered:
    """One poll's exposition in every form a scrape may ask for."""

    text: bytes
    text_gzip: bytes
    openmetrics: bytes | None = None
    """None when OpenMetrics is not served (`--web.enable-openmetrics` off): a poll then
    renders and compresses one body, not two."""
    openmetrics_gzip: bytes | None = None
    text_open: OpenGzip | None = None
    """With `appendable`: the text body as an unfinished gzip member, for scrapes that add
    families of their own after it (`--enable-exporter-metrics`)."""
    openmetrics_open: OpenGzip | None = None
    """The same for the OpenMetrics body without its `# EOF` line."""


def format_value(value: float) -> str:
    """Return a sample value as written in the exposition: whole numbers without a decimal point,
    others with six decimals, and NaN and infinities spelled as Prometheus spells them."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if value.is_integer() and abs(value) < 2**53:
        return str(int(value))
    return f"{value:.6f}"


def visible_entities(snapshot: Snapshot) -> list[Entity]:
    """Return the entities in exposition order, limited to those the attribution's scope lets
    through."""
    visible = snapshot.attribution.visible
    entities = sorted((*snapshot.inventory.gpus, *snapshot.inventory.instances),
                      key=lambda e: e.key)
    return [e for e in entities if visible is None or e.key in visible]


_FIELD_FAMILY_TYPE: dict[MetricType, FamilyType] = {
    MetricType.GAUGE: "gauge",
    # dcgm fields keep their name whatever their type, so a counter is a "dcgm-counter".
    MetricType.COUNTER: "dcgm-counter",
    MetricType.UNTYPED: "untyped",
}


SeriesLabels = dict[EntityKey, tuple[Labels, ...]]
"""The label sets of each entity's series, by entity key: one, or one per HPC job on the entity."""


def device_families(snapshot: Snapshot, style: LabelStyle = DEFAULT_STYLE,
                    jobs: JobMap = NO_JOBS) -> list[Family]:
    """Return the DCGM_* families, in the order of the collectors file."""
    labels, unheld = _series_labels(snapshot, style, jobs)
    families: list[Family] = []
    for enabled in snapshot.collectors.fields:
        spec = enabled.spec
        if enabled.type is MetricType.LABEL:
            continue
        if spec.name == XID_COUNT_FIELD:
            samples = exp_fields.xid_window_samples(snapshot.readings, labels,
                                                    _mig_parents(snapshot))
        elif spec.name in _EXP_SAMPLES:
            samples = _EXP_SAMPLES[spec.name](snapshot.readings, labels)
        elif spec.name == CLOCK_EVENTS_COUNT_FIELD:
            samples = _clock_event_samples(snapshot, labels)
        elif spec.reader is Reader.XID_EVENTS and spec.part is None:
            # The last XID code, under any of its names, with `err_code` and `err_msg` labels.
            samples = with_xid_attributes(_field_samples(snapshot, spec.name, labels, unheld))
        elif spec.scope is Scope.LINK:
            samples = _link_samples(snapshot, spec.name, labels, style)
        elif spec.scope is Scope.PEER:
            samples = _peer_samples(snapshot, spec.name, labels)
        else:
            samples = _field_samples(snapshot, spec.name, labels, unheld)
        if samples:
            families.append(Family(spec.name, _FIELD_FAMILY_TYPE[enabled.type], enabled.help,
                                   samples))
    families.extend(_xid_total_families(snapshot, labels))
    families.extend(fault_families(snapshot))
    return families


def fault_families(snapshot: Snapshot) -> list[Family]:
    """Return gpu_exporter_gpu_fault: one series of 1 per held fault, on the GPUs this view
    shows (all on a node-wide view; a GPU lost from the inventory keeps its faults)."""
    visible = snapshot.attribution.visible
    shown = None if visible is None else {gpu for gpu, _ in visible}
    faults = [f for f in snapshot.faults if shown is None or f.gpu in shown]
    if not faults:
        return []
    return [GPU_FAULT.family(
        GPU_FAULT.sample(1.0, gpu=str(f.gpu), UUID=f.uuid, source=f.source, code=f.code,
                         name=f.name, action=f.action, fatal=str(f.fatal).lower(),
                         cleared_by=f.cleared_by.value)
        for f in faults)]


_EXP_SAMPLES = {
    exp_fields.XID_TOTAL_FIELD: exp_fields.xid_total_samples,
    exp_fields.CLOCK_EVENTS_TOTAL_FIELD: exp_fields.clock_event_total_samples,
    exp_fields.HEALTH_FIELD: exp_fields.health_samples,
}


def _mig_parents(snapshot: Snapshot) -> frozenset[int]:
    """Return the GPUs whose values are per MIG GPU instance, that is, those that have instances."""
    return frozenset(i.gpu for i in snapshot.inventory.instances)


def _per_job(labels: Labels, jobs: tuple[str, ...]) -> tuple[Labels, ...]:
    if not jobs:
        return (labels,)
    return tuple((*labels, (HPC_JOB_LABEL, job)) for job in jobs)


def _field_samples(snapshot: Snapshot, name: str, labels: SeriesLabels, unheld: SeriesLabels
                   ) -> tuple[Sample, ...]:
    """Return the samples of a device or GPU-instance field: the entity's value on each of its
    label sets. For a field that the holders of a virtual GPU split (`Attribution.split`), the
    device's value comes without pod labels, then each holder's own part follows (none where that
    part is unknown)."""
    values = snapshot.readings.values
    split = snapshot.attribution.split
    if not split:  # No holder splits any field (the common case): keep this path cheap.
        return tuple(Sample(series, v) for key, label_sets in labels.items()
                     if (v := values.get(key, {}).get(name)) is not None
                     for series in label_sets)
    samples: list[Sample] = []
    for key, label_sets in labels.items():
        value = values.get(key, {}).get(name)
        if value is None:
            continue
        parts = split.get(key, {}).get(name)
        per_holder = len(unheld.get(key, ()))
        if parts is None or per_holder == 0 or len(parts) * per_holder != len(label_sets):
            samples += [Sample(series, value) for series in label_sets]
            continue
        samples += [Sample(series, value) for series in unheld[key]]
        for i, part in enumerate(within(value, parts)):
            if part is not None:
                samples += [Sample(series, part)
                            for series in label_sets[i * per_holder:(i + 1) * per_holder]]
    return tuple(samples)


def _series_labels(snapshot: Snapshot, style: LabelStyle, jobs: JobMap
                   ) -> tuple[SeriesLabels, SeriesLabels]:
    """Return two label sets by entity key. The first holds the full label sets, in exposition
    order: visible entities, then those of GPUs that left the inventory (a GPU that fell off the
    bus keeps its XID history); an entity has one label set, or with virtual GPUs one per pod
    sharing it. The second holds, for each entity whose holders split some fields, its label sets
    without a holder's labels."""
    driver: Labels = ()
    if (version := snapshot.inventory.driver_version) is not None:
        # The driver version labels series under each name the collectors file gives its field
        # (DCGM_FI_DRIVER_VERSION, ...).
        driver = tuple((f.spec.name, version) for f in snapshot.collectors.fields
                       if f.spec.reader is Reader.DRIVER)
    read = snapshot.readings.labels

    def label_fields(key: EntityKey) -> Labels:
        """Return the entity's label-type fields, sorted by name as dcgm-exporter prints them."""
        if not read.get(key):
            return driver
        return tuple(sorted((*driver, *read[key].items())))

    owners = snapshot.attribution.owners
    host = snapshot.host
    sharers = snapshot.attribution.sharers
    split = snapshot.attribution.split
    containers = snapshot.attribution.containers
    labels: SeriesLabels = {}
    unheld: SeriesLabels = {}
    for e in visible_entities(snapshot):
        base = entity_labels(e, host, style) + label_fields(e.key)
        refs = sharers.get(e.key) or (owners.get(e.key),)
        labels[e.key] = tuple(series for ref in refs
                              for series in _per_job(base + pod_labels(ref, style),
                                                     jobs.get(e.key, ())))
        # With container labels from the runtime, each container holding the device gets its
        # own copy of the series; the series without a container label stays as well.
        if e.key in containers:
            labels[e.key] += tuple(series for name in containers[e.key]
                                   for series in _per_job((*base, (names.CONTAINER, name)),
                                                          jobs.get(e.key, ())))
        if e.key in split and e.key in sharers:
            unheld[e.key] = _per_job(base, jobs.get(e.key, ()))
    visible = snapshot.attribution.visible
    present = {g.gpu for g in snapshot.inventory.gpus}
    for key, entity in sorted(snapshot.readings.known.items()):
        if key[0] not in present and (visible is None or key in visible):
            labels[key] = _per_job(entity_labels(entity, host, style) + label_fields(key),
                                   jobs.get(key, ()))
    return labels, unheld


def _link_samples(snapshot: Snapshot, name: str, base: SeriesLabels, style: LabelStyle
                  ) -> tuple[Sample, ...]:
    """Return the samples of a link field: each link's labels, then the labels its GPU's series
    carry after the GPU's own (label-type fields, pod labels, HPC job), once per label set of the
    GPU."""
    samples = []
    for (gpu, link), link_values in sorted(snapshot.readings.links.items()):
        value = link_values.get(name)
        entity = snapshot.inventory.by_index(gpu)
        gpu_label_sets = base.get((gpu, -1))
        if value is None or entity is None or gpu_label_sets is None:
            continue
        own = len(entity_labels(entity, snapshot.host, style))
        prefix = link_labels(entity, link, snapshot.host)
        samples += [Sample(prefix + labels[own:], value) for labels in gpu_label_sets]
    return tuple(samples)


_P2P_STATUS_NAMES = ("OK", "ChipsetNotSupported", "GPUNotSupported", "TopologyNotSupported",
                     "DisabledByRegKey", "NotSupported")
"""nvmlGpuP2PStatus_t as dcgm-exporter's `link_status` label spells it; later codes:
Unknown."""


def _peer_samples(snapshot: Snapshot, name: str, base: SeriesLabels) -> tuple[Sample, ...]:
    """Return the samples of a GPU-pair field: the GPU's series labels, then `link_status` and
    `peer_gpu`, in dcgm-exporter's order."""
    samples = []
    for (gpu, peer), pair_values in sorted(snapshot.readings.peers.items()):
        value = pair_values.get(name)
        if value is None:
            continue
        status = int(value)
        status_name = _P2P_STATUS_NAMES[status] if 0 <= status < len(
            _P2P_STATUS_NAMES) else "Unknown"
        samples += [Sample((*series, (names.LINK_STATUS, status_name), (names.PEER_GPU, str(peer))),
                           value) for series in base.get((gpu, -1), ())]
    return tuple(samples)


def _clock_event_samples(snapshot: Snapshot, base: SeriesLabels) -> tuple[Sample, ...]:
    window = exp_fields.window_label(snapshot.readings.clock_events_window_s)
    return tuple(
        Sample((*series, *(((names.CLOCK_EVENT, c.reason),) if c.reason else ()), *window),
               float(c.count))
        for c in snapshot.readings.clock_events
        for series in base.get(c.entity_key, ())
    )


def _xid_total_families(snapshot: Snapshot, base: SeriesLabels) -> list[Family]:
    totals = [(t, series) for t in snapshot.readings.xid_totals
              for series in base.get(t.entity_key, ())]
    if not totals:
        return []
    return [
        XID_ERRORS.family(XID_ERRORS.device_sample(series, float(t.total), xid=str(t.xid))
                          for t, series in totals),
        XID_LAST_SEEN.family(XID_LAST_SEEN.device_sample(series, t.last_seen, xid=str(t.xid))
                             for t, series in totals),
    ]


def _render(families: Iterable[Family], openmetrics: bool, label_text: dict[Labels, str]
            ) -> bytes:
    out: list[str] = []
    for fam in families:
        name = fam.name
        # The word on the TYPE line: "dcgm-counter" is not a Prometheus type, so it is mapped.
        kind: str = fam.type
        if kind == "dcgm-counter":
            kind = "unknown" if openmetrics else "counter"
            sample_name = name
        elif kind == "untyped":
            kind = "unknown" if openmetrics else kind
            sample_name = name
        elif kind == "counter":
            sample_name = name + "_total"
            if not openmetrics:
                name = sample_name
        else:
            sample_name = name
        help_text = fam.help.replace("\\", "\\\\").replace("\n", "\\n")
        out.append(f"# HELP {name} {help_text}\n# TYPE {name} {kind}\n")
        for s in fam.samples:
            # Every entity's label set recurs in each family: format it once per poll.
            labels = label_text.get(s.labels)
            if labels is None:
                labels = label_text[s.labels] = format_labels(s.labels)
            out.append(f"{sample_name}{labels} {format_value(s.value)}\n")
    if openmetrics:
        out.append("# EOF\n")
    return "".join(out).encode()


OPENMETRICS_EOF = b"# EOF\n"


def render(families: list[Family], openmetrics: bool = True, appendable: bool = False
           ) -> Rendered:
    """Render the text format 0.0.4 and, unless `openmetrics` is False, OpenMetrics, each also
    gzipped. With `appendable`, each gzipped body is also kept as an unfinished gzip member
    (`Rendered.text_open`), and the gzipped bodies are those members finished (still one
    compression each)."""
    label_text: dict[Labels, str] = {}
    text = _render(families, False, label_text)
    if appendable:
        text_open = OpenGzip(text)
        text_gzip = text_open.finish(b"")
    else:
        text_open, text_gzip = None, gzip.compress(text, GZIP_LEVEL, mtime=0)
    if not openmetrics:
        return Rendered(text, text_gzip, text_open=text_open)
    om = _render(families, True, label_text)
    if not appendable:
        return Rendered(text, text_gzip, om, gzip.compress(om, GZIP_LEVEL, mtime=0))
    om_open = OpenGzip(om[:-len(OPENMETRICS_EOF)])
    return Rendered(text, text_gzip, om, om_open.finish(OPENMETRICS_EOF), text_open, om_open)

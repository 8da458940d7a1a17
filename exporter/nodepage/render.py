"""The node page's HTML: GPU cards, MIG layouts drawn to scale, the exporter's own state.

Everything that depends only on the poll is rendered once per poll (`PollHtml`); what
changes with every request (the poll's age, readiness, when to refresh) is spliced in by
`exporter.nodepage.page`. Every text from outside (pod names, models, file paths) is
escaped. The page has no script: it reloads itself with a meta refresh timed for just
after the next poll, which keeps its scroll position.
"""

from __future__ import annotations

import html
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from exporter.nodepage.status import EVENT_COUNT_FIELDS
from exporter.nodepage.style import CSS, MAX_SLICES
from exporter.nodepage.view import (
    Activity,
    Connection,
    ExporterView,
    FaultView,
    FieldServed,
    GpuView,
    Holder,
    InstanceView,
    Memory,
    NodeView,
)

WebRows = Sequence[tuple[str, str]]
"""The web config in force, as (setting, value) rows without secrets."""

_NOTABLE_CLOCK_EVENTS = frozenset({"gpu_idle", "clocks_setting", "sync_boost",
                                   "display_clocks"})
"""Reasons that are routine; the others (power cap, thermal, power brake) are flagged."""


def esc(text: object) -> str:
    """Return the text escaped for HTML, quotes included, so that it is safe in attributes."""
    return html.escape(str(text), quote=True)


def utc(ts: float) -> str:
    """Return a Unix time as a UTC date and time to the second."""
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(ts))


def stamped(ts: float) -> str:
    """Return the time as the page shows it (to the second), in a `<time>` element whose
    `datetime` holds it to the millisecond, so that a reader can tell apart two polls that
    fell in the same second."""
    millis = round(ts * 1000)
    second = time.gmtime(millis // 1000)
    precise = f'{time.strftime("%Y-%m-%dT%H:%M:%S", second)}.{millis % 1000:03d}Z'
    return f'<time datetime="{precise}">{time.strftime("%Y-%m-%d %H:%M:%S UTC", second)}</time>'


def duration(seconds: float) -> str:
    """Return a span of time in the unit a reader takes in at a glance: seconds, minutes,
    hours or days (a negative span counts as 0)."""
    seconds = max(0.0, seconds)
    if seconds < 90:
        return f"{seconds:.1f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    if seconds < 172800:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.0f} d"


def _gib(mib: float) -> str:
    return f"{mib / 1024:.1f}"


def _meter(value: float, maximum: float, high: float | None = None, label: str = "") -> str:
    high_attr = f' high="{high:g}"' if high is not None else ""
    return (f'<meter min="0" max="{maximum:g}" value="{min(value, maximum):g}"{high_attr}'
            f' aria-label="{esc(label)}"></meter>')


def _activity(activity: Activity | None, *, small: bool = False) -> str:
    if activity is None:
        return '<span class="muted">not read</span>'
    text = f"{activity.ratio * 100:.0f} %"
    if small:
        return _meter(activity.ratio, 1.0, label="activity") + text
    # NVML's: GPU_UTIL, or the counterpart served as a DCGM_FI_PROF_* field without GPM
    source = ("GPM" if activity.source == "gpm"
              else "NVML" if "PROF" in activity.field.upper() else "GPU_UTIL")
    return (_meter(activity.ratio, 1.0, label="activity") + text +
            f' <small title="{esc(activity.field)}">{source}</small>')


def _memory(memory: Memory | None) -> str:
    if memory is None:
        return '<span class="muted">not read</span>'
    if memory.total_mib is None or memory.total_mib <= 0:
        return f"{_gib(memory.used_mib)} GiB used"
    return (_meter(memory.used_mib, memory.total_mib, 0.9 * memory.total_mib, "framebuffer")
            + f"{_gib(memory.used_mib)} / {_gib(memory.total_mib)} GiB")


def _vital(name: str, value: str, klass: str = "") -> str:
    attr = f' class="{klass}"' if klass else ""
    return f"<div{attr}><dt>{name}</dt><dd>{value}</dd></div>"


def _number(value: float | None, unit: str, digits: int = 0) -> str:
    if value is None:
        return '<span class="muted">not read</span>'
    return f"{value:.{digits}f} {unit}"


def _power(gpu: GpuView) -> str:
    if gpu.power_w is None:
        return '<span class="muted">not read</span>'
    if gpu.power_limit_w is None or gpu.power_limit_w <= 0:
        return f"{gpu.power_w:.0f} W"
    return (_meter(gpu.power_w, gpu.power_limit_w, 0.9 * gpu.power_limit_w, "power")
            + f"{gpu.power_w:.0f} / {gpu.power_limit_w:.0f} W")


def _clock_events(events: tuple[str, ...] | None) -> str:
    if events is None:
        return '<span class="muted">not read</span>'
    if not events:
        return "none"
    return "".join(
        f'<span class="tag{"" if e in _NOTABLE_CLOCK_EVENTS else " warn"}">{esc(e)}</span>'
        for e in events)


def _ecc(gpu: GpuView) -> str:
    if gpu.ecc_sbe is None and gpu.ecc_dbe is None:
        return '<span class="muted">not read</span>'
    parts = []
    for name, value in (("SBE", gpu.ecc_sbe), ("DBE", gpu.ecc_dbe)):
        if value is not None:
            bad = name == "DBE" and value > 0
            text = f"{name} {value:.0f}"
            parts.append(f'<span class="tag bad">{text}</span>' if bad else text)
    if gpu.row_remap_failure:
        parts.append('<span class="tag bad">row remap failed</span>')
    return " · ".join(parts)


def _xid(gpu: GpuView, taken_at: float | None) -> str:
    if gpu.xid is None:
        return "none since start"
    seen = gpu.xid
    where = f" on GI {seen.gpu_instance_id}" if seen.gpu_instance_id is not None else ""
    before = f" ({duration(taken_at - seen.at)} before the poll)" if taken_at else ""
    events = "event" if gpu.xid_events == 1 else "events"
    return (f'<span class="tag bad">XID {seen.xid}</span>{where} at {utc(seen.at)}{before}'
            f' <small>{gpu.xid_events} {events} since start</small>')


_CLEARED_BY_TEXT = {
    "holder-exit": "until the processes holding the GPU exit",
    "gpu-reset": "until the GPU is reset",
    "health-pass": "until the health check passes",
    "reboot": "until the node reboots",
}


def _fault(f: FaultView) -> str:
    what = f"XID {esc(f.code)}" if f.source == "xid" else esc(f.code)
    klass = "tag bad" if f.fatal else "tag"
    return (f'<li data-source="{esc(f.source)}" data-code="{esc(f.code)}" '
            f'data-action="{esc(f.action)}"><span class="{klass}">{what}</span> '
            f"{esc(f.name)} <b>{esc(f.action)}</b> "
            f"<small>since {utc(f.since)}, held "
            f"{esc(_CLEARED_BY_TEXT.get(f.cleared_by, f.cleared_by))}</small></li>")


def _faults(gpu: GpuView) -> str:
    if not gpu.faults:
        return ""
    items = "".join(_fault(f) for f in gpu.faults)
    return (f'<div class="faults"><h4>faults held</h4>'
            f'<ul class="faults">{items}</ul></div>')


def _holder(h: Holder) -> str:
    detail = [esc(h.container)]
    if h.replica is not None:
        detail.append(f"replica {esc(h.replica)}")
    use = []
    if h.memory_mib is not None:
        use.append(f"{_gib(h.memory_mib)} GiB")
    if h.sm_ratio is not None:
        use.append(f"SM {h.sm_ratio * 100:.0f} %")
    used = f' <span class="use">{" · ".join(use)}</span>' if use else ""
    return (f'<li data-namespace="{esc(h.namespace)}" data-pod="{esc(h.pod)}">'
            f"{esc(h.namespace)}/<b>{esc(h.pod)}</b> <small>{' · '.join(detail)}</small>"
            f"{used}</li>")


def _holders(gpu: GpuView) -> str:
    if gpu.sharing == "unknown":
        return ""
    if gpu.sharing == "free":
        return '<div class="holders"><h4>held by</h4><p class="muted">no pod</p></div>'
    title = "held by" if gpu.sharing == "exclusive" else f"shared by {len(gpu.holders)}"
    items = "".join(_holder(h) for h in gpu.holders)
    return f'<div class="holders"><h4>{title}</h4><ul class="holders">{items}</ul></div>'


def _block_owner(inst: InstanceView) -> str:
    if inst.sharing == "free":
        return "no pod"
    if not inst.holders:
        return ""
    first = inst.holders[0].pod
    return first + (f" +{len(inst.holders) - 1}" if len(inst.holders) > 1 else "")


def _block(inst: InstanceView) -> str:
    span = min(inst.slices, MAX_SLICES)
    cis = "+".join(f"{s}c" for s in inst.compute_slices) if len(inst.compute_slices) > 1 else ""
    who = _block_owner(inst)
    owners = ", ".join(f"{h.namespace}/{h.pod}" for h in inst.holders) or who
    title = f"GI {inst.gpu_instance_id} · {inst.profile}" + (f" · {owners}" if owners else "")
    activity = _meter(inst.activity.ratio, 1.0, label="activity") if inst.activity else ""
    return (f'<div class="gi span{span} {inst.sharing}" role="listitem" '
            f'data-gi="{inst.gpu_instance_id}" data-slices="{inst.slices}" '
            f'data-profile="{esc(inst.profile)}" title="{esc(title)}">'
            f"<b>{esc(inst.profile)}</b> GI {inst.gpu_instance_id}"
            f'{" · " + cis if cis else ""}{activity} '
            f'<span class="who">{esc(who)}</span></div>')


def _layout(gpu: GpuView) -> str:
    if not gpu.instances:
        return ""
    cols = min(gpu.mig_slices, MAX_SLICES)
    blocks = [_block(i) for i in gpu.instances]
    rest = gpu.mig_slices - sum(i.slices for i in gpu.instances)
    if rest > 0:
        kind, text = ("hidden", "not this pod's") if gpu.state == "partial" else \
            ("unused", "no instance")
        blocks.append(f'<div class="gi span{min(rest, MAX_SLICES)} {kind}" '
                      f'data-slices="{rest}"><b>{rest} slice{"s" if rest > 1 else ""}</b> '
                      f"{text}</div>")
    rows = "".join(
        f'<tr data-gi="{i.gpu_instance_id}"><td class="num">{i.gpu_instance_id}</td>'
        f"<td>{esc(i.profile)}</td><td>{_memory(i.memory)}</td>"
        f"<td>{_activity(i.activity, small=True)}</td>"
        f'<td><ul class="holders">{"".join(_holder(h) for h in i.holders)}</ul>'
        f'{"<small>no pod</small>" if i.sharing == "free" else ""}</td></tr>'
        for i in gpu.instances)
    return (f'<div class="layout"><h4>MIG layout: {gpu.mig_slices} compute slices</h4>'
            f'<div class="mig cols{cols}" role="list" aria-label="MIG layout of GPU '
            f'{gpu.gpu}">{"".join(blocks)}</div>'
            f'<table class="instances"><thead><tr><th class="num">GI</th><th>profile</th>'
            f"<th>framebuffer</th><th>activity</th><th>held by</th></tr></thead>"
            f"<tbody>{rows}</tbody></table></div>")


def _card(gpu: GpuView, taken_at: float | None) -> str:
    badges = []
    if gpu.state == "lost":
        badges.append('<span class="badge bad">lost</span>')
    if gpu.instances:
        badges.append('<span class="badge">MIG</span>')
    if gpu.state == "partial":
        badges.append('<span class="badge">this pod\'s instances only</span>')
    head = (f'<div class="card-head"><h3>GPU {gpu.gpu} <span class="model">'
            f'{esc(gpu.model)}</span></h3> <code title="{esc(gpu.uuid)}">'
            f'{esc(gpu.uuid[:12])}</code> <small>{esc(gpu.pci_bus_id)}</small> '
            f'{" ".join(badges)}</div>')
    if gpu.state == "lost":
        body = ('<p class="lostnote">Lost: the GPU answered GPU_IS_LOST and is left out '
                'until it answers again.</p>'
                f'<dl class="vitals">{_vital("XID", _xid(gpu, taken_at))}</dl>')
    elif gpu.state == "partial":
        body = f'<dl class="vitals">{_vital("XID", _xid(gpu, taken_at))}</dl>'
    else:
        mig = bool(gpu.instances)
        activity = "per instance" if mig and gpu.activity is None else _activity(gpu.activity)
        memory = "per instance" if mig and gpu.memory is None else _memory(gpu.memory)
        temps = _number(gpu.temperature_c, "°C")
        if gpu.memory_temperature_c is not None:
            temps += f" <small>memory {gpu.memory_temperature_c:.0f} °C</small>"
        body = ('<dl class="vitals">' + "".join((
            _vital("activity", activity), _vital("framebuffer", memory),
            _vital("temperature", temps), _vital("power", _power(gpu)),
            _vital("SM clock", _number(gpu.sm_clock_mhz, "MHz")),
            _vital("clock events", _clock_events(gpu.clock_events)),
            _vital("ECC (volatile)", _ecc(gpu)), _vital("XID", _xid(gpu, taken_at)),
        )) + "</dl>")
    klass = ("" if gpu.state == "ok" else f" {gpu.state}") + (" mig" if gpu.instances else "")
    return (f'<article class="gpu{klass}" id="gpu-{gpu.gpu}" data-gpu="{gpu.gpu}" '
            f'data-state="{gpu.state}">{head}{body}{_faults(gpu)}{_layout(gpu)}'
            f'{_holders(gpu)}</article>')


def _dl(rows: Iterable[tuple[str, str]]) -> str:
    return "<dl>" + "".join(f"<dt>{k}</dt><dd>{v}</dd>" for k, v in rows) + "</dl>"


def _counts(counts: Iterable[tuple[str, int]]) -> str:
    listed = [f"{esc(k)} {n}" for k, n in counts]
    return ", ".join(listed) if listed else "none"


def _connection(conn: Connection | None, off: str) -> str:
    if conn is None:
        return f'<span class="muted">{off}</span>'
    state = '<span class="up">up</span>' if conn.up else '<span class="down">down</span>'
    last = f", last refresh {utc(conn.last_success)}" if conn.last_success else ""
    errors = f"; errors: {_counts(conn.errors)}" if conn.errors else ""
    return state + last + errors


def _nvml_errors(ex: ExporterView) -> str:
    if ex.nvml_errors is None:
        return '<p class="muted">Not shown in pod scope: the counts cover every tenant.</p>'
    if not ex.nvml_errors:
        return "<p>none</p>"
    rows = "".join(f"<tr><td><code>{esc(e.function)}</code></td><td>{esc(e.code)}</td>"
                   f'<td class="num">{e.count}</td></tr>' for e in ex.nvml_errors)
    return ('<table><thead><tr><th>function</th><th>code</th><th class="num">calls</th>'
            f"</tr></thead><tbody>{rows}</tbody></table>")


def _field_count(f: FieldServed) -> tuple[str, str]:
    """(class, text): a field that read nothing is flagged, unless it counts events that
    have not happened."""
    if f.entities:
        return "some", str(f.entities)
    if f.name in EVENT_COUNT_FIELDS:
        return "some", "no events"
    return "none", "no value"


def _fields(ex: ExporterView) -> str:
    items = "".join(
        f'<li class="{klass}"><code>{esc(f.name)}</code><span>{text}</span></li>'
        for f in ex.fields_served for klass, text in (_field_count(f),))
    skipped = "".join(f"<li>{esc(w)}</li>" for w in ex.fields_skipped)
    skipped_part = (f"<h3>Skipped ({len(ex.fields_skipped)})</h3>"
                    f'<ul class="skipped">{skipped}</ul>') if skipped else ""
    return (f'<div class="panel wide" id="fields"><h3>Fields served '
            f"({len(ex.fields_served)}) <small>from {esc(ex.collectors)}; devices with a "
            f'value in this poll</small></h3><ul class="fields">{items}</ul>'
            f"{skipped_part}</div>")


def _exporter(ex: ExporterView, web: WebRows) -> str:
    nvml = "not read yet" if ex.nvml_up is None else (
        '<span class="up">up</span>' if ex.nvml_up else '<span class="down">down</span>')
    poll = [
        ("last poll", stamped(ex.taken_at) if ex.taken_at else "none yet"),
        ("interval", f"{ex.interval_s:g} s"),
        ("duration", f"{ex.poll_duration_s * 1000:.1f} ms" if ex.poll_duration_s else "-"),
        ("failed polls", _counts(ex.poll_errors)),
        ("scrapes served", str(ex.scrapes)),
        ("backend", esc(ex.backend) or "-"),
        ("version", esc(ex.version)),
        ("driver", esc(ex.driver_version or "-")),
        ("scope", "this pod's devices only" if ex.scope == "pod" else "node"),
    ]
    conns = [
        ("NVML", nvml),
        ("GPUs lost", "-" if ex.gpus_lost is None else str(ex.gpus_lost)),
        ("kubelet", _connection(ex.kubelet, "off (no pod attribution)")),
        ("API server", _connection(ex.api_server, "not used")),
        ("DRA slices", _connection(ex.dra, "not watched")),
        ("unattributed", _counts(ex.unattributed)),
    ]
    web_rows = [(esc(k), esc(v)) for k, v in web]
    web_rows.append(("refused connections", _counts(ex.connections_refused)))
    return ('<h2 class="section" id="exporter">Exporter</h2><div class="panels">'
            f'<div class="panel" id="poll"><h3>Poll</h3>{_dl(poll)}</div>'
            f'<div class="panel" id="connections"><h3>Connections</h3>{_dl(conns)}</div>'
            f'<div class="panel" id="nvml-errors"><h3>NVML errors by function</h3>'
            f"{_nvml_errors(ex)}</div>"
            f'<div class="panel" id="web"><h3>Web config in force</h3>{_dl(web_rows)}</div>'
            f"{_fields(ex)}</div>")


@dataclass(frozen=True, slots=True)
class PollHtml:
    """The page of one poll around the slots filled per request: `head` + refresh + `top`
    + status + `body`."""

    head: str
    top: str
    body: str


def poll_html(view: NodeView, web: WebRows) -> PollHtml:
    """Return the parts of the page that depend only on the poll and the web config, built
    once per poll; the page adds what changes with each request between them."""
    ex = view.exporter
    title = f"{ex.host} · gpu-exporter" if ex.host else "gpu-exporter"
    head = ('<!doctype html><html lang="en"><head><meta charset="utf-8">'
            '<meta name="viewport" content="width=device-width,initial-scale=1">'
            f"<title>{esc(title)}</title>")
    gpus = [g for g in view.gpus if g.state != "lost"]
    instances = sum(len(g.instances) for g in view.gpus)
    lost = len(view.gpus) - len(gpus)
    summary = [f"{len(gpus)} GPU{'s' if len(gpus) != 1 else ''}"]
    if instances:
        summary.append(f"{instances} MIG instance{'s' if instances != 1 else ''}")
    if lost:
        summary.append(f'<span class="down">{lost} lost</span>')
    if ex.driver_version:
        summary.append(f"driver {esc(ex.driver_version)}")
    if ex.scope == "pod":
        summary.append("pod scope")
    top = ('<link rel="icon" href="data:,">'
           f"<style>{CSS}</style></head><body>"
           f'<header class="top"><h1>{esc(ex.host or "gpu-exporter")} '
           f"<span>gpu-exporter {esc(ex.version)}</span></h1>"
           f'<p>{" · ".join(summary)}</p>'
           '<nav><a href="/metrics">/metrics</a> <a href="/api/node">/api/node</a> '
           '<a href="/ready">/ready</a> <a href="/health">/health</a></nav>')
    cards = "".join(_card(g, ex.taken_at) for g in view.gpus)
    if not cards:
        why = (": NVML is down, the last poll read no device" if ex.nvml_up is False else
               " (this pod holds none)" if ex.scope == "pod" else "")
        cards = f'<p class="muted" id="no-devices">No devices in this view{why}.</p>'
    body = (f'<main><h2 class="section" id="gpus">GPUs</h2><section class="gpus">{cards}'
            f"</section>{_exporter(ex, web)}</main></body></html>")
    return PollHtml(head, top, body)

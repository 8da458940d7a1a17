"""The advice as one self-contained HTML file: per pool the GPUs freed, per node each GPU as it
is held today and as advised, drawn to scale in compute slices the way the node page draws
MIG (its stylesheet and grid classes: `exporter.nodepage.style`), and the holders.

No script, no external file: it opens from a disk, a mail or an artifact store alike.
"""

from __future__ import annotations

import html

from exporter.advise.demand import SHARED, TIME_SLICING, WHOLE
from exporter.advise.plan import FREE, MIG, Advice, GpuPlan, NodePlan, PoolPlan
from exporter.advise.render import gpu_text, listed, resource, unchanged_count, utc
from exporter.nodepage.style import CSS, MAX_SLICES

EXTRA_CSS = """
main{max-width:1400px;margin:0 auto;padding:16px}
h1{font-size:20px;margin:4px 0}h2{font-size:16px;margin:18px 0 6px}
.node{background:var(--card);border:1px solid var(--line);border-radius:8px;padding:10px 14px;
margin:0 0 12px}
.node h3{margin:0 0 6px;font-size:14px}
.pair{display:grid;grid-template-columns:1fr 1fr;gap:14px}
.gpu{margin:0 0 6px}
.gpu small{color:var(--muted)}
.gi{min-height:44px}
.summary{font-size:15px}
code{font-family:var(--mono);font-size:12px}
"""


def esc(text: object) -> str:
    """Return `text` as a string escaped for HTML text or a quoted attribute value."""
    return html.escape(str(text), quote=True)


def _grid(blocks: list[tuple[int, str, str]], slices: int, label: str) -> str:
    """Return the HTML of one GPU drawn as `slices` columns, each block (span, CSS class, text)
    covering `span` of them; `label` names the drawing for screen readers."""
    cols = min(slices, MAX_SLICES)
    cells = "".join(f'<div class="gi span{min(span, MAX_SLICES)} {klass}" role="listitem" '
                    f'data-slices="{span}"><b>{esc(text)}</b></div>'
                    for span, klass, text in blocks)
    return (f'<div class="gpu"><div class="mig cols{cols}" role="list" '
            f'aria-label="{esc(label)}" data-cols="{cols}">{cells}</div></div>')


def _today(pool: PoolPlan, uuid: str, held: tuple[str, ...]) -> str:
    total = pool.model.compute_slices if pool.model and pool.model.compute_slices else 1
    label = f"today {uuid}"
    if held in ((WHOLE,), (SHARED,)) or not pool.model or not pool.model.mig_capable:
        return _grid([(total, "shared" if SHARED in held else "held", held[0])], total, label)
    blocks = [(pool.model.profile(p).compute_slices if pool.model.has_profile(p) else 1,
               "held", p) for p in held if p not in (WHOLE, SHARED)]
    rest = total - sum(b[0] for b in blocks)
    if rest > 0:
        blocks.append((rest, "unused", f"{rest} free"))
    return _grid(blocks, total, label)


def _advised(pool: PoolPlan, gpu: GpuPlan, index: int) -> str:
    model = pool.model
    total = model.compute_slices if model and model.compute_slices else 1
    label = f"advised GPU {index}"
    if gpu.kind == MIG and model is not None:
        blocks = [(model.profile(p).compute_slices, "held", p) for p in gpu.instances]
        rest = total - sum(b[0] for b in blocks)
        if rest > 0:
            blocks.append((rest, "unused", f"{rest} free"))
        return _grid(blocks, total, label)
    if gpu.kind == TIME_SLICING:
        replicas = min(gpu.replicas, MAX_SLICES)
        return _grid([(1, "shared", f"1/{gpu.replicas}")] * replicas, replicas, label)
    if gpu.kind == FREE:
        return _grid([(total, "unused", "freed")], total, label)
    return _grid([(total, "held", gpu_text(gpu))], total, label)


def _node(pool: PoolPlan, node: NodePlan) -> str:
    today = "".join(_today(pool, uuid, held) for uuid, held in node.now)
    idle = node.gpu_count - len(node.now)
    if idle > 0 and pool.model is not None:
        total = pool.model.compute_slices or 1
        today += "".join(_grid([(total, "free", "no pod")], total, "today idle")
                         for _ in range(idle))
    advised = "".join(_advised(pool, g, i) for i, g in enumerate(node.advised))
    config = " · ".join(f"<code>{esc(c)}</code>" for c in (node.mig_config, node.sharing_config)
                        if c)
    return (f'<section class="node" data-node="{esc(node.node)}"><h3>{esc(node.node)} '
            f"<small>{node.gpu_count} GPU{'s' if node.gpu_count != 1 else ''} {config}</small></h3>"
            f'<div class="pair"><div><h4>today</h4>{today}</div>'
            f"<div><h4>advised</h4>{advised}</div></div></section>")


def _pool_rows(advice: Advice) -> str:
    rows = []
    for p in advice.pools:
        money = "" if p.money_per_month is None else f"{p.money_per_month:,.2f}"
        rows.append(f"<tr><td>{esc(p.gpu_model)}</td><td class=num>{p.gpus_now}</td>"
                    f"<td class=num>{p.gpus_needed}</td><td class=num>{p.gpus_freed}</td>"
                    f"<td class=num>{money}</td></tr>")
    return ("<table><thead><tr><th>GPU model</th><th class=num>now</th>"
            "<th class=num>needed</th><th class=num>freed</th><th class=num>per month</th>"
            f"</tr></thead><tbody>{''.join(rows)}</tbody></table>")


def _holders(advice: Advice, everyone: bool) -> str:
    rows = "".join(
        f"<tr><td>{esc(f.holder.namespace)}/{esc(f.holder.pod)}</td><td>{esc(f.holder.node)}</td>"
        f"<td>{esc(f.holder.now)}</td><td>{esc(f.advice)}</td><td><code>{esc(resource(f))}"
        f"</code></td><td class=num>{f.holder.peak_framebuffer_mib:,.0f}</td>"
        f"<td>{esc(f.reason)}</td></tr>" for f in listed(advice, everyone))
    skipped = "".join(f"<li>{esc(f.holder.namespace)}/{esc(f.holder.pod)}: {esc(f.reason)}</li>"
                      for f in advice.fits if not f.advised)
    return (f"<p>{unchanged_count(advice)} holders unchanged.</p>"
            "<table><thead><tr><th>pod</th><th>node</th><th>now</th><th>advice</th>"
            "<th>resource</th><th class=num>peak MiB</th><th>why</th></tr></thead>"
            f"<tbody>{rows}</tbody></table>"
            + (f"<h2>Not advised</h2><ul>{skipped}</ul>" if skipped else ""))


def html_text(advice: Advice, everyone: bool = False) -> str:
    """Return the advice as one self-contained HTML page: the GPUs each pool frees, each node's
    GPUs as held today beside the advised layout, and the holders with why each was advised or
    not."""
    freed = advice.gpus_now - advice.gpus_needed
    money = advice.money_per_month
    nodes = "".join(f"<h2>{esc(p.gpu_model)}</h2>" + "".join(_node(p, n) for n in p.nodes)
                    for p in advice.pools if p.model is not None and p.nodes)
    return (
        "<!doctype html>\n<html lang=en><head><meta charset=utf-8>"
        "<meta name=viewport content='width=device-width,initial-scale=1'>"
        f"<title>GPU partition advice</title><style>{CSS}{EXTRA_CSS}</style></head>"
        f"<body><main><h1>GPU partition advice</h1><p>{utc(advice.start)} to "
        f"{utc(advice.end)}</p><p class=summary>GPUs held now <b>{advice.gpus_now}</b>, "
        f"needed <b>{advice.gpus_needed}</b>, freed <b>{freed}</b>"
        + (f", <b>{money:,.2f}</b> per month" if money is not None else "")
        + f"</p>{_pool_rows(advice)}{nodes}<h2>Holders</h2>{_holders(advice, everyone)}"
        "</main></body></html>\n")

"""The node page's stylesheet, inline in the page and allowed by its hash in the page's
Content-Security-Policy (no `unsafe-inline`, no external file, nothing for a CDN to serve).

Sizes come from classes, never from `style` attributes (a strict policy blocks those): a MIG
layout is a grid of `cols<N>` compute slices, each instance `span<N>` of them.
"""

from __future__ import annotations

import base64
import hashlib

MAX_SLICES = 8
"""Grid classes exist up to this many compute slices (MIG GPUs have 7, the A30 4)."""

_GRID = "\n".join(
    [f".cols{n}{{grid-template-columns:repeat({n},minmax(0,1fr))}}"
     for n in range(1, MAX_SLICES + 1)]
    + [f".span{n}{{grid-column:span {n}}}" for n in range(1, MAX_SLICES + 1)])

CSS = """
:root{color-scheme:light dark;--bg:#f6f7f9;--card:#fff;--ink:#1d2430;--muted:#5c6675;
--line:#dde1e7;--accent:#2f6fdf;--ok:#1f8a4c;--warn:#b86e00;--bad:#c62828;--free:#eef0f3;
--held:#dbe7fb;--shared:#e4dcfa;--mono:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace}
@media (prefers-color-scheme:dark){:root{--bg:#12151a;--card:#1b2027;--ink:#e6e9ee;
--muted:#9aa4b2;--line:#2c333d;--accent:#7aa7ff;--ok:#4cc27f;--warn:#f0a83a;--bad:#ff6b6b;
--free:#232930;--held:#22344f;--shared:#33294f}}
*{box-sizing:border-box}
body{margin:0;background:var(--bg);color:var(--ink);
font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif}
a{color:var(--accent)}
code,.mono{font-family:var(--mono);font-size:12.5px}
small,.muted{color:var(--muted)}
header.top{padding:14px 20px;border-bottom:1px solid var(--line);background:var(--card)}
header.top h1{margin:0 0 4px;font-size:20px}
header.top h1 span{font-weight:400;color:var(--muted)}
header.top p{margin:2px 0}
nav a{margin-right:8px}
.banner{margin:12px 20px 0;padding:10px 14px;border-radius:6px;font-weight:600;
background:var(--bad);color:#fff}
.banner.notice{background:var(--warn)}
main{padding:16px 20px 28px}
h2.section{font-size:16px;margin:22px 0 10px}
.gpus{display:grid;grid-template-columns:repeat(auto-fill,minmax(440px,1fr));gap:14px}
article.gpu{background:var(--card);border:1px solid var(--line);border-radius:8px;
padding:12px 14px;min-width:0}
article.gpu.lost{border:2px solid var(--bad)}
article.gpu.partial{border-style:dashed}
.card-head{display:flex;flex-wrap:wrap;align-items:baseline;gap:4px 10px;margin-bottom:8px}
.card-head h3{margin:0;font-size:15px}
.card-head h3 .model{font-weight:400}
.badge{display:inline-block;padding:0 7px;border-radius:9px;font-size:12px;
background:var(--free);color:var(--muted)}
.badge.bad,.tag.bad{background:var(--bad);color:#fff}
.tag{display:inline-block;padding:0 6px;margin:0 4px 2px 0;border-radius:4px;
font-size:12px;background:var(--free)}
.tag.warn{background:var(--warn);color:#fff}
article.gpu.mig{grid-column:1/-1}
dl.vitals{display:grid;grid-template-columns:repeat(auto-fill,minmax(190px,1fr));
gap:4px 16px;margin:0}
dl.vitals div{min-width:0}
dt{font-size:12px;color:var(--muted)}
dd{margin:0 0 4px;font-variant-numeric:tabular-nums}
meter{width:100%;height:10px;display:block;margin:2px 0}
.lostnote{color:var(--bad);font-weight:600;margin:4px 0 8px}
.layout h4,.holders h4{margin:12px 0 4px;font-size:12px;color:var(--muted);font-weight:600}
.mig{display:grid;gap:3px;border:1px solid var(--line);border-radius:6px;padding:3px}
.gi{border-radius:4px;padding:5px 7px;min-width:0;min-height:64px;overflow:hidden;
background:var(--held);font-size:12px;line-height:1.3}
.gi.shared{background:var(--shared)}
.gi.free,.gi.unused,.gi.hidden{background:var(--free);color:var(--muted)}
.gi.unused,.gi.hidden{background:repeating-linear-gradient(45deg,var(--free) 0 6px,
transparent 6px 12px)}
.gi b{display:block;font-size:12.5px}
.gi .who{display:block;white-space:nowrap;overflow:hidden;text-overflow:ellipsis}
.gi meter{height:6px}
table{border-collapse:collapse;width:100%;font-size:12.5px}
th,td{text-align:left;padding:3px 6px;border-bottom:1px solid var(--line);vertical-align:top}
th{color:var(--muted);font-weight:600}
td.num,th.num{text-align:right;font-variant-numeric:tabular-nums}
ul.holders{list-style:none;margin:0;padding:0}
ul.holders li{padding:2px 0;border-bottom:1px solid var(--line)}
.panels{display:grid;grid-template-columns:repeat(auto-fill,minmax(330px,1fr));gap:14px}
.panel{background:var(--card);border:1px solid var(--line);border-radius:8px;
padding:10px 14px;min-width:0}
.panel h3{margin:0 0 6px;font-size:14px}
.panel.wide{grid-column:1/-1}
.panel dl{display:grid;grid-template-columns:max-content 1fr;gap:2px 12px;margin:0}
.panel dd{margin:0;min-width:0;overflow-wrap:anywhere}
.up{color:var(--ok);font-weight:600}.down{color:var(--bad);font-weight:600}
ul.fields{columns:3 260px;margin:0;padding:0;list-style:none;font-size:12.5px}
ul.fields li{break-inside:avoid;display:flex;justify-content:space-between;gap:8px;
padding:1px 0;border-bottom:1px solid var(--line)}
ul.fields li.none{color:var(--warn)}
ul.skipped{margin:6px 0 0;padding-left:18px;font-size:12.5px}
""" + _GRID + "\n"


def csp_source_hash(text: str) -> str:
    """`'sha256-…'` of an inline element's text, as a Content-Security-Policy source."""
    digest = hashlib.sha256(text.encode()).digest()
    return f"'sha256-{base64.b64encode(digest).decode()}'"


CONTENT_SECURITY_POLICY = (
    f"default-src 'none'; style-src {csp_source_hash(CSS)}; img-src data:; "
    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
"""The page runs no script at all (it refreshes with a meta refresh); its one style element
is allowed by its hash."""

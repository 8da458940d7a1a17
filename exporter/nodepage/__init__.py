"""The node page: `/` for a person and `/api/node` as JSON, this node's GPUs, MIG layout,
holders, health and held faults, from the last poll only.

`build` turns one poll (its snapshot, counters and self-metric families) into the view of
`view`, plain immutable data, with `cards` (one card per GPU and its MIG instances),
`holders` (who holds each device) and `status` (the exporter's own state); `render` writes
the view as HTML with `style`'s stylesheet; `page` records each poll and answers both
paths. The web layer (`exporter.web.app`) routes the two paths to `page.NodePage`.
"""

"""`gpu-exporter advise`: measured use turned into the MIG layouts and time-slicing configs
that fit, with the GPUs and money they free. Never imported by `serve`.

The data flows one way: `history` reads each holder's use from Prometheus (`demand.Holder`),
`fitting` finds each one's smallest place, `packing` packs a pool's MIG instances into GPUs,
`plan` lays the GPUs onto nodes and counts what is freed, and `render`,
`operator_configs` and `layout_html` write the table, JSON, mig-parted, device-plugin and
HTML outputs; `cli` is the command.
"""

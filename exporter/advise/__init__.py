"""`gpu-exporter advise`: measured use turned into the MIG layouts and time-slicing configs
that fit, with the GPUs and money they free. Never imported by `serve`."""

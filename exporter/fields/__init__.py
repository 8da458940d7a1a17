"""The fields: what each DCGM field this exporter serves is, where NVML gives its value, and how a
collectors CSV selects them."""

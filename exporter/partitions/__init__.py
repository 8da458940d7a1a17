"""What a GPU can be split into: the MIG profiles of each model and which layouts are valid.

A low-level table with no dependency of its own: the advisor (`exporter.advise`) fits
workloads to it, the mig-parted checks place configs on it, and the simulated node can build
layouts from it.
"""

"""The PromQL of GPU usage accounting, shared by the report, its recording rules and the
chargeback dashboard, so that the three cannot disagree about what a GPU-hour is; and the
GPM fallback every generated artifact reads activity through.

Pure string building: nothing here talks to a server.

- `holdings`: who holds what share of which GPU at one instant (whole GPUs, MIG instances by
  compute slices, shared GPUs split between the holders of their allocation rows), and the
  activity, energy and framebuffer that go with each holding.
- `figures`: those instants summed over a window, one series per pod; the recording rules
  are these figures over a fixed window.
- `gpm`: a GPM measure read where a GPU has it and from NVML's counterpart before Hopper,
  once per GPU; the dashboards, alerts and KEDA objects take theirs from it too.
"""

from exporter.promql.figures import (
    RULE_MARKER,
    RULES,
    Figure,
    duration,
    pod_figure,
    recording_rules,
)
from exporter.promql.holdings import DEVICE_LABELS, POD_GROUPING_HINT

__all__ = [
    "DEVICE_LABELS",
    "POD_GROUPING_HINT",
    "RULES",
    "RULE_MARKER",
    "Figure",
    "duration",
    "pod_figure",
    "recording_rules",
]

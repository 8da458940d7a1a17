"""The PromQL of GPU usage accounting, shared by the report, its recording rules and the
chargeback dashboard, so that the three cannot disagree about what a GPU-hour is; and the
GPM fallback every generated artifact reads activity through.

Pure string building: nothing here talks to a server.

- `holdings`: who holds what share of which GPU (whole GPUs, MIG instances by compute
  slices, shared devices split between the holders of their allocation rows), and the series
  that measure each holding over a window.
- `figures`: those holdings summed over a window, one series per pod.
- `rules`: the recording rules: the figures per pod once a window, then per group.
- `measures`: a GPM measure read where a GPU has it and from NVML's counterpart before
  Hopper, once per GPU; the dashboards, alerts and KEDA objects take theirs from it too.
"""

from exporter.promql.figures import RULES, Figure, duration, pod_figure
from exporter.promql.holdings import DEVICE_LABELS, POD_GROUPING_HINT
from exporter.promql.rules import RULE_MARKER, GroupRules, recording_rules

__all__ = [
    "DEVICE_LABELS",
    "POD_GROUPING_HINT",
    "RULES",
    "RULE_MARKER",
    "Figure",
    "GroupRules",
    "duration",
    "pod_figure",
    "recording_rules",
]

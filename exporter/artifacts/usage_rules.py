"""Recording rules for usage reports and the chargeback dashboard: every figure of
`gpu-exporter report`, per pod, once an hour (`exporter.promql.figures`).

A 90-day report then reads 2,160 samples per pod and figure instead of every scrape of every
GPU. They are written to their own files beside the alert rules: their group is evaluated
hourly, the alerts' every evaluation interval.
"""

from __future__ import annotations

from typing import Any

from exporter.artifacts.fieldset import FieldSet
from exporter.promql import recording_rules
from exporter.promql.holdings import FRAMEBUFFER

WINDOW_S = 3600.0
RESOLUTION_S = 60.0
"""Holdings are sampled once a minute: a pod that lives less than a minute may be missed,
one that lives longer is counted to the minute."""


def usage_rule_groups(fields: FieldSet) -> list[dict[str, Any]]:
    """The recording rule groups; none without the framebuffer field, which marks every
    held device."""
    if not fields.has(FRAMEBUFFER):
        return []
    return recording_rules(WINDOW_S, RESOLUTION_S)


def usage_prometheus_rule(fields: FieldSet) -> dict[str, Any]:
    """The same groups as a prometheus-operator PrometheusRule object."""
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": {
            "name": "gpu-exporter-usage",
            "labels": {"app.kubernetes.io/name": "gpu-exporter",
                       "app.kubernetes.io/component": "usage"},
        },
        "spec": {"groups": usage_rule_groups(fields)},
    }

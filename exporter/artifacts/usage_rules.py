"""Recording rules for usage reports and the chargeback dashboard: every figure of
`gpu-exporter report` per pod once an hour, then per group of each grouping asked for
(`generate rules --group-by namespace --group-by label:team`; `exporter.promql.rules`).

A 90-day report per namespace then reads 2,160 samples per namespace and figure, however many
GPUs and pods the fleet has. They are written to their own files beside the alert rules:
their group is evaluated hourly, the alerts' every evaluation interval.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from exporter.artifacts.fieldset import FieldSet
from exporter.options.groupings import grouping
from exporter.promql import GroupRules, recording_rules
from exporter.promql.holdings import FRAMEBUFFER

WINDOW_S = 3600.0
RESOLUTION_S = 60.0
"""Holdings are sampled once a minute: a pod that lives less than a minute may be missed,
one that lives longer is counted to the minute."""
DEFAULT_GROUPINGS: tuple[str, ...] = ("namespace",)
"""Recorded unless `--group-by` says otherwise: what the report groups by by default."""


def group_rules(names: Sequence[str]) -> list[GroupRules]:
    """Return the groupings to record, from `--group-by` values (each may list several, comma
    separated); `pod` needs none (the per-pod rules are always there), a repeat counts
    once. ConfigError names an unknown one."""
    out: dict[str, GroupRules] = {}
    for text in names:
        for name in (part.strip() for part in text.split(",")):
            if name and name != "pod" and name not in out:
                spec = grouping(name)
                out[name] = GroupRules(spec.name, spec.labels)
    return list(out.values())


def usage_rule_groups(fields: FieldSet, groupings: Sequence[str] = DEFAULT_GROUPINGS
                      ) -> list[dict[str, Any]]:
    """Return the recording rule groups; none without the framebuffer field, which marks every
    held device."""
    if not fields.has(FRAMEBUFFER):
        return []
    return recording_rules(WINDOW_S, RESOLUTION_S, group_rules(groupings))


def usage_prometheus_rule(fields: FieldSet, groupings: Sequence[str] = DEFAULT_GROUPINGS
                          ) -> dict[str, Any]:
    """Return the same groups as a prometheus-operator PrometheusRule object."""
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": {
            "name": "gpu-exporter-usage",
            "labels": {"app.kubernetes.io/name": "gpu-exporter",
                       "app.kubernetes.io/component": "usage"},
        },
        "spec": {"groups": usage_rule_groups(fields, groupings)},
    }

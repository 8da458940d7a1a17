"""The generated Grafana dashboards (imports grafanalib: generate path only)."""

from __future__ import annotations

from typing import Any

from exporter.artifacts.dashboards.autoscaling import AUTOSCALING
from exporter.artifacts.dashboards.chargeback import CHARGEBACK
from exporter.artifacts.dashboards.fleet import FLEET
from exporter.artifacts.dashboards.mig import MIG
from exporter.artifacts.dashboards.node import NODE
from exporter.artifacts.dashboards.render import dump, render
from exporter.artifacts.dashboards.spec import Dashboard
from exporter.artifacts.dashboards.workloads import WORKLOADS
from exporter.artifacts.fieldset import FieldSet

ALL: tuple[Dashboard, ...] = (FLEET, NODE, MIG, WORKLOADS, AUTOSCALING, CHARGEBACK)


def build(fields: FieldSet) -> dict[str, str]:
    """Return the JSON text of every dashboard by file name, using only the enabled fields."""
    out: dict[str, str] = {}
    for spec in ALL:
        model: dict[str, Any] = render(spec.restricted_to(fields))
        out[spec.filename] = dump(model)
    return out

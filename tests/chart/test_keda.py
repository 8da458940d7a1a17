"""The chart's KEDA ScaledObjects are `gpu-exporter generate keda`'s: for every combination of
metric, role, queue trigger and the optional settings, the object the chart renders equals the
one exporter/artifacts/keda.py builds for the same options (labels aside: the chart labels its
objects as its release's). A query written one way in Python and another in the template
would fail here."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from exporter.artifacts.fieldset import load_fieldset
from exporter.artifacts.keda import (
    DEFAULT_PROMETHEUS,
    Metric,
    ScaledObjectSpec,
    check_spec,
    scaled_object,
)

from ._chart import Obj, helm, of_kind, render, script

ROLES: tuple[str | None, ...] = (None, "prefill", "decode")
QUEUES: tuple[float | None, ...] = (None, 4, 2.5)


def _combinations() -> list[tuple[ScaledObjectSpec, Obj]]:
    """(spec, the chart's values item for it) for every combination."""
    out = []
    for index, (metric, role, queue) in enumerate(itertools.product(Metric, ROLES, QUEUES)):
        target = 62.5 if index % 2 else 70
        spec = ScaledObjectSpec(
            namespace=f"ns-{index % 3}", deployment=f"server-{index}", metric=metric,
            target=target, min_replicas=index % 3, max_replicas=4 + index,
            prometheus=DEFAULT_PROMETHEUS if index % 4 else "http://prom.example:9090",
            queue_target=queue, name=f"custom-{index}" if index % 5 == 0 else None, role=role)
        item: Obj = {"namespace": spec.namespace, "deployment": spec.deployment,
                     "metric": metric.value, "target": target, "min": spec.min_replicas,
                     "max": spec.max_replicas}
        if spec.prometheus != DEFAULT_PROMETHEUS:
            item["prometheus"] = spec.prometheus
        if queue is not None:
            item["queueTarget"] = queue
        if spec.name is not None:
            item["name"] = spec.name
        if role is not None:
            item["role"] = role
        out.append((spec, item))
    return out


COMBINATIONS = _combinations()


def _without_labels(obj: dict[str, Any]) -> dict[str, Any]:
    return {**obj, "metadata": {k: v for k, v in obj["metadata"].items() if k != "labels"}}


def _rendered(items: list[Obj]) -> list[Obj]:
    rendered = render({"keda": {"scaledObjects": items}})
    objs: list[Obj] = script().objects({k: v for k, v in rendered.items()
                                        if k.endswith("scaledobjects.yaml")})
    return of_kind(objs, "ScaledObject")


def test_every_combination_equals_generate_keda() -> None:
    specs = [spec for spec, _ in COMBINATIONS]
    rendered = {(o["metadata"]["namespace"], o["metadata"]["name"]): o
                for o in _rendered([item for _, item in COMBINATIONS])}
    assert len(rendered) == len(specs)
    fields = load_fieldset(None)
    for spec in specs:
        check_spec(spec, fields)  # each is a valid `generate keda` invocation
        expected = scaled_object(spec, fields)
        key = (expected["metadata"]["namespace"], expected["metadata"]["name"])
        assert _without_labels(rendered[key]) == _without_labels(expected), key


def test_the_chart_labels_its_objects() -> None:
    (obj,) = _rendered([COMBINATIONS[0][1]])
    assert obj["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "Helm"


@pytest.mark.parametrize("bad", [
    {"target": 120},                      # a percentage above 100
    {"min": 5, "max": 3},                 # max below min
    {"role": "encode"},                   # not a pool the queries know
    {"target": 0},
])
def test_what_generate_keda_refuses_the_chart_refuses(bad: Obj) -> None:
    helm_python = helm()
    item: Obj = {"namespace": "serving", "deployment": "chat", "metric": "util",
                 "target": 70, **bad}
    spec = ScaledObjectSpec(item["namespace"], item["deployment"], Metric(item["metric"]),
                            item["target"], item.get("min", 1), item.get("max", 10),
                            role=item.get("role"))
    with pytest.raises(ValueError, match="--"):
        check_spec(spec, load_fieldset(None))
    with pytest.raises((helm_python.HelmValuesError, helm_python.HelmRenderError)):
        _rendered([item])

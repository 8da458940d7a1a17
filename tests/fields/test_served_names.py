"""Every name of a served field, listed in one collectors file next to the name it is served
by (the catalog's, or the canonical one), is exported on a simulated node with the same
series as that name."""

from __future__ import annotations

import re

import pytest
from prometheus_client.parser import text_string_to_metric_families

from exporter.devices.nvml import NvmlBackend
from exporter.exposition.render import device_families, render
from exporter.fields.catalog import CATALOG, FieldSpec, MetricType, Reader
from exporter.fields.csv import Collectors, parse_collectors
from exporter.fields.dcgm_names import dcgm_names
from exporter.sampling.snapshot import HostLabel, Snapshot
from exporter.simulated.node import SimNvml
from tests.support.clock import FakeClock

Series = dict[frozenset[tuple[str, str]], float]


SERVED: dict[str, FieldSpec] = {
    **{s.name: s for s in CATALOG}, **{s.name: s for s in dcgm_names().served.values()}}
"""Every served spec under the name it is served by: catalog names, canonical names."""


def other_names() -> list[tuple[str, str]]:
    """(name, serving name) for every other name of a served field."""
    table = dcgm_names()
    pairs = []
    for field in table.fields:
        spec = table.served_spec(field)
        if spec is not None:
            pairs += [(n, spec.name) for n in field.names if n not in SERVED]
    return pairs


def all_names_csv() -> str:
    lines = [f"{s.name}, {s.type.value}, x" for s in SERVED.values()]
    for name, serving_name in other_names():
        lines.append(f"{name}, {SERVED[serving_name].type.value}, x")
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def exported() -> tuple[Collectors, dict[str, Series], str]:
    clock = FakeClock(start=1_700_000_000.0)
    collectors = parse_collectors(all_names_csv(), "all.csv")
    assert collectors.warnings == ()
    backend = NvmlBackend(SimNvml("h100-8", seed=7, clock=clock), collectors.specs,
                          clock=clock, wall_clock=clock)
    backend.start()
    try:
        for _ in range(3):  # GPM rates need two samples
            readings = backend.poll()
            clock.advance(15.0)
        snapshot = Snapshot(backend.inventory, readings, collectors, HostLabel("Hostname", "n"))
        text = render(device_families(snapshot)).text.decode()
    finally:
        backend.close()
    return collectors, series_by_name(text), text


def series_by_name(text: str) -> dict[str, Series]:
    """Samples by metric name as sent (a parser would rename counters ending in `_total`)."""
    parsed = {f.name: f for f in text_string_to_metric_families(text)}  # it parses, at least
    assert parsed
    families: dict[str, Series] = {}
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        match = re.fullmatch(r"([^{ ]+)\{(.*)\} (\S+)", line)
        assert match, line
        name, labels, value = match.groups()
        pairs = frozenset(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', labels))
        families.setdefault(name, {})[pairs] = float(value)
    return families


@pytest.mark.parametrize(("name", "catalog_name"), [
    pytest.param(n, c, id=n) for n, c in other_names()
    if SERVED[c].type is not MetricType.LABEL
])
def test_another_name_exports_the_catalog_names_series(
        exported: tuple[Collectors, dict[str, Series], str], name: str,
        catalog_name: str) -> None:
    _, families, _ = exported
    # Where the profile has no value for the field, the other name has no series either:
    # never one made up (test_most_fields_have_series_under_every_name sees that most have).
    assert families.get(name) == families.get(catalog_name)


def test_most_fields_have_series_under_every_name(
        exported: tuple[Collectors, dict[str, Series], str]) -> None:
    _, families, _ = exported
    pairs = other_names()
    exported_pairs = [(n, c) for n, c in pairs if c in families]
    assert len(exported_pairs) > len(pairs) * 3 // 4, "too few fields to compare on h100-8"


def test_each_name_of_the_driver_label_field_labels_the_series(
        exported: tuple[Collectors, dict[str, Series], str]) -> None:
    collectors, families, _ = exported
    label_names = [f.spec.name for f in collectors.fields if f.spec.reader is Reader.DRIVER]
    assert label_names == ["DCGM_FI_DRIVER_VERSION", "DCGM_FI_SYSTEM_DRIVER_VERSION"]
    for series in families["DCGM_FI_DEV_GPU_TEMP"]:
        labels = dict(series)
        assert labels["DCGM_FI_DRIVER_VERSION"] == labels["DCGM_FI_SYSTEM_DRIVER_VERSION"] != ""

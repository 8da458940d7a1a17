"""The shipped DCGM name table: derived from the reference table, complete, and lazy."""

from __future__ import annotations

import csv
import json
import subprocess
import sys

import pytest

from exporter.fields.catalog import CATALOG
from exporter.fields.dcgm_names import DATA_PATH, DcgmField, Reason, dcgm_names
from tests.support.paths import ROOT, fixture_file
from tools.derive_dcgm_names import derive


def reference_rows() -> list[dict[str, str]]:
    path = fixture_file("dcgm-fields", "dcgm-fields.csv")
    with path.open(newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def test_shipped_table_is_derived_from_the_reference_table() -> None:
    source = fixture_file("dcgm-fields", "dcgm-fields.csv").read_text(encoding="utf-8")
    assert DATA_PATH.read_text(encoding="utf-8") == derive(source), \
        "exporter/fields/dcgm-names.csv drifted: run python -m tools.derive_dcgm_names --write"


def test_every_name_of_the_reference_table_resolves_to_its_field() -> None:
    rows = reference_rows()
    table = dcgm_names()
    field_ids = {int(r["dcgm_id"]) for r in rows if not r["notes"].startswith("range marker")}
    for row in rows:
        name, dcgm_id = row["dcgm_name"], int(row["dcgm_id"])
        field = table.field(name)
        assert field is not None, name
        if row["notes"].startswith("range marker"):
            # go-dcgm reads a marker as the field with its value, where there is one.
            accepted = "not accepted by go-dcgm" not in row["notes"] and dcgm_id in field_ids
            assert field.dcgm_id == (dcgm_id if accepted else None), name
        else:
            assert field.dcgm_id == dcgm_id, name
    assert sorted(table) == sorted(r["dcgm_name"] for r in rows)


def test_aliases_renames_and_1x_names_share_their_canonical_field() -> None:
    table = dcgm_names()
    for old, new in [("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_GPU_UTIL_RATIO"),
                     ("dcgm_gpu_temp", "DCGM_FI_DEV_GPU_TEMP_CELSIUS"),
                     ("DCGM_FI_DEV_CPU_UTIL_TOTAL", "DCGM_FI_DEV_CPU_UTIL_RATIO"),
                     ("DCGM_FI_DEV_NVSWITCH_POWER_VDD", "DCGM_FI_DEV_NVSWITCH_POWER_VDD_WATTS")]:
        field = table.field(old)
        assert field is not None
        assert field is table.field(new)
        assert field.name == new  # the newest release's name is the canonical one


def test_every_catalog_field_is_a_dcgm_field() -> None:
    table = dcgm_names()
    for spec in CATALOG:
        field = table.field(spec.name)
        assert field is not None, spec.name
        assert field.reason is Reason.NVML, spec.name
    # Two catalog entries for one id (a renamed field kept under both names) serve it once.
    ids = {field.dcgm_id for s in CATALOG if (field := table.field(s.name)) is not None}
    assert {i for i, spec in table.served.items() if spec in CATALOG} == ids


def test_the_catalog_wins_over_the_generic_readers() -> None:
    """A field the catalog serves is never generated too, and every other served field is
    served under its canonical name by the generic readers."""
    table = dcgm_names()
    catalog_names = {s.name for s in CATALOG}
    for field in table.fields:
        spec = table.served_spec(field)
        if spec is None:
            assert field.generated is None
        elif catalog_names.intersection(field.names):
            assert field.generated is None, field.name
            assert spec in CATALOG, field.name
        else:
            assert spec is field.generated, field.name
            assert spec.name == field.name, field.name


def test_every_field_with_an_nvml_source_is_served_and_only_those_name_one() -> None:
    table = dcgm_names()
    assert [f.name for f in table.unserved() if f.reason is Reason.NVML] == []
    assert all(f.nvml_source.startswith("nvml") for f in table.fields
               if f.reason is Reason.NVML)
    assert all(f.nvml_source == "" for f in table.fields if f.reason is not Reason.NVML)
    # A row the readers could not serve would be warned with its call named.
    assert "nvmlDeviceGetX" in Reason.NVML.explain("nvmlDeviceGetX")


@pytest.mark.parametrize("name", ["DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_XID_ERRORS"])
def test_served_names_resolve_to_the_catalog_spec_itself(name: str) -> None:
    resolved = dcgm_names().resolve(name)
    assert resolved is next(s for s in CATALOG if s.name == name)


def test_a_served_alias_resolves_to_the_spec_under_its_own_name() -> None:
    resolved = dcgm_names().resolve("DCGM_FI_DEV_GPU_TEMP_CELSIUS")
    assert not isinstance(resolved, DcgmField)
    assert resolved is not None
    catalog = next(s for s in CATALOG if s.name == "DCGM_FI_DEV_GPU_TEMP")
    assert resolved.name == "DCGM_FI_DEV_GPU_TEMP_CELSIUS"
    assert (resolved.reader, resolved.part, resolved.convert, resolved.scope, resolved.type) == \
        (catalog.reader, catalog.part, catalog.convert, catalog.scope, catalog.type)


LAZY_PROBE = """
import json, resource, sys
from exporter.fields.csv import default_collectors_path, load_collectors, parse_collectors
from exporter.fields.dcgm_names import dcgm_names
load_collectors(default_collectors_path())
lazy = dcgm_names.cache_info().currsize == 0
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
parse_collectors("dcgm_gpu_temp, gauge, x\\n", "x.csv")
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"lazy": lazy, "loaded": dcgm_names.cache_info().currsize == 1,
                  "growth_kib": after - before}))
"""


def test_catalog_names_do_not_load_the_table_and_loading_it_is_cheap() -> None:
    out = subprocess.run([sys.executable, "-c", LAZY_PROBE], cwd=ROOT, capture_output=True,
                         text=True, timeout=60, check=True, env={"PYTHONPATH": str(ROOT)})
    probe = json.loads(out.stdout)
    assert probe["lazy"]
    assert probe["loaded"]
    assert probe["growth_kib"] < 4096, probe

"""Shared helpers for the generated-artifact tests."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.paths import ROOT, fixture_file
from tests.support.requirements import require_tool


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "e2e: starts the exporter and a real Prometheus (select with -m e2e)")


ENGINES = ("prometheus", "victoria-metrics")
"""The query engines the end-to-end tests ask, one set of queries for both."""


@pytest.fixture(params=ENGINES)
def engine(request: pytest.FixtureRequest) -> str:
    """Each engine in turn: Prometheus, then VictoriaMetrics scraping the same targets."""
    name: str = request.param
    return name


def run_generate(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    """`python -m exporter generate ...` as a user runs it."""
    return subprocess.run([sys.executable, "-m", "exporter", "generate", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=120)


def promtool() -> str:
    """Path of `promtool`; skips locally, fails in CI, where it is missing."""
    return require_tool("promtool", "prometheus")


def crd_schema(filename: str, version: str) -> dict[str, Any]:
    crd = yaml.safe_load(fixture_file("crds", filename).read_text())
    for v in crd["spec"]["versions"]:
        if v["name"] == version:
            schema: dict[str, Any] = v["schema"]["openAPIV3Schema"]
            return schema
    raise AssertionError(f"{filename} has no version {version}")


def validate_against_crd(obj: dict[str, Any], filename: str, version: str) -> None:
    import jsonschema

    schema = crd_schema(filename, version)
    # No metaschema check: CRDs carry Go regexes such as '^(?i)(abort|warn)?$' that Python's
    # `re` rejects; those patterns only matter for fields the objects here never set.
    jsonschema.Draft202012Validator(schema).validate(obj)
    _reject_unknown_fields(obj, schema, "")


def _reject_unknown_fields(obj: Any, schema: dict[str, Any], path: str) -> None:
    """The API server prunes fields a structural schema does not list; treat them as errors."""
    if isinstance(obj, dict) and "properties" in schema and not schema.get(
            "x-kubernetes-preserve-unknown-fields"):
        for key, value in obj.items():
            if path == "" and key in ("apiVersion", "kind", "metadata"):
                continue
            assert key in schema["properties"], f"unknown field {path}.{key}"
            _reject_unknown_fields(value, schema["properties"][key], f"{path}.{key}")
    elif isinstance(obj, list) and "items" in schema:
        for i, item in enumerate(obj):
            _reject_unknown_fields(item, schema["items"], f"{path}[{i}]")

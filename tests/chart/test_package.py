"""The chart packaged by Helm (`helm package`): an archive named and versioned as the exporter,
holding what the chart needs and nothing of the repository around it, that renders as the
directory does."""

from __future__ import annotations

import tarfile
from pathlib import Path

import yaml

from exporter import __version__

from ._chart import CHART, Obj, helm, script, values_file


def _package(tmp_path: Path) -> Path:
    archive: Path = script().package(tmp_path / "dist")
    return archive


def test_the_archive_is_named_and_versioned_as_the_exporter(tmp_path: Path) -> None:
    helm_python = helm()
    archive = _package(tmp_path)
    assert archive.name == f"gpu-exporter-{__version__}.tgz"
    with helm_python.Chart.load(archive) as chart:
        assert (chart.version, chart.metadata["appVersion"]) == (__version__, __version__)
        assert chart.schema is not None
    assert helm_python.digest(archive).startswith("sha256:")


def test_the_archive_holds_the_chart_and_only_the_chart(tmp_path: Path) -> None:
    with tarfile.open(_package(tmp_path)) as tar:
        names = set(tar.getnames())
    expected = {f"gpu-exporter/{p.relative_to(CHART)}" for p in CHART.rglob("*") if p.is_file()}
    assert names == expected
    assert all(not n.startswith("/") and ".." not in n for n in names)
    assert "gpu-exporter/values.schema.json" in names
    assert "gpu-exporter/files/alerts/gpu-exporter.rules.yml" in names


def test_the_archive_renders_as_the_directory(tmp_path: Path) -> None:
    archive = _package(tmp_path)
    values: Obj = {}
    for name in ("rules", "dashboards", "keda", "presets", "custom-metrics"):
        values = script().merge_values(values, values_file(name))
    from_dir = script().render(values, chart=CHART)
    from_archive = script().render(values, chart=archive)
    assert from_archive == from_dir
    objs = [o for template, text in from_archive.items() if template.endswith(".yaml")
            for o in yaml.safe_load_all(text) if o]
    assert {o["kind"] for o in objs} >= {"DaemonSet", "PrometheusRule", "ScaledObject"}

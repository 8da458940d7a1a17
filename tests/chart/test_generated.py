"""What `python scripts/chart.py sync` writes is committed and current: the chart's copies of the
generated alerts, usage rules and dashboards, its version, its values table, and the
deploy/daemonset manifests rendered from it. And what the chart embeds reaches the rendered
objects unchanged."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import yaml

from exporter import __version__
from tests.support.paths import ROOT
from tests.support.requirements import require_tool

from ._chart import CHART, Obj, of_kind, render, script

SYNC = "run `python scripts/chart.py sync` and commit"


def _stale(prefix: Path) -> list[str]:
    return sorted(str(path.relative_to(ROOT)) for path, content in script().expected().items()
                  if path.is_relative_to(prefix)
                  and (not path.exists() or path.read_bytes() != content))


def test_the_chart_copies_the_generated_artifacts() -> None:
    assert _stale(CHART / "files") == [], SYNC
    assert script().stale_copies() == [], SYNC
    copies = {rel.name for rel in script().COPIES}
    assert copies == {p.name for p in (ROOT / "dashboards").glob("*.json")} | {
        "gpu-exporter.rules.yml", "gpu-exporter.usage-rules.yml"}


def test_the_chart_version_is_the_exporters() -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text(encoding="utf-8"))
    assert (chart["version"], chart["appVersion"]) == (__version__, __version__), SYNC
    assert _stale(CHART / "Chart.yaml") == [], SYNC


def test_the_values_table_is_current() -> None:
    assert _stale(CHART / "README.md") == [], SYNC
    table = script().values_table()
    schema = json.loads((CHART / "values.schema.json").read_text(encoding="utf-8"))
    # Every documented key has a row, and the table says what values.yaml says.
    for key in ("image.repository", "serviceMonitor.honorLabels", "kubernetes.podLabelPresets",
                "keda.scaledObjects", "debugDump.enabled", "livenessProbe.periodSeconds"):
        assert f"| `{key}` |" in table, key
    assert "| `service.port` | integer | `9400` |" in table
    assert len(table.splitlines()) - 2 == _leaves(schema)


def _leaves(node: Obj) -> int:
    count = 0
    for child in node.get("properties", {}).values():
        count += _leaves(child) if child.get("type") == "object" and "properties" in child else 1
    return count


def test_the_deploy_manifests_are_the_chart_rendered() -> None:
    assert _stale(ROOT / "deploy") == [], SYNC
    rendered = sorted(p.relative_to(ROOT) for p in (ROOT / "deploy").rglob("gpu-exporter.yaml"))
    assert [str(p.parent) for p in rendered] == [
        "deploy/daemonset", "deploy/daemonset/inference", "deploy/daemonset/pod-labels",
        "deploy/daemonset/tls"]


def _pod_labels_setting(manifest: str) -> str | None:
    for obj in yaml.safe_load_all(manifest):
        if obj and obj["kind"] == "DaemonSet":
            for item in obj["spec"]["template"]["spec"]["containers"][0]["env"]:
                if item["name"] == "GPU_EXPORTER_POD_LABELS":
                    return str(item["value"])
    return None


def test_a_changed_values_file_changes_the_rendering(tmp_path: Path) -> None:
    """The check above can fail: the rendering follows the values files, the entry point's
    over its parent's."""
    values = ROOT / "deploy" / "daemonset" / "pod-labels" / "values.yaml"
    text = script().deploy_manifest(values)
    assert _pod_labels_setting(text) == r"team|app\.kubernetes\.io/name"
    assert 'nvidia.com/gpu.present: "true"' in text  # from deploy/daemonset/values.yaml
    copy = tmp_path / "values.yaml"
    copy.write_text(values.read_text().replace("team|", "queue|"))
    assert _pod_labels_setting(script().deploy_manifest(copy)) == \
        r"queue|app\.kubernetes\.io/name"


def test_the_prometheus_rules_carry_the_generated_groups() -> None:
    objs = script().objects(render({"prometheusRule": {"enabled": True}}))
    rules = {r["metadata"]["name"]: r for r in of_kind(objs, "PrometheusRule")}
    for name, artifact in (("alerts", "gpu-exporter.prometheusrule.yaml"),
                           ("usage", "gpu-exporter-usage.prometheusrule.yaml")):
        generated = yaml.safe_load((ROOT / "alerts" / artifact).read_text(encoding="utf-8"))
        assert rules[f"dcgm-exporter-{name}"]["spec"] == generated["spec"]
    # `{{ $labels.instance }}` reached the object as text for Prometheus, not as a template.
    assert "{{ $labels.instance }}" in json.dumps(rules["dcgm-exporter-alerts"])


def test_promtool_accepts_the_rendered_rules(tmp_path: Path) -> None:
    promtool = require_tool("promtool", "prometheus")
    objs = script().objects(render({"prometheusRule": {"enabled": True}}))
    files = []
    for rule in of_kind(objs, "PrometheusRule"):
        path = tmp_path / f"{rule['metadata']['name']}.yml"
        path.write_text(yaml.safe_dump({"groups": rule["spec"]["groups"]}))
        files.append(str(path))
    done = subprocess.run([promtool, "check", "rules", *files], capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count("SUCCESS") == 2, done.stdout


def test_the_dashboards_are_the_generated_ones_byte_for_byte() -> None:
    objs = script().objects(render({"dashboards": {"enabled": True}}))
    served = {key: text for cm in of_kind(objs, "ConfigMap") for key, text in cm["data"].items()}
    committed = {p.name: p.read_text(encoding="utf-8")
                 for p in sorted((ROOT / "dashboards").glob("*.json"))}
    assert served == committed
    for text in served.values():
        json.loads(text)

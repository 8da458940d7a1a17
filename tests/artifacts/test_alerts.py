"""Alert rules: promtool syntax check, promtool unit tests (a firing and a quiet case for
every alert), XID tier configuration, the PrometheusRule object and field filtering."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from exporter.artifacts.alerts import AlertConfig, prometheus_rule, rule_groups
from exporter.artifacts.fieldset import everything
from exporter.artifacts.xid_tiers import XidTiers
from tests.artifacts.alert_cases import CASES, GPU0, XID, Case, series
from tests.artifacts.conftest import promtool, run_generate, validate_against_crd
from tests.support.paths import ROOT

RULES = ROOT / "alerts" / "gpu-exporter.rules.yml"
PROMETHEUS_RULE = ROOT / "alerts" / "gpu-exporter.prometheusrule.yaml"


def _alert_names(groups: list[dict[str, Any]]) -> set[str]:
    return {r["alert"] for g in groups for r in g["rules"]}


def _committed_groups() -> list[dict[str, Any]]:
    groups: list[dict[str, Any]] = yaml.safe_load(RULES.read_text())["groups"]
    return groups


def _promtool_test(tmp_path: Path, groups: list[dict[str, Any]], cases: list[Case],
                   keep_annotations: bool = False) -> subprocess.CompletedProcess[str]:
    """Run `promtool test rules` on `groups` (annotations stripped unless asked)."""
    if not keep_annotations:
        groups = [{**g, "rules": [{k: v for k, v in r.items() if k != "annotations"}
                                  for r in g["rules"]]} for g in groups]
    (tmp_path / "rules.yml").write_text(yaml.safe_dump({"groups": groups}))
    tests = {"rule_files": ["rules.yml"], "evaluation_interval": "1m",
             "tests": [c.promtool_test() for c in cases]}
    (tmp_path / "tests.yml").write_text(yaml.safe_dump(tests, sort_keys=False))
    return subprocess.run([promtool(), "test", "rules", "tests.yml"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)


def test_committed_rules_pass_promtool_check() -> None:
    result = subprocess.run([promtool(), "check", "rules", str(RULES)], capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


@pytest.mark.parametrize("variant", ["committed", "every-field"])
def test_every_alert_fires_and_stays_quiet(tmp_path: Path, variant: str) -> None:
    groups = _committed_groups() if variant == "committed" else rule_groups(everything())
    names = _alert_names(groups)
    firing = {c.alert for c in CASES if c.expected}
    quiet = {c.alert for c in CASES if not c.expected}
    assert names - firing == set(), "alerts without a firing case"
    assert names - quiet == set(), "alerts without a quiet case"
    result = _promtool_test(tmp_path, groups, [c for c in CASES if c.alert in names])
    assert result.returncode == 0, result.stdout + result.stderr


def test_committed_rules_cover_the_failures_that_matter() -> None:
    names = _alert_names(_committed_groups())
    assert {"GpuExporterDown", "GpuExporterCollectionStale", "GpuFellOffTheBus", "GpuLost",
            "GpuCriticalXid", "GpuContainedEccXid", "GpuUncorrectableEccErrors",
            "GpuRowRemapFailure", "GpuHwThermalSlowdown", "GpuTemperatureNearLimit",
            "GpuPowerBrake", "GpuFramebufferNearFull", "GpuNvlinkError",
            "GpuNvlinkErrorsGrowing", "GpuPcieReplayErrors", "GpuIdleButAllocated"} <= names
    # Row-remap pending is not in the default collectors, so its alert is not either.
    assert "GpuRowRemapPending" not in names
    assert "GpuRowRemapPending" in _alert_names(rule_groups(everything()))


def test_every_rule_has_severity_for_and_advice() -> None:
    for group in _committed_groups():
        for rule in group["rules"]:
            assert rule["labels"]["severity"] in ("page", "critical", "warning", "info"), \
                rule["alert"]
            assert rule["labels"].get("owner") in (None, "node", "workload"), rule["alert"]
            assert re.fullmatch(r"\d+[smh]", rule["for"]), rule["alert"]
            assert rule["annotations"]["summary"], rule["alert"]
            assert len(rule["annotations"]["description"]) > 60, rule["alert"]


def test_xid_alerts_count_events_not_the_last_code_gauge() -> None:
    for group in _committed_groups():
        for rule in group["rules"]:
            assert not re.search(r"\bDCGM_FI_DEV_XID_ERRORS\b", rule["expr"]), rule["alert"]


def test_annotations_render_with_the_device_labels(tmp_path: Path) -> None:
    case = Case("GpuFellOffTheBus", [(series(XID, {**GPU0, "xid": "79"}), "_x4 1x10")], "6m")
    test = case.promtool_test()
    test["alert_rule_test"][0]["exp_alerts"] = [{
        "exp_labels": {**GPU0, "xid": "79", "severity": "critical"},
        "exp_annotations": {
            "summary": "GPU 0 (GPU-0a1b) on node-a fell off the bus (XID 79)",
            "description": "The GPU stopped responding on PCIe. Jobs on it are dead and it "
                           "will not come back without a node reboot. Cordon and drain the "
                           "node, reboot it; if it happens again, have the GPU, riser and "
                           "power checked (RMA).",
        },
    }]
    (tmp_path / "rules.yml").write_text(RULES.read_text())
    (tmp_path / "tests.yml").write_text(yaml.safe_dump(
        {"rule_files": ["rules.yml"], "evaluation_interval": "1m", "tests": [test]}))
    result = subprocess.run([promtool(), "test", "rules", "tests.yml"],
                            cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr


def test_xid_tiers_must_be_disjoint() -> None:
    with pytest.raises(ValueError, match=r"XID 79 is in both tier fell-off-bus and tier "
                                         r"critical"):
        XidTiers().with_overrides(["critical=48,79"])
    with pytest.raises(ValueError, match="NAME=CODES"):
        XidTiers().with_overrides(["fatal=48"])
    with pytest.raises(ValueError, match="integers"):
        XidTiers().with_overrides(["critical=48,x"])


def test_xid_tiers_are_configurable_from_the_command_line(tmp_path: Path) -> None:
    bad = run_generate("alerts", "--out", str(tmp_path), "--xid-tier", "contained-ecc=94,48")
    assert bad.returncode == 2
    assert "XID 48 is in both tier critical and tier contained-ecc" in bad.stderr

    good = run_generate("alerts", "--out", str(tmp_path), "--xid-tier", "critical=48,62",
                        "--xid-tier", "nvlink=", "--xid-tier", "contained-ecc=94,64")
    assert good.returncode == 0, good.stderr
    groups = yaml.safe_load((tmp_path / "alerts" / "gpu-exporter.rules.yml").read_text())
    rules = {r["alert"]: r for g in groups["groups"] for r in g["rules"]}
    assert "GpuNvlinkError" not in rules
    assert 'xid=~"48|62"' in rules["GpuCriticalXid"]["expr"]
    assert 'xid=~"64|94"' in rules["GpuContainedEccXid"]["expr"]


def test_prometheus_rule_matches_the_crd_and_the_plain_rules() -> None:
    obj = yaml.safe_load(PROMETHEUS_RULE.read_text())
    validate_against_crd(obj, "monitoring.coreos.com_prometheusrules.yaml", "v1")
    assert obj["spec"]["groups"] == _committed_groups()


def test_a_bad_rule_object_fails_the_crd_check() -> None:
    """The CRD check can fail: a numeric `for` and an unknown key are both rejected."""
    import jsonschema

    obj = prometheus_rule(everything(), AlertConfig())
    obj["spec"]["groups"][0]["rules"][0]["for"] = 5
    with pytest.raises(jsonschema.ValidationError):
        validate_against_crd(obj, "monitoring.coreos.com_prometheusrules.yaml", "v1")
    obj = prometheus_rule(everything(), AlertConfig())
    obj["spec"]["groups"][0]["rules"][0]["keepFiringFor"] = "5m"
    with pytest.raises(AssertionError, match="unknown field"):
        validate_against_crd(obj, "monitoring.coreos.com_prometheusrules.yaml", "v1")


def test_alerts_use_only_enabled_fields(tmp_path: Path) -> None:
    csv = tmp_path / "small.csv"
    csv.write_text("DCGM_FI_DEV_GPU_TEMP, gauge, temperature\n"
                   "DCGM_FI_DEV_FB_USED, gauge, used\nDCGM_FI_DEV_FB_FREE, gauge, free\n")
    result = run_generate("alerts", "--collectors", str(csv), "--out", str(tmp_path))
    assert result.returncode == 0, result.stderr
    text = (tmp_path / "alerts" / "gpu-exporter.rules.yml").read_text()
    names = _alert_names(yaml.safe_load(text)["groups"])
    assert {"GpuTemperatureNearLimit", "GpuFramebufferNearFull", "GpuFellOffTheBus",
            "GpuExporterDown"} <= names
    assert not {"GpuRowRemapFailure", "GpuPowerBrake", "GpuMemoryTemperatureNearLimit",
                "GpuUncorrectableEccErrors", "GpuIdleButAllocated"} & names
    used = set(re.findall(r"\bDCGM_(?:FI|EXP)_[A-Z0-9_]+", text))
    assert used <= {"DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE"}
    check = subprocess.run([promtool(), "check", "rules",
                            str(tmp_path / "alerts" / "gpu-exporter.rules.yml")],
                           capture_output=True, text=True, timeout=60)
    assert check.returncode == 0, check.stdout + check.stderr

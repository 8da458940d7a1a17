"""The usage recording rules: the committed files match the generator and pass `promtool check
rules`; `promtool test rules` evaluates them over hand-written series (a whole GPU, a MIG
instance, a time-sliced GPU with two holders, a reset energy counter) and gets the figures
the accounting rules give by hand."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import yaml

from exporter.artifacts.fieldset import FieldSet, load_fieldset
from exporter.artifacts.usage_rules import usage_prometheus_rule, usage_rule_groups
from exporter.promql import recording_rules
from tests.artifacts.conftest import promtool, validate_against_crd
from tests.support.paths import ROOT

RULES = ROOT / "alerts" / "gpu-exporter.usage-rules.yml"
WHOLE = 'UUID="GPU-a", gpu="0", modelName="M", Hostname="n1"'
MIG = 'UUID="GPU-b", gpu="1", modelName="M", Hostname="n1", GPU_I_ID="2", GPU_I_PROFILE="3g.40gb"'
SHARED = 'UUID="GPU-c", gpu="2", modelName="M", Hostname="n1"'
ENERGY_PER_MIN_MJ = 6_000_000
"""100 W."""


def _series(labels: str, values: str, name: str) -> dict[str, str]:
    return {"series": f"{name}{{{labels}}}", "values": values}


def _inputs() -> list[dict[str, str]]:
    fb, alloc = "DCGM_FI_DEV_FB_USED", "gpu_exporter_pod_gpu_allocation"
    row = 'UUID="GPU-c", gpu="2", container="main", resource="nvidia.com/gpu"'
    # The whole GPU's counter is reset right after the scrape at 65m (a driver reload): at
    # 66m it reads what it counted since.
    before = f"1000000000+{ENERGY_PER_MIN_MJ}x65"
    after = f"{ENERGY_PER_MIN_MJ}+{ENERGY_PER_MIN_MJ}x53"
    return [
        _series(f'{WHOLE}, namespace="ns1", pod="p1", container="main"', "1000x120", fb),
        _series(f'{WHOLE}, namespace="ns1", pod="p1", container="main"', "50x120",
                "DCGM_FI_DEV_GPU_UTIL"),
        _series(f'{WHOLE}, namespace="ns1", pod="p1", container="main"', f"{before} {after}",
                "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"),
        _series(f'{MIG}, namespace="ns2", pod="p2", container="main"', "2000x120", fb),
        _series(f'{MIG}, namespace="ns2", pod="p2", container="main"', "0.25x120",
                "DCGM_FI_PROF_GR_ENGINE_ACTIVE"),
        _series(SHARED, "3000x120", fb),
        _series(SHARED, "1x120", "DCGM_FI_DEV_GPU_UTIL"),
        _series(f'{row}, namespace="ns3", pod="p3", replica="0"', "1x120", alloc),
        _series(f'{row}, namespace="ns3", pod="p4", replica="1"', "1x120", alloc),
    ]


def _expect(rule: str, at: str, values: dict[str, float], extra: str = ""
            ) -> list[dict[str, Any]]:
    """promtool cases: each pod's sample of `rule` at `at` equals its value to 1e-12
    (promtool compares floats exactly, and the rules add in another order than Python)."""
    cases = []
    for pod, value in values.items():
        labels = {"namespace": {"p1": "ns1", "p2": "ns2"}.get(pod, "ns3"), "pod": pod,
                  "modelName": "M", "Hostname": "n1"}
        if extra:
            key, _, text = extra.partition("=")
            labels[key] = text
        shown = ", ".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
        cases.append({"expr": f'abs({rule}{{pod="{pod}"}} - {value!r}) < bool 1e-12',
                      "eval_time": at, "exp_samples": [{"labels": "{" + shown + "}",
                                                        "value": 1}]})
    return cases


def test_committed_usage_rules_match_the_generator_and_pass_promtool() -> None:
    committed = yaml.safe_load(RULES.read_text())["groups"]
    assert committed == usage_rule_groups(load_fieldset(None))
    assert committed[0]["interval"] == "1h"
    result = subprocess.run([promtool(), "check", "rules", str(RULES)], capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr


def test_no_rules_without_the_framebuffer_field() -> None:
    assert usage_rule_groups(FieldSet("none", frozenset({"DCGM_FI_DEV_GPU_UTIL"}))) == []


def test_prometheus_rule_object_is_valid() -> None:
    validate_against_crd(usage_prometheus_rule(load_fieldset(None)),
                         "monitoring.coreos.com_prometheusrules.yaml", "v1")


def test_rules_compute_the_accounting_by_hand(tmp_path: Path) -> None:
    window = 10 * 60.0
    groups = recording_rules(window, 60.0)
    (tmp_path / "rules.yml").write_text(yaml.safe_dump({"groups": groups}))
    tenth = 10 / 60  # ten one-minute steps, in hours
    kwh = 10 * ENERGY_PER_MIN_MJ / 3.6e9
    tests = [
        *_expect("pod:gpu_usage_allocated_gpu_hours:window", "60m",
                {"p1": tenth, "p2": tenth * 3 / 7, "p3": tenth / 2, "p4": tenth / 2}),
        *_expect("pod:gpu_usage_held_hours:window", "60m",
                {"p1": tenth, "p2": tenth, "p3": tenth, "p4": tenth}),
        *_expect("pod:gpu_usage_energy_kwh:window", "60m", {"p1": kwh}),
        # The ten minutes holding the reset lose nothing: the step after it counts what
        # the new counter counted.
        *_expect("pod:gpu_usage_energy_kwh:window", "70m", {"p1": kwh}),
        *_expect("pod:gpu_usage_framebuffer_mib:max_window", "60m",
                {"p1": 1000, "p2": 2000, "p3": 1500, "p4": 1500}),
        *_expect("pod:gpu_usage_framebuffer_mib_hours:window", "60m",
                {"p1": 1000 * tenth, "p2": 2000 * tenth, "p3": 1500 * tenth,
                 "p4": 1500 * tenth}),
        *_expect("pod:gpu_usage_activity:max_window", "60m",
                {"p1": 0.5, "p2": 0.25, "p3": 0.01, "p4": 0.01}),
        *_expect("pod:gpu_usage_idle_gpu_hours:window", "60m",
                {"p3": tenth / 2, "p4": tenth / 2}),
    ]
    active = [
        *_expect("pod:gpu_usage_active_gpu_hours:window", "60m",
                {"p1": tenth * 0.5}, "activity_source=utilisation"),
        *_expect("pod:gpu_usage_active_gpu_hours:window", "60m",
                {"p2": tenth * 3 / 7 * 0.25}, "activity_source=profiling"),
        *_expect("pod:gpu_usage_active_gpu_hours:window", "60m",
                {"p3": tenth / 2 * 0.01, "p4": tenth / 2 * 0.01},
                "activity_source=utilisation"),
    ]
    test = {"rule_files": ["rules.yml"], "evaluation_interval": "1m",
            "tests": [{"interval": "1m", "input_series": _inputs(),
                       "promql_expr_test": [*tests, *active]}]}
    (tmp_path / "test.yml").write_text(yaml.safe_dump(test, sort_keys=False))
    result = subprocess.run([promtool(), "test", "rules", "test.yml"], cwd=tmp_path,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr


def test_a_gpu_with_profiling_and_utilisation_is_counted_once(tmp_path: Path) -> None:
    """A Hopper GPU serves both activity sources; its holder's active GPU-hours come from
    profiling alone (not also from utilisation, which disagrees here), and a GPU before
    Hopper next to it from utilisation."""
    groups = recording_rules(10 * 60.0, 60.0)
    (tmp_path / "rules.yml").write_text(yaml.safe_dump({"groups": groups}))
    tenth = 10 / 60
    both = 'UUID="GPU-h", gpu="0", modelName="M", Hostname="n1", namespace="ns1", pod="p1", ' \
           'container="main"'
    before = 'UUID="GPU-a", gpu="1", modelName="M", Hostname="n1", namespace="ns2", ' \
             'pod="p2", container="main"'
    inputs = [
        _series(both, "1000x120", "DCGM_FI_DEV_FB_USED"),
        _series(both, "0.25x120", "DCGM_FI_PROF_GR_ENGINE_ACTIVE"),
        _series(both, "90x120", "DCGM_FI_DEV_GPU_UTIL"),
        _series(before, "1000x120", "DCGM_FI_DEV_FB_USED"),
        _series(before, "50x120", "DCGM_FI_DEV_GPU_UTIL"),
    ]
    active = "pod:gpu_usage_active_gpu_hours:window"
    tests = [
        *_expect(active, "60m", {"p1": tenth * 0.25}, "activity_source=profiling"),
        *_expect(active, "60m", {"p2": tenth * 0.5}, "activity_source=utilisation"),
        # One series per pod: p1 has no utilisation-sourced figure besides its profiled one.
        {"expr": f"count by (pod) ({active})", "eval_time": "60m",
         "exp_samples": [{"labels": '{pod="p1"}', "value": 1},
                         {"labels": '{pod="p2"}', "value": 1}]},
        *_expect("pod:gpu_usage_activity:max_window", "60m", {"p1": 0.25}),
    ]
    test = {"rule_files": ["rules.yml"], "evaluation_interval": "1m",
            "tests": [{"interval": "1m", "input_series": inputs, "promql_expr_test": tests}]}
    (tmp_path / "test.yml").write_text(yaml.safe_dump(test, sort_keys=False))
    result = subprocess.run([promtool(), "test", "rules", "test.yml"], cwd=tmp_path,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr

"""The usage recording rules: the committed files match the generator and pass `promtool check
rules`; `promtool test rules` evaluates them over hand-written series and gets the figures
the accounting rules give by hand: a whole GPU (its counter reset once), a MIG instance, a
time-sliced GPU with two holders, a pod arriving inside a window, virtual-GPU copies (the
rows win), a time-sliced GPU passing from one holder to two, and the per-group and idle
rules, which hold the window before their timestamp."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from exporter.artifacts.fieldset import FieldSet, load_fieldset
from exporter.artifacts.usage_rules import group_rules, usage_prometheus_rule, usage_rule_groups
from exporter.promql import recording_rules
from tests.artifacts.conftest import promtool, validate_against_crd
from tests.support.paths import ROOT

RULES = ROOT / "alerts" / "gpu-exporter.usage-rules.yml"
FB, ALLOC = "DCGM_FI_DEV_FB_USED", "gpu_exporter_pod_gpu_allocation"
ENERGY, UTIL = "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "DCGM_FI_DEV_GPU_UTIL"
GR = "DCGM_FI_PROF_GR_ENGINE_ACTIVE"
NODE = 'modelName="M", Hostname="n1"'
WHOLE = f'UUID="GPU-a", gpu="0", {NODE}'
MIG = f'UUID="GPU-b", gpu="1", {NODE}, GPU_I_ID="2", GPU_I_PROFILE="3g.40gb"'
MIG_PARENT = f'UUID="GPU-b", gpu="1", {NODE}'
SHARED = f'UUID="GPU-c", gpu="2", {NODE}'
LATE = f'UUID="GPU-d", gpu="3", {NODE}'
COPIED = f'UUID="GPU-e", gpu="4", {NODE}, GPU_I_ID="1", GPU_I_PROFILE="7g.80gb"'
REPLICATED = f'UUID="GPU-f", gpu="5", {NODE}'
SLICED = f'UUID="GPU-g", gpu="6", {NODE}'
ENERGY_PER_MIN_MJ = 6_000_000
"""100 W."""
WINDOW = 10 * 60.0
TENTH = 10 / 60
"""Ten one-minute steps, in hours."""
KWH_PER_MIN = ENERGY_PER_MIN_MJ / 3.6e9
NAMESPACES = {"p1": "ns1", "p2": "ns2", "p5": "ns5", "p6": "ns6", "p7": "ns6", "p8": "ns8",
              "p9": "ns9", "p10": "ns9"}


def _series(labels: str, values: str, name: str) -> dict[str, str]:
    return {"series": f"{name}{{{labels}}}", "values": values}


def _holder(pod: str, extra: str = "") -> str:
    return f'namespace="{NAMESPACES.get(pod, "ns3")}", pod="{pod}", container="main"{extra}'


def _counter(start_mj: float, minutes: int) -> str:
    return f"{start_mj:.0f}+{ENERGY_PER_MIN_MJ}x{minutes}"


def _inputs() -> list[dict[str, str]]:
    row = 'container="main", resource="nvidia.com/gpu"'
    # The whole GPU's counter is reset right after the scrape at 65m (a driver reload): at
    # 66m it reads what it counted since.
    before = _counter(1e9, 65)
    after = f"{ENERGY_PER_MIN_MJ}+{ENERGY_PER_MIN_MJ}x53"
    return [
        _series(f"{WHOLE}, {_holder('p1')}", "1000x120", FB),
        _series(f"{WHOLE}, {_holder('p1')}", "50x120", UTIL),
        _series(f"{WHOLE}, {_holder('p1')}", f"{before} {after}", ENERGY),
        # A MIG instance held by p2; its energy is its GPU's, on the GPU's unlabelled series.
        _series(f"{MIG}, {_holder('p2')}", "2000x120", FB),
        _series(f"{MIG}, {_holder('p2')}", "0.25x120", GR),
        _series(MIG_PARENT, _counter(5e8, 120), ENERGY),
        # GPU-c time-sliced between p3 and p4 all along.
        _series(SHARED, "3000x120", FB),
        _series(SHARED, "1x120", UTIL),
        _series(SHARED, _counter(2e9, 120), ENERGY),
        _series(f'UUID="GPU-c", gpu="2", namespace="ns3", pod="p3", {row}, replica="0"',
                "1x120", ALLOC),
        _series(f'UUID="GPU-c", gpu="2", namespace="ns3", pod="p4", {row}, replica="1"',
                "1x120", ALLOC),
        # GPU-d free until p5 takes it at 64m: its series carry p5 from then on.
        _series(LATE, "0x63 stale", FB),
        _series(f"{LATE}, {_holder('p5')}", "_x64 500x55", FB),
        _series(LATE, f"{_counter(3e9, 63)} stale", ENERGY),
        _series(f"{LATE}, {_holder('p5')}", f"_x64 {_counter(3e9 + 64 * ENERGY_PER_MIN_MJ, 55)}",
                ENERGY),
        # GPU-e (a MIG instance) split between p6 and p7 with virtual GPUs: a copy of its
        # series per holder, and the rows. The rows win.
        _series(COPIED, "800x120", FB),
        _series(f"{COPIED}, {_holder('p6')}", "300x120", FB),
        _series(f"{COPIED}, {_holder('p7')}", "500x120", FB),
        _series('UUID="GPU-e", gpu="4", GPU_I_ID="1", namespace="ns6", pod="p6", '
                'container="main", resource="nvidia.com/mig-7g.80gb"', "1x120", ALLOC),
        _series('UUID="GPU-e", gpu="4", GPU_I_ID="1", namespace="ns6", pod="p7", '
                'container="main", resource="nvidia.com/mig-7g.80gb"', "1x120", ALLOC),
        # GPU-f: one replica handed to p8 with virtual GPUs: its copy keeps `vgpu`.
        _series(REPLICATED, "900x120", FB),
        _series(f'{REPLICATED}, {_holder("p8", ", vgpu=" + chr(34) + "0" + chr(34))}',
                "900x120", FB),
        _series(f'UUID="GPU-f", gpu="5", namespace="ns8", pod="p8", {row}, replica="0"',
                "1x120", ALLOC),
        # GPU-g: p9 alone (its series labelled) until 65m, then p9 and p10 time-slice it.
        _series(f"{SLICED}, {_holder('p9')}", "1000x65 stale", FB),
        _series(SLICED, "_x66 4000x53", FB),
        _series(f'UUID="GPU-g", gpu="6", namespace="ns9", pod="p9", {row}, replica="0"',
                "_x66 1x53", ALLOC),
        _series(f'UUID="GPU-g", gpu="6", namespace="ns9", pod="p10", {row}, replica="1"',
                "_x66 1x53", ALLOC),
    ]


def _labels(pod: str, extra: str = "") -> str:
    labels = {"namespace": NAMESPACES.get(pod, "ns3"), "pod": pod, "modelName": "M",
              "Hostname": "n1"}
    if extra:
        key, _, text = extra.partition("=")
        labels[key] = text
    return "{" + ", ".join(f'{k}="{v}"' for k, v in sorted(labels.items())) + "}"


def _expect(rule: str, at: str, values: dict[str, float], extra: str = ""
            ) -> list[dict[str, Any]]:
    """promtool cases: each pod's sample of `rule` at `at` equals its value to 1e-12
    (promtool compares floats exactly, and the rules add in another order than Python)."""
    return [{"expr": f'abs({rule}{{pod="{pod}"}} - {value!r}) < bool 1e-12', "eval_time": at,
             "exp_samples": [{"labels": _labels(pod, extra), "value": 1}]}
            for pod, value in values.items()]


HOST_LABELS = ["hostname", "Hostname"]
"""dcgm-exporter 4.8.3+'s host label (this exporter's default) and 4.8.2's: the series and
expected samples above name the node `Hostname`, and each test runs under both names."""


def _run(tmp_path: Path, groups: list[dict[str, Any]], inputs: list[dict[str, str]],
         cases: list[dict[str, Any]], host_label: str) -> None:
    (tmp_path / "rules.yml").write_text(yaml.safe_dump({"groups": groups}))
    # promtool evaluates every group at the test's interval, not the group's: the rules'.
    test = {"rule_files": ["rules.yml"], "evaluation_interval": "10m",
            "tests": [{"interval": "1m", "input_series": inputs, "promql_expr_test": cases}]}
    text = yaml.safe_dump(test, sort_keys=False)
    assert "Hostname" in text
    (tmp_path / "test.yml").write_text(text.replace("Hostname", host_label))
    result = subprocess.run([promtool(), "test", "rules", "test.yml"], cwd=tmp_path,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr


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


def test_groupings_are_read_as_the_report_names_them() -> None:
    chosen = group_rules(["namespace,label:team", "node", "namespace", "pod"])
    assert [(g.name, g.labels) for g in chosen] == [
        ("namespace", ("namespace",)), ("label:team", ("label_team", "team")),
        ("node", ("Hostname", "hostname", "instance"))]


@pytest.mark.parametrize("host_label", HOST_LABELS)
def test_rules_compute_the_accounting_by_hand(tmp_path: Path, host_label: str) -> None:
    groups = recording_rules(WINDOW, 60.0)
    kwh = 10 * KWH_PER_MIN
    cases = [
        *_expect("pod:gpu_usage_allocated_gpu_hours:window", "60m",
                 {"p1": TENTH, "p2": TENTH * 3 / 7, "p3": TENTH / 2, "p4": TENTH / 2,
                  "p6": TENTH / 2, "p7": TENTH / 2, "p8": TENTH}),
        *_expect("pod:gpu_usage_held_hours:window", "60m",
                 {"p1": TENTH, "p2": TENTH, "p3": TENTH, "p4": TENTH, "p8": TENTH}),
        *_expect("pod:gpu_usage_energy_kwh:window", "60m",
                 {"p1": kwh, "p2": kwh * 3 / 7, "p3": kwh / 2, "p4": kwh / 2}),
        # The window holding the reset counts what the counter counted from its first
        # value after the reset (66m) to the window's end (70m).
        *_expect("pod:gpu_usage_energy_kwh:window", "70m", {"p1": 4 * KWH_PER_MIN}),
        *_expect("pod:gpu_usage_framebuffer_mib:max_window", "60m",
                 {"p1": 1000, "p2": 2000, "p3": 1500, "p4": 1500, "p6": 400, "p7": 400}),
        *_expect("pod:gpu_usage_framebuffer_mib_hours:window", "60m",
                 {"p1": 1000 * TENTH, "p2": 2000 * TENTH, "p3": 1500 * TENTH,
                  "p4": 1500 * TENTH}),
        *_expect("pod:gpu_usage_activity:max_window", "60m",
                 {"p1": 0.5, "p2": 0.25, "p3": 0.01, "p4": 0.01}),
        *_expect("pod:gpu_usage_active_gpu_hours:window", "60m",
                 {"p1": TENTH * 0.5, "p3": TENTH / 2 * 0.01, "p4": TENTH / 2 * 0.01},
                 "activity_source=utilisation"),
        *_expect("pod:gpu_usage_active_gpu_hours:window", "60m",
                 {"p2": TENTH * 3 / 7 * 0.25}, "activity_source=profiling"),
        # p5 holds from 64m: seven steps of the window ending at 70m. Its counter has no
        # value before its first step there; six steps' rise scaled to seven.
        *_expect("pod:gpu_usage_allocated_gpu_hours:window", "70m", {"p5": 7 / 60}),
        *_expect("pod:gpu_usage_energy_kwh:window", "70m", {"p5": 7 * KWH_PER_MIN}),
        # p9 alone for five steps, then halves with p10 for five.
        *_expect("pod:gpu_usage_allocated_gpu_hours:window", "70m",
                 {"p9": 7.5 / 60, "p10": 2.5 / 60}),
        *_expect("pod:gpu_usage_held_hours:window", "70m", {"p9": TENTH, "p10": 5 / 60}),
        *_expect("pod:gpu_usage_framebuffer_mib_hours:window", "70m",
                 {"p9": (5 * 1000 + 5 * 2000) / 60}),
    ]
    _run(tmp_path, groups, _inputs(), cases, host_label)


@pytest.mark.parametrize("host_label", HOST_LABELS)
def test_group_and_idle_rules_hold_the_window_before(tmp_path: Path, host_label: str) -> None:
    """Chained one window back: the sample at 70m holds 50m-60m, whatever the ruler has
    stored of 60m-70m yet."""
    groups = recording_rules(WINDOW, 60.0, group_rules(["namespace", "node"]))
    kwh = 10 * KWH_PER_MIN

    def group(rule: str, grouping: str, labels: str, value: float) -> dict[str, Any]:
        selector = f'{rule}{{gpu_usage_group_by="{grouping}", {labels}}}'
        return {"expr": f"abs({selector} - {value!r}) < bool 1e-12", "eval_time": "70m",
                "exp_samples": [{"labels": "{" + f'gpu_usage_group_by="{grouping}", {labels}'
                                 + "}", "value": 1}]}

    cases = [
        group("group:gpu_usage_allocated_gpu_hours:window", "namespace",
              'modelName="M", namespace="ns3"', TENTH),
        group("group:gpu_usage_energy_kwh:window", "namespace", 'namespace="ns1"', kwh),
        group("group:gpu_usage_active_gpu_hours:window", "namespace",
              'activity_source="profiling", namespace="ns2"', TENTH * 3 / 7 * 0.25),
        group("group:gpu_usage_framebuffer_mib:max_window", "namespace", 'namespace="ns3"',
              1500),
        group("group:gpu_usage_idle_gpu_hours:window", "namespace", 'namespace="ns3"', TENTH),
        # p9 held GPU-g alone in 50m-60m; p10 arrives later.
        group("group:gpu_usage_held_hours:window", "namespace", 'namespace="ns9"', TENTH),
        group("group:gpu_usage_held_hours:window", "node", 'Hostname="n1"', 8 * TENTH),
        *_expect("pod:gpu_usage_idle_gpu_hours:window", "70m",
                 {"p3": TENTH / 2, "p4": TENTH / 2}),
        {"expr": "gpu_usage:rules_idle_below", "eval_time": "70m",
         "exp_samples": [{"labels": "{__name__=\"gpu_usage:rules_idle_below\"}",
                          "value": 0.05}]},
        {"expr": "gpu_usage:group_rules_window_seconds", "eval_time": "70m",
         "exp_samples": [{"labels": '{__name__="gpu_usage:group_rules_window_seconds", '
                                    f'gpu_usage_group_by="{g}"}}', "value": WINDOW}
                         for g in ("namespace", "node")]},
    ]
    _run(tmp_path, groups, _inputs(), cases, host_label)


def test_a_gpu_with_profiling_and_utilisation_is_counted_once(tmp_path: Path) -> None:
    """A Hopper GPU serves both activity sources; its holder's active GPU-hours come from
    profiling alone (not also from utilisation, which disagrees here), and a GPU before
    Hopper next to it from utilisation."""
    groups = recording_rules(WINDOW, 60.0)
    both = f'UUID="GPU-h", gpu="0", {NODE}, namespace="ns1", pod="p1", container="main"'
    before = f'UUID="GPU-a", gpu="1", {NODE}, namespace="ns2", pod="p2", container="main"'
    inputs = [
        _series(both, "1000x120", FB),
        _series(both, "0.25x120", GR),
        _series(both, "90x120", UTIL),
        _series(before, "1000x120", FB),
        _series(before, "50x120", UTIL),
    ]
    active = "pod:gpu_usage_active_gpu_hours:window"
    cases = [
        *_expect(active, "60m", {"p1": TENTH * 0.25}, "activity_source=profiling"),
        *_expect(active, "60m", {"p2": TENTH * 0.5}, "activity_source=utilisation"),
        # One series per pod: p1 has no utilisation-sourced figure besides its profiled one.
        {"expr": f"count by (pod) ({active})", "eval_time": "60m",
         "exp_samples": [{"labels": '{pod="p1"}', "value": 1},
                         {"labels": '{pod="p2"}', "value": 1}]},
        *_expect("pod:gpu_usage_activity:max_window", "60m", {"p1": 0.25}),
    ]
    _run(tmp_path, groups, inputs, cases, "hostname")

"""`gpu-exporter doctor` resolves its settings from the option table, as serve does, and
reports each one not at its default with where it came from."""

from __future__ import annotations

import io

import pytest

from exporter import doctor
from exporter.options import OPTIONS

SIM_ONLY = ("--sim.profile", "l4-1", "--skip-kubernetes")


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in {n for option in OPTIONS for n in option.env}:
        monkeypatch.delenv(name, raising=False)


def run_doctor(*argv: str) -> tuple[int, list[str]]:
    out = io.StringIO()
    rc = doctor.main(list(argv), out=out)
    return rc, out.getvalue().splitlines()


def settings_lines(lines: list[str]) -> list[str]:
    return [line for line in lines if "] setting: " in line]


def test_each_changed_setting_is_reported_with_its_source(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPU_EXPORTER_BACKEND", "sim")
    monkeypatch.setenv("GPU_EXPORTER_SCOPE", "")  # empty: as if unset
    monkeypatch.setenv("DCGM_POD_RESOURCES_KUBELET_SOCKET", "/run/k0s/kubelet.sock")
    rc, lines = run_doctor(*SIM_ONLY)
    assert rc == 0, lines
    assert settings_lines(lines) == [
        "[INFO] setting: backend sim (from $GPU_EXPORTER_BACKEND)",
        "[INFO] setting: sim profile l4-1 (from the command line)",
        "[INFO] setting: pod resources socket /run/k0s/kubelet.sock "
        "(from $DCGM_POD_RESOURCES_KUBELET_SOCKET)",
        "[INFO] setting: skip kubernetes on (from the command line)",
    ]
    # the checks ran with what was reported: the simulated node from the environment
    assert "[  OK] NVML: loaded simulated node 'l4-1'" in lines


def test_a_flag_hides_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPU_EXPORTER_SIM_SEED", "3")
    rc, lines = run_doctor("--backend", "sim", "--sim.seed", "4", *SIM_ONLY)
    assert rc == 0, lines
    assert "[INFO] setting: sim seed 4 (from the command line)" in settings_lines(lines)


def test_defaults_are_not_reported() -> None:
    rc, lines = run_doctor("--backend", "sim", "--skip-kubernetes")
    assert rc == 0, lines
    assert settings_lines(lines) == [
        "[INFO] setting: backend sim (from the command line)",
        "[INFO] setting: skip kubernetes on (from the command line)",
    ]


def test_a_bad_value_fails_the_run_and_names_its_source(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPU_EXPORTER_POD_LABELS", "team(")
    rc, lines = run_doctor("--backend", "sim")
    assert rc == 1
    assert lines[0].startswith("[FAIL] setting: $GPU_EXPORTER_POD_LABELS: 'team(' is not a "
                               "valid regex")
    assert lines[-1].endswith("some checks failed")
    assert not [line for line in lines if "NVML" in line]  # nothing checked with bad settings

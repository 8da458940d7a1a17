"""`serve --backend sim` on nodes without GPM: the DCGM_FI_PROF_* counterparts on /metrics by
default, none with `--no-prof-counterparts` (or its variable), and dcgm-exporter 4.10's and
4.9's collectors files read."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.support.exporter_process import ExporterProcess
from tests.support.wait import wait_until

COUNTERPARTS = ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "DCGM_FI_PROF_DRAM_ACTIVE",
                "DCGM_FI_PROF_PCIE_TX_BYTES", "DCGM_FI_PROF_PCIE_RX_BYTES")
NO_COUNTERPART = ("DCGM_FI_PROF_SM_ACTIVE", "DCGM_FI_PROF_SM_OCCUPANCY",
                  "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "DCGM_FI_PROF_PIPE_FP16_ACTIVE")


def _families(text: str) -> set[str]:
    return set(re.findall(r"^([A-Za-z_:][A-Za-z0-9_:]*)[{ ]", text, re.MULTILINE))


def _serve(args: list[str], env: dict[str, str] | None = None) -> ExporterProcess:
    exporter = ExporterProcess(["--backend", "sim", "-c", "200ms", *args], env)
    exporter.wait_ready(60.0)
    return exporter


@pytest.mark.parametrize("profile", ["l4-1", "a100-timesliced"])
def test_counterparts_served_without_gpm(profile: str) -> None:
    exporter = _serve(["--sim.profile", profile])
    try:
        wait_until(lambda: set(COUNTERPARTS) <= _families(exporter.metrics()), 30.0,
                   what=f"the counterparts on {profile}")
        served = _families(exporter.metrics())
        assert not served & set(NO_COUNTERPART), profile
        assert 'gpu_exporter_gpm_supported{gpu="0"' in exporter.metrics()
    finally:
        exporter.close()


@pytest.mark.parametrize(("args", "env"), [
    (["--no-prof-counterparts"], None),
    ([], {"GPU_EXPORTER_NO_PROF_COUNTERPARTS": "true"}),
])
def test_switched_off(args: list[str], env: dict[str, str] | None) -> None:
    exporter = _serve(["--sim.profile", "l4-1", *args], env)
    try:
        first = _last_poll(exporter.metrics())
        # Three more polls: enough for every counterpart to have had its second reading.
        wait_until(lambda: _last_poll(exporter.metrics()) >= first + 0.6, 30.0,
                   what="three more polls")
        served = _families(exporter.metrics())
        assert "DCGM_FI_DEV_GPU_UTIL" in served
        assert not {f for f in served if f.startswith("DCGM_FI_PROF_")}
    finally:
        exporter.close()


def _last_poll(text: str) -> float:
    found = re.search(r"^gpu_exporter_last_poll_success_timestamp_seconds (\S+)$", text,
                      re.MULTILINE)
    assert found, "no poll timestamp"
    return float(found.group(1))


def test_dcgm_exporter_4_10_and_4_9_collectors(tmp_path: Path) -> None:
    csv = tmp_path / "collectors.csv"
    csv.write_text(
        "# written like dcgm-exporter 4.10's default-counters.csv\n"
        "DCGM_FI_DEV_SM_CLOCK, gauge, SM clock frequency (in MHz).\n"
        "DCGM_FI_PROF_GR_ENGINE_ACTIVE, gauge, Ratio of time the graphics engine is active.\n"
        "DCGM_FI_PROF_PCIE_TX_BYTES_PER_SECOND, gauge, PCIe bytes sent per second.\n"
        "DCGM_FI_PROF_PCIE_RX_BYTES_PER_SECOND, gauge, PCIe bytes received per second.\n"
        "# and 4.9's base-unit names\n"
        "DCGM_FI_DEV_SM_CLOCK_HERTZ, gauge, SM clock frequency (in Hz).\n"
        "DCGM_FI_DEV_GPU_ENERGY_JOULES_TOTAL, counter, Energy since boot (in J).\n"
        "DCGM_FI_PROF_GR_ENGINE_UTIL_RATIO, gauge, Graphics engine active (ratio).\n"
        "DCGM_FI_DEV_FB_CAPACITY_BYTES, gauge, Framebuffer capacity (in bytes).\n")
    exporter = _serve(["--sim.profile", "l4-1", "-f", str(csv)])
    try:
        names = ("DCGM_FI_PROF_PCIE_TX_BYTES_PER_SECOND", "DCGM_FI_PROF_PCIE_RX_BYTES_PER_SECOND",
                 "DCGM_FI_PROF_GR_ENGINE_UTIL_RATIO", "DCGM_FI_DEV_SM_CLOCK_HERTZ",
                 "DCGM_FI_DEV_GPU_ENERGY_JOULES_TOTAL")
        wait_until(lambda: set(names) <= _families(exporter.metrics()), 30.0,
                   what="the renamed rows served")
        text = exporter.metrics()
        mhz = re.search(r"^DCGM_FI_DEV_SM_CLOCK\{[^}]*\} (\S+)$", text, re.MULTILINE)
        hz = re.search(r"^DCGM_FI_DEV_SM_CLOCK_HERTZ\{[^}]*\} (\S+)$", text, re.MULTILINE)
        assert mhz
        assert hz
        assert float(hz.group(1)) == float(mhz.group(1)) * 1e6  # one poll, two units
        assert "DCGM_FI_DEV_FB_CAPACITY_BYTES" not in text
        warnings = [line for line in exporter.output().splitlines()
                    if "DCGM_FI_DEV_FB_CAPACITY_BYTES" in line]
        assert len(warnings) == 1, warnings
        assert f"{csv}:10" in warnings[0]
        assert "PER_SECOND" not in exporter.output()  # served, not warned about
    finally:
        exporter.close()

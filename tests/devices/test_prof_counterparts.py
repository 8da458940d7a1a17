"""DCGM_FI_PROF_* counterparts on GPUs without GPM, over pynvml and the simulated library.

Each expected value is stated from the scenario's own figures: the utilisation samples taken
since the previous poll, and the counters' increase over the simulated seconds between two
polls.
"""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import pynvml
import pytest

from exporter.devices.counterparts import CounterpartReader
from tests.nvmlsim.harness import run_child, write_scenario
from tests.support.clock import FakeClock

MIB = 1 << 20

PROF = ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "DCGM_FI_PROF_DRAM_ACTIVE",
        "DCGM_FI_PROF_PCIE_TX_BYTES", "DCGM_FI_PROF_PCIE_RX_BYTES",
        "DCGM_FI_PROF_NVLINK_TX_BYTES", "DCGM_FI_PROF_NVLINK_RX_BYTES",
        "DCGM_FI_PROF_SM_ACTIVE", "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE")
CSV = "".join(f"{name}, gauge, x\n" for name in PROF)

A100 = {
    "name": "NVIDIA A100-SXM4-80GB",
    "uuid": "GPU-a1000000-0000-4000-8000-000000000001",
    "gpm_supported": 0,
    "nvlink_links": 12, "nvlink_tx_kib": 1000, "nvlink_rx_kib": 2000,
    "utilization_samples": [
        {"at_s": 1, "gpu_util": 30, "memory_util": 10},
        {"at_s": 2, "gpu_util": 50, "memory_util": 20},
        {"at_s": 3, "gpu_util": 70, "memory_util": 30},
        {"at_s": 5, "gpu_util": 90, "memory_util": 40},
    ],
    "fields": {"197": 1_000_000, "198": 4_000_000},
}

H100 = A100 | {
    "name": "NVIDIA H100 80GB HBM3",
    "uuid": "GPU-h1000000-0000-4000-8000-000000000001",
    "gpm_supported": 1,
    "gpm": {"1": 45, "2": 60, "5": 12.5, "10": 70, "20": 100, "21": 50, "60": 2048,
            "61": 1024},
}

BACKEND = """
from exporter.devices.config import DeviceSettings
from exporter.devices.nvml import NvmlBackend
from exporter.fields.csv import load_collectors
collectors = load_collectors({csv!r})
backend = NvmlBackend(pynvml, collectors.specs, DeviceSettings(prof_counterparts={on!r}),
                      clock=sim.time)
def prof():
    values = backend.poll().values[(0, -1)]
    return {{k: v for k, v in values.items() if "PROF" in k}}
"""


def _child(lib: Path, tmp_path: Path, device: dict[str, Any], code: str, csv: str = CSV,
           on: bool = True) -> dict[str, Any]:
    csv_path = tmp_path / "collectors.csv"
    csv_path.write_text(csv)
    scenario = {"clock": "manual", "devices": [device]}
    return run_child(lib, BACKEND.format(csv=str(csv_path), on=on) + textwrap.dedent(code),
                     scenario_file=write_scenario(tmp_path, scenario))


# Five polls: the first, 30/50/70 and counters since it, nothing new, a wrapped PCIe TX
# counter with the sample at 5 s, and the counter counting again without a new sample.
POLLS = """
sim.set_time(0.5)
backend.start()
out["first"] = prof()
sim.set_time(3.5)
sim.set_value(0, "fi:197", 4_000_000)
sim.set_value(0, "fi:198", 10_000_000)
sim.set_value(0, "nvlink_tx_kib", 1300)
sim.set_value(0, "nvlink_rx_kib", 2600)
out["second"] = prof()
out["again"] = prof()
sim.set_time(5.5)
sim.set_value(0, "fi:197", 3_000_000)
sim.set_value(0, "fi:198", 12_000_000)
out["wrapped"] = prof()
sim.set_time(7.5)
sim.set_value(0, "fi:197", 5_000_000)
out["counting"] = prof()
"""


def test_counterparts_follow_the_samples_and_counters(nvmlsim_lib: Path,
                                                      tmp_path: Path) -> None:
    r = _child(nvmlsim_lib, tmp_path, A100, POLLS)
    assert r["first"] == {}, "the first poll has nothing to average or difference"
    second = r["second"]
    assert second.keys() == set(PROF[:6]), "SM_ACTIVE and tensor have no NVML counterpart"
    assert second["DCGM_FI_PROF_GR_ENGINE_ACTIVE"] == pytest.approx(0.5)  # (30+50+70)/3 %
    assert second["DCGM_FI_PROF_DRAM_ACTIVE"] == pytest.approx(0.2)  # (10+20+30)/3 %
    assert second["DCGM_FI_PROF_PCIE_TX_BYTES"] == 1_000_000  # 3,000,000 B over 3 s
    assert second["DCGM_FI_PROF_PCIE_RX_BYTES"] == 2_000_000  # 6,000,000 B over 3 s
    assert second["DCGM_FI_PROF_NVLINK_TX_BYTES"] == 100 * 1024  # 300 KiB over 3 s
    assert second["DCGM_FI_PROF_NVLINK_RX_BYTES"] == 200 * 1024  # 600 KiB over 3 s
    assert r["again"] == {}, "no new sample and no time passed: nothing, not the last value"
    wrapped = r["wrapped"]
    assert "DCGM_FI_PROF_PCIE_TX_BYTES" not in wrapped, "a counter that went back has no rate"
    assert wrapped["DCGM_FI_PROF_PCIE_RX_BYTES"] == 1_000_000  # 2,000,000 B over 2 s
    assert wrapped["DCGM_FI_PROF_GR_ENGINE_ACTIVE"] == pytest.approx(0.9)  # the 5 s sample
    assert wrapped["DCGM_FI_PROF_DRAM_ACTIVE"] == pytest.approx(0.4)
    counting = r["counting"]
    assert counting["DCGM_FI_PROF_PCIE_TX_BYTES"] == 1_000_000  # 2,000,000 B over 2 s
    assert "DCGM_FI_PROF_GR_ENGINE_ACTIVE" not in counting, "no sample since 5 s"


def test_gpm_values_win_on_hopper(nvmlsim_lib: Path, tmp_path: Path) -> None:
    r = _child(nvmlsim_lib, tmp_path, H100, POLLS)
    for poll in ("second", "again", "wrapped", "counting"):
        values = r[poll]
        assert values["DCGM_FI_PROF_GR_ENGINE_ACTIVE"] == pytest.approx(0.45), poll
        assert values["DCGM_FI_PROF_DRAM_ACTIVE"] == pytest.approx(0.70), poll
        assert values["DCGM_FI_PROF_PCIE_TX_BYTES"] == 100 * MIB, poll
        assert values["DCGM_FI_PROF_NVLINK_TX_BYTES"] == 1024 * MIB, poll
        assert values["DCGM_FI_PROF_SM_ACTIVE"] == pytest.approx(0.60), poll


def test_no_counterparts_when_switched_off(nvmlsim_lib: Path, tmp_path: Path) -> None:
    r = _child(nvmlsim_lib, tmp_path, A100, POLLS, on=False)
    assert [r[poll] for poll in ("first", "second", "again", "wrapped", "counting")] == [{}] * 5


def test_dcgm_exporter_4_10_default_names(nvmlsim_lib: Path, tmp_path: Path) -> None:
    # 4.10's shipped collectors: the old rows with the PCIe rates under their new names.
    csv = ("DCGM_FI_DEV_GPU_UTIL, gauge, GPU utilization (in %).\n"
           "DCGM_FI_PROF_GR_ENGINE_ACTIVE, gauge, Ratio of time the graphics engine is "
           "active.\n"
           "DCGM_FI_PROF_PCIE_TX_BYTES_PER_SECOND, gauge, PCIe bytes sent per second.\n"
           "DCGM_FI_PROF_PCIE_RX_BYTES_PER_SECOND, gauge, PCIe bytes received per second.\n"
           "DCGM_FI_PROF_NVLINK_TX_BYTES_PER_SECOND, gauge, NVLink bytes sent per second.\n")
    code = POLLS + 'out["warnings"] = list(collectors.warnings)\n'
    on_a100 = _child(nvmlsim_lib, tmp_path, A100, code, csv=csv)
    assert on_a100["warnings"] == []
    assert on_a100["second"] == {
        "DCGM_FI_PROF_GR_ENGINE_ACTIVE": pytest.approx(0.5),
        "DCGM_FI_PROF_PCIE_TX_BYTES_PER_SECOND": 1_000_000,
        "DCGM_FI_PROF_PCIE_RX_BYTES_PER_SECOND": 2_000_000,
        "DCGM_FI_PROF_NVLINK_TX_BYTES_PER_SECOND": 100 * 1024,
    }
    on_h100 = _child(nvmlsim_lib, tmp_path, H100, code, csv=csv)
    assert on_h100["second"]["DCGM_FI_PROF_PCIE_TX_BYTES_PER_SECOND"] == 100 * MIB
    assert on_h100["second"]["DCGM_FI_PROF_NVLINK_TX_BYTES_PER_SECOND"] == 1024 * MIB


def test_a_counter_nvml_answers_in_32_bits_has_no_rate() -> None:
    # A 32-bit PCIe byte counter wraps every 4 GiB, several times a second when busy.
    clock = FakeClock()
    reader = CounterpartReader(pynvml, clock)  # `rates` makes no NVML call
    entry = (pynvml.NVML_FI_DEV_PCIE_COUNT_TX_BYTES, 0)
    for narrow in ({entry}, set()):
        key = (len(narrow), -1)
        assert reader.rates(key, {entry: 1_000}, [entry], narrow) == {}, "first reading"
        clock.advance(2.0)
        rates = reader.rates(key, {entry: 5_000}, [entry], narrow)
        assert rates == ({} if narrow else {entry: 2_000.0}), narrow

"""Fault matrix, driver side: the exporter over the real pynvml and the simulated
libnvidia-ml, whose faults the test injects and clears while it scrapes at 25 Hz."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from tests.stress.conftest import Matrix
from tests.stress.harness import finish
from tests.stress.nodes import (
    FB_USED,
    NODE,
    NVML_UP,
    TEMP,
    control,
    dcgm_names,
    during,
    gpus_with,
    start_controlled,
)
from tests.stress.results import CASES
from tests.stress.scraper import Scrape
from tests.support.exporter_process import ExporterProcess

ALL_GPUS = {"0", "1", "2", "3"}
DOWN_NODE = {**NODE, "init_failure": {"code": "DRIVER_NOT_LOADED"}}
"""The same node, with every nvmlInit failing until `clear_init_failure`."""


def no_values_while_down(scrape: Scrape, _marks: Mapping[str, float]) -> list[str]:
    """A body that says NVML is down shows no device values (never zeros or stale ones)."""
    if scrape.value(NVML_UP) == 0 and dcgm_names(scrape):
        return [f"nvml_up 0 beside {dcgm_names(scrape)[:3]}"]
    return []


def every_gpu(scrape: Scrape, _marks: Mapping[str, float]) -> list[str]:
    """No partial body: every GPU's series in every scrape."""
    missing = ALL_GPUS - gpus_with(scrape, TEMP)
    return [f"GPUs {sorted(missing)} missing"] if missing else []


def test_gpu_lost_mid_run_and_back(nvmlsim_lib: Path, tmp_path: Path,
                                   exporter: type[ExporterProcess], matrix: Matrix) -> None:
    run = start_controlled(exporter, nvmlsim_lib, tmp_path)
    run.wait_served(lambda s: gpus_with(s, TEMP) == ALL_GPUS, "all four GPUs")
    run.hold(25)
    run.mark("fault")
    control(run, "set_gpu_lost", 1)
    run.marks["noticed"] = run.wait_served(lambda s: "1" not in gpus_with(s, TEMP),
                                           "GPU 1 left out", since="fault").at
    run.hold(40)
    run.mark("clear")
    control(run, "restore_gpu", 1)
    recovery = run.recovered(lambda s: gpus_with(s, TEMP) == ALL_GPUS, "GPU 1 back")
    run.hold(15)

    def lost_gpu_absent(scrape: Scrape, marks: Mapping[str, float]) -> list[str]:
        out = []
        if during(scrape, marks, "noticed", "clear") and dcgm_names(scrape, gpu="1"):
            out.append(f"lost GPU 1 still shows {dcgm_names(scrape, gpu='1')[:3]}")
        others = {"0", "2", "3"} - gpus_with(scrape, TEMP)
        if others:
            out.append(f"healthy GPUs {sorted(others)} missing")
        return out

    result = matrix.record("gpu-lost", finish(
        run, CASES["gpu-lost"][0], ready=[200], rules=[lost_gpu_absent], recovery_s=recovery))
    assert result.ok, result.explain()


def test_nvml_down_at_start(nvmlsim_lib: Path, tmp_path: Path,
                            exporter: type[ExporterProcess], matrix: Matrix) -> None:
    run = start_controlled(exporter, nvmlsim_lib, tmp_path, DOWN_NODE)
    run.mark("fault")  # down from the start
    run.wait_served(lambda s: s.value(NVML_UP) == 0, "nvml_up 0")
    run.hold(30)
    run.mark("clear")
    control(run, "clear_init_failure")
    recovery = run.recovered(lambda s: gpus_with(s, TEMP) == ALL_GPUS, "every GPU served")
    run.hold(15)
    result = matrix.record("nvml-down-at-start", finish(
        run, CASES["nvml-down-at-start"][0], ready=[503, 200], rules=[no_values_while_down],
        recovery_s=recovery))
    assert result.ok, result.explain()


def test_nvml_down_mid_run_then_recovery(nvmlsim_lib: Path, tmp_path: Path,
                                         exporter: type[ExporterProcess],
                                         matrix: Matrix) -> None:
    run = start_controlled(exporter, nvmlsim_lib, tmp_path)
    run.wait_served(lambda s: gpus_with(s, TEMP) == ALL_GPUS, "all four GPUs")
    run.hold(25)
    run.mark("fault")
    # A driver unload: the library forgets nvmlInit (every call answers UNINITIALIZED),
    # then comes back with the same node but refusing nvmlInit for now.
    control(run, "reset")
    control(run, "load_scenario", DOWN_NODE)
    run.wait_served(lambda s: s.value(NVML_UP) == 0, "nvml_up 0", since="fault", timeout=15)
    run.hold(40)
    run.mark("clear")
    control(run, "clear_init_failure")
    recovery = run.recovered(lambda s: gpus_with(s, TEMP) == ALL_GPUS, "every GPU served")
    run.hold(15)
    result = matrix.record("nvml-down-mid-run", finish(
        run, CASES["nvml-down-mid-run"][0], ready=[200, 503, 200],
        rules=[no_values_while_down], recovery_s=recovery))
    assert result.ok, result.explain()


def test_one_nvml_call_hung_for_minutes(nvmlsim_lib: Path, tmp_path: Path,
                                        exporter: type[ExporterProcess],
                                        matrix: Matrix) -> None:
    run = start_controlled(exporter, nvmlsim_lib, tmp_path)
    run.wait_served(lambda s: gpus_with(s, TEMP) == ALL_GPUS, "all four GPUs")
    run.hold(25)
    run.mark("fault")
    control(run, "set_hang", "nvmlDeviceGetPowerUsage", 600.0, gpu=1)
    run.wait_ready(503, "fault", timeout=15)
    run.hold(50)
    run.mark("clear")
    control(run, "end_hangs")
    recovery = run.recovered(lambda s: gpus_with(s, TEMP) == ALL_GPUS, "fresh data")
    run.hold(15)
    # While the poll is stuck the last complete readings stay served, every GPU in them.
    result = matrix.record("nvml-hang", finish(
        run, CASES["nvml-hang"][0], ready=[200, 503, 200], rules=[every_gpu], recovery_s=recovery))
    assert result.ok, result.explain()


def test_mig_layout_rebuilt(nvmlsim_lib: Path, tmp_path: Path,
                            exporter: type[ExporterProcess], matrix: Matrix) -> None:
    run = start_controlled(exporter, nvmlsim_lib, tmp_path)

    def instances(scrape: Scrape) -> set[str]:
        return {lab["GPU_I_ID"] for lab, _ in scrape.matching(FB_USED, gpu="2")
                if "GPU_I_ID" in lab}

    run.wait_served(lambda s: instances(s) == {"2", "9"}, "GPU instances 2 and 9")
    run.hold(25)
    run.mark("clear")  # the rebuild is instant: recovery runs from it
    control(run, "patch_device", 2, {"mig": [
        {"gi": 1, "profile": "7g.141gb", "compute_instances": [{"index": 3}]}]})
    recovery = run.recovered(lambda s: instances(s) == {"1"}, "the new layout")
    run.hold(25)

    def one_layout(scrape: Scrape, marks: Mapping[str, float]) -> list[str]:
        # Old layout, new layout, or (for the one poll that found the old handles invalid)
        # neither; never a mix, never the destroyed instances again.
        seen = instances(scrape)
        if seen not in ({"2", "9"}, {"1"}, set()):
            return [f"GPU 2 shows GPU instances {sorted(seen)}"]
        if during(scrape, marks, "recovered", None) and seen != {"1"}:
            return [f"destroyed GPU instances {sorted(seen)} served again"]
        return every_gpu(scrape, marks)

    result = matrix.record("mig-rebuilt", finish(
        run, CASES["mig-rebuilt"][0], ready=[200], rules=[one_layout], recovery_s=recovery))
    assert result.ok, result.explain()

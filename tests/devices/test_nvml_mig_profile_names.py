"""`GPU_I_PROFILE` from NVML's name of the GPU instance's profile, as dcgm-exporter 4.8.4
fills it, and the fallback to the MIG device's name when NVML fails or answers empty."""

from __future__ import annotations

from typing import Any

import pynvml
import pytest

from exporter.devices.enumerate import enumerate_devices
from exporter.devices.filter import ALL_DEVICES
from exporter.devices.mig_profile_names import nvml_profile_name
from exporter.devices.nvml import NvmlBackend
from exporter.exposition.render import device_families
from exporter.fields.csv import parse_collectors
from exporter.sampling.snapshot import HostLabel, Snapshot
from exporter.simulated.node import SimNvml
from tests.support.clock import FakeClock

CAPTURED = [(2, "3g.71gb"), (3, "2g.35gb"), (9, "1g.18gb"), (10, "1g.18gb")]
"""GPU 0 of the simulated H200 node: (GPU instance id, profile)."""


def _gpu0_profiles(lib: SimNvml) -> list[tuple[int | None, str | None]]:
    lib.nvmlInit()
    inventory = enumerate_devices(lib, ALL_DEVICES).inventory
    return [(i.gpu_instance_id, i.gpu_instance_profile) for i in inventory.instances
            if i.gpu == 0]


def test_the_profile_comes_from_nvmls_profile_info() -> None:
    lib = SimNvml("h200-mig")
    assert _gpu0_profiles(lib) == CAPTURED
    # One lookup per GPU instance of the node (4 on GPU 0, 7 on GPU 1), by profile id.
    assert lib.calls["nvmlDeviceGetGpuInstanceProfileInfoByIdV"] == 11
    assert lib.calls["nvmlGpuInstanceGetInfo"] == 11


class _Renamed(SimNvml):
    """The simulated node, but NVML names the 3-slice profile otherwise than the MIG device's
    name does (as NVML's `7g.80gb` against DCGM's `7g.79gb`)."""

    def nvmlDeviceGetGpuInstanceProfileInfoByIdV(self, handle: Any, profile_id: int) -> Any:
        info = super().nvmlDeviceGetGpuInstanceProfileInfoByIdV(handle, profile_id)
        if profile_id == 9:
            info.name = b"MIG 3g.72gb"
        return info


class _Failing(SimNvml):
    def nvmlDeviceGetGpuInstanceProfileInfoByIdV(self, handle: Any, profile_id: int) -> Any:
        if profile_id == 9:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return super().nvmlDeviceGetGpuInstanceProfileInfoByIdV(handle, profile_id)


class _Empty(SimNvml):
    def nvmlDeviceGetGpuInstanceProfileInfoByIdV(self, handle: Any, profile_id: int) -> Any:
        info = super().nvmlDeviceGetGpuInstanceProfileInfoByIdV(handle, profile_id)
        info.name = b""
        return info


def test_nvmls_name_wins_over_the_mig_device_name() -> None:
    assert _gpu0_profiles(_Renamed("h200-mig"))[0] == (2, "3g.72gb")


@pytest.mark.parametrize("lib", [_Failing("h200-mig"), _Empty("h200-mig")],
                         ids=["nvml-fails", "nvml-answers-empty"])
def test_a_failing_or_empty_answer_falls_back_to_the_mig_device_name(lib: SimNvml) -> None:
    assert _gpu0_profiles(lib) == CAPTURED


def test_a_library_without_the_calls_names_no_profile() -> None:
    assert nvml_profile_name(object(), None, 2) is None


def test_the_label_follows_through_a_poll_and_is_asked_once_per_enumeration() -> None:
    clock = FakeClock(start=1_000_000.0)
    lib = _Renamed("h200-mig", clock=clock)
    collectors = parse_collectors("DCGM_FI_DEV_FB_USED, gauge, FB used.\n", "fb.csv")
    backend = NvmlBackend(lib, collectors.specs, clock=clock, wall_clock=clock)
    backend.start()
    try:
        readings = backend.poll()
        asked = lib.calls["nvmlDeviceGetGpuInstanceProfileInfoByIdV"]
        for _ in range(3):
            clock.advance(1.0)
            readings = backend.poll()
        assert lib.calls["nvmlDeviceGetGpuInstanceProfileInfoByIdV"] == asked
        snapshot = Snapshot(backend.inventory, readings, collectors, HostLabel(None, ""))
        (family,) = device_families(snapshot)
        profiles = {dict(s.labels).get("GPU_I_PROFILE") for s in family.samples}
        assert "3g.72gb" in profiles
        assert "3g.71gb" not in profiles
    finally:
        backend.close()

"""Enumerating the simulated profiles through pynvml's calls, checked against real captures."""

from __future__ import annotations

import inspect
import re
from dataclasses import dataclass, field

import pynvml
import pytest

from exporter.devices.nvml_api import NvmlLib
from exporter.simulated.node import PROFILES, SimNvml, profile_names
from tests.simulated.node.conftest import SimFactory, nvml_code
from tests.support.paths import fixture_file

MIB = 1024 * 1024
H200_MIG_CAPTURE = "linux-x86_64__nvidia-h200-mig__590.48.01.txt"
H100_CAPTURE = "linux-x86_64__nvidia-h100-80gb-hbm3__590.48.01.txt"


@dataclass
class Mig:
    slot: int
    uuid: str
    name: str
    gi: int
    ci: int
    total_mib: int
    parent: str


@dataclass
class Gpu:
    uuid: str
    name: str
    bus: str
    mig: list[Mig] = field(default_factory=list)


def _walk(sim: SimNvml) -> list[Gpu]:
    """Every GPU and MIG device the way a consumer walks them (sparse slots included)."""
    found: list[Gpu] = []
    for index in range(sim.nvmlDeviceGetCount()):
        h = sim.nvmlDeviceGetHandleByIndex(index)
        gpu = Gpu(sim.nvmlDeviceGetUUID(h), sim.nvmlDeviceGetName(h),
                  sim.nvmlDeviceGetPciInfo(h).busId)
        try:
            mig_on = sim.nvmlDeviceGetMigMode(h)[0] == pynvml.NVML_DEVICE_MIG_ENABLE
        except pynvml.NVMLError_NotSupported:
            mig_on = False
        if mig_on:
            for slot in range(sim.nvmlDeviceGetMaxMigDeviceCount(h)):
                try:
                    m = sim.nvmlDeviceGetMigDeviceHandleByIndex(h, slot)
                except pynvml.NVMLError_NotFound:
                    continue
                gpu.mig.append(Mig(
                    slot=slot,
                    uuid=sim.nvmlDeviceGetUUID(m),
                    name=sim.nvmlDeviceGetName(m),
                    gi=sim.nvmlDeviceGetGpuInstanceId(m),
                    ci=sim.nvmlDeviceGetComputeInstanceId(m),
                    total_mib=sim.nvmlDeviceGetMemoryInfo(
                        m, version=pynvml.nvmlMemory_v2).total // MIB,
                    parent=sim.nvmlDeviceGetUUID(
                        sim.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(m)),
                ))
        found.append(gpu)
    return found


def test_sim_implements_every_protocol_function_with_its_signature() -> None:
    lib: NvmlLib = SimNvml("l4-1")  # also checked statically by mypy
    wanted = [name for name, member in vars(NvmlLib).items()
              if name.startswith("nvml") and callable(member)]
    assert len(wanted) > 30
    for name in wanted:
        expected = inspect.signature(getattr(NvmlLib, name))
        actual = inspect.signature(getattr(SimNvml, name))
        assert list(actual.parameters) == list(expected.parameters), name
        assert [p.default for p in actual.parameters.values()] == \
            [p.default for p in expected.parameters.values()], name
    assert callable(lib.nvmlInit)


def test_profile_names_and_unknown_profile() -> None:
    assert profile_names() == sorted(["h100-8", "h200-mig", "a100-4", "a100-timesliced",
                                    "l4-1"])
    assert set(PROFILES) == set(profile_names())
    with pytest.raises(ValueError, match="h300-16") as info:
        SimNvml("h300-16")
    message = str(info.value)
    assert "h300-16" in message
    for name in profile_names():
        assert name in message


@pytest.mark.parametrize(
    ("profile", "count", "name"),
    [
        ("h100-8", 8, "NVIDIA H100 80GB HBM3"),
        ("h200-mig", 8, "NVIDIA H200"),
        ("a100-timesliced", 4, "NVIDIA A100-SXM4-80GB"),
        ("l4-1", 1, "NVIDIA L4"),
    ],
)
def test_each_profile_enumerates(make_sim: SimFactory, profile: str, count: int,
                                 name: str) -> None:
    sim, _ = make_sim(profile)
    gpus = _walk(sim)
    assert len(gpus) == count
    assert {g.name for g in gpus} == {name}
    uuids = [g.uuid for g in gpus]
    assert all(re.fullmatch(r"GPU-[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}", u) for u in uuids)
    assert len(set(uuids)) == count
    buses = [g.bus for g in gpus]
    assert all(re.fullmatch(r"[0-9A-F]{8}:[0-9A-F]{2}:[0-9A-F]{2}\.0", b) for b in buses)
    assert buses == sorted(buses), "NVML orders GPUs by PCI bus id"
    assert sim.nvmlSystemGetDriverVersion() == "590.48.01"


def test_identity_is_stable_across_instances_and_seeds(make_sim: SimFactory) -> None:
    a, _ = make_sim("h200-mig", seed=1)
    b, _ = make_sim("h200-mig", seed=2)
    assert _walk(a) == _walk(b)


def test_mig_support_per_profile(make_sim: SimFactory) -> None:
    h100, _ = make_sim("h100-8")
    assert h100.nvmlDeviceGetMigMode(h100.nvmlDeviceGetHandleByIndex(0)) == [0, 0]
    l4, _ = make_sim("l4-1")
    h = l4.nvmlDeviceGetHandleByIndex(0)
    assert nvml_code(lambda: l4.nvmlDeviceGetMigMode(h)) == pynvml.NVML_ERROR_NOT_SUPPORTED
    h200, _ = make_sim("h200-mig")
    modes = [h200.nvmlDeviceGetMigMode(h200.nvmlDeviceGetHandleByIndex(i)) for i in range(8)]
    assert modes == [[1, 1], [1, 1]] + [[0, 0]] * 6


def test_h200_mig_layout_is_sparse_and_splits_one_gpu_instance(make_sim: SimFactory) -> None:
    sim, _ = make_sim("h200-mig")
    gpu0 = sim.nvmlDeviceGetHandleByIndex(0)
    assert sim.nvmlDeviceGetMaxMigDeviceCount(gpu0) == 7
    gpus = _walk(sim)
    migs = gpus[0].mig
    slots = [m.slot for m in migs]
    # Sparse: an empty slot answers NOT_FOUND between used ones.
    assert len(slots) == 5
    gaps = sorted(set(range(max(slots) + 1)) - set(slots))
    assert gaps
    assert nvml_code(lambda: sim.nvmlDeviceGetMigDeviceHandleByIndex(gpu0, gaps[0])) == \
        pynvml.NVML_ERROR_NOT_FOUND
    by_ids = {(m.gi, m.ci): m for m in migs}
    assert set(by_ids) == {(2, 0), (2, 1), (3, 0), (9, 0), (10, 0)}
    assert by_ids[(2, 0)].name == "NVIDIA H200 MIG 1c.3g.71gb"
    assert by_ids[(2, 1)].name == "NVIDIA H200 MIG 2c.3g.71gb"
    assert by_ids[(3, 0)].name == "NVIDIA H200 MIG 2g.35gb"
    assert by_ids[(2, 0)].uuid != by_ids[(2, 1)].uuid
    assert all(m.uuid.startswith("MIG-") for m in migs)
    assert all(m.parent == gpus[0].uuid for m in migs)
    # GPU 1: seven 1g.18gb instances; GPUs 2-7 whole.
    assert [m.name for m in gpus[1].mig] == ["NVIDIA H200 MIG 1g.18gb"] * 7
    assert all(g.mig == [] for g in gpus[2:])
    all_uuids = [g.uuid for g in gpus] + [m.uuid for g in gpus for m in g.mig]
    assert len(all_uuids) == len(set(all_uuids)) == 8 + 5 + 7


def test_compute_instances_share_their_gpu_instance_framebuffer(make_sim: SimFactory) -> None:
    sim, clock = make_sim("h200-mig")
    gpu0 = sim.nvmlDeviceGetHandleByIndex(0)
    ci0 = sim.nvmlDeviceGetMigDeviceHandleByIndex(gpu0, 0)
    ci1 = sim.nvmlDeviceGetMigDeviceHandleByIndex(gpu0, 1)
    for _ in range(5):
        clock.advance(37.0)
        a = sim.nvmlDeviceGetMemoryInfo(ci0, version=pynvml.nvmlMemory_v2)
        b = sim.nvmlDeviceGetMemoryInfo(ci1, version=pynvml.nvmlMemory_v2)
        assert (a.total, a.used, a.free, a.reserved) == (b.total, b.used, b.free, b.reserved)
        assert a.total == 71424 * MIB
        assert a.used + a.free + a.reserved == a.total
        whole = sim.nvmlDeviceGetMemoryInfo(gpu0, version=pynvml.nvmlMemory_v2)
        assert whole.total == 143771 * MIB
        assert whole.used >= a.used


def test_handles_are_pynvml_pointers_and_mig_handles_are_distinct(make_sim: SimFactory) -> None:
    sim, _ = make_sim("h200-mig")
    gpu0 = sim.nvmlDeviceGetHandleByIndex(0)
    assert isinstance(gpu0, pynvml.c_nvmlDevice_t)
    mig = sim.nvmlDeviceGetMigDeviceHandleByIndex(gpu0, 0)
    assert sim.nvmlDeviceGetUUID(mig) != sim.nvmlDeviceGetUUID(gpu0)
    assert nvml_code(lambda: sim.nvmlDeviceGetGpuInstanceId(gpu0)) == \
        pynvml.NVML_ERROR_INVALID_ARGUMENT
    assert nvml_code(lambda: sim.nvmlDeviceGetUUID(object())) == \
        pynvml.NVML_ERROR_INVALID_ARGUMENT
    assert nvml_code(lambda: sim.nvmlDeviceGetHandleByIndex(8)) == \
        pynvml.NVML_ERROR_INVALID_ARGUMENT


def test_h200_mig_gpu_matches_the_capture(make_sim: SimFactory) -> None:
    text = fixture_file("nvidia-smi", H200_MIG_CAPTURE).read_text()
    idle_q = text.split("# idle :: query (-q)", 1)[1].split("# idle :: query-gpu", 1)[0]
    captured = set()
    for block in idle_q.split("    MIG Device\n")[1:]:
        gi = int(re.search(r"GPU Instance ID\s+: (\d+)", block).group(1))  # type: ignore[union-attr]
        ci = int(re.search(r"Compute Instance ID\s+: (\d+)", block).group(1))  # type: ignore[union-attr]
        total = int(re.search(r"Shared FB Memory Usage\s+Total\s+: (\d+) MiB", block).group(1))  # type: ignore[union-attr]
        captured.add((gi, ci, total))
    listing = text.split("# $ nvidia-smi -L\n", 1)[1].split("# capabilities ::", 1)[0]
    captured_names = sorted(re.findall(r"MIG (\S+)\s+Device", listing))
    product = re.search(r"Product Name\s+: (.+)", idle_q).group(1).strip()  # type: ignore[union-attr]
    fb_total = int(re.search(r"^    FB Memory Usage\s+Total\s+: (\d+) MiB", idle_q,
                                re.M).group(1))  # type: ignore[union-attr]
    bus = re.search(r"^GPU (\S+)$", idle_q, re.M).group(1)  # type: ignore[union-attr]

    sim, _ = make_sim("h200-mig")
    gpu = _walk(sim)[0]
    assert {(m.gi, m.ci, m.total_mib) for m in gpu.mig} == captured
    assert sorted(m.name.rsplit(" ", 1)[1] for m in gpu.mig) == captured_names
    assert gpu.name == product
    assert gpu.bus == bus
    h = sim.nvmlDeviceGetHandleByIndex(0)
    assert sim.nvmlDeviceGetMemoryInfo(h, version=pynvml.nvmlMemory_v2).total == fb_total * MIB


def test_h100_matches_the_capture(make_sim: SimFactory) -> None:
    text = fixture_file("nvidia-smi", H100_CAPTURE).read_text()
    idle_q = text.split("# idle :: query (-q)", 1)[1].split("# idle :: query-gpu", 1)[0]
    product = re.search(r"Product Name\s+: (.+)", idle_q).group(1).strip()  # type: ignore[union-attr]
    fb = re.search(r"FB Memory Usage\s+Total\s+: (\d+) MiB\s+Reserved\s+: (\d+) MiB", idle_q)
    assert fb is not None
    limit = re.search(r"Current Power Limit\s+: ([\d.]+) W", idle_q).group(1)  # type: ignore[union-attr]
    bus = re.search(r"^GPU (\S+)$", idle_q, re.M).group(1)  # type: ignore[union-attr]

    sim, _ = make_sim("h100-8")
    assert sim.nvmlDeviceGetPciInfo(sim.nvmlDeviceGetHandleByIndex(0)).busId == bus
    h = sim.nvmlDeviceGetHandleByIndex(3)
    mem = sim.nvmlDeviceGetMemoryInfo(h, version=pynvml.nvmlMemory_v2)
    assert sim.nvmlDeviceGetName(h) == product
    assert (mem.total // MIB, mem.reserved // MIB) == (int(fb.group(1)), int(fb.group(2)))
    assert sim.nvmlDeviceGetPowerManagementLimit(h) == round(float(limit) * 1000)


def test_layout_lists_devices_without_nvml_calls() -> None:
    sim = SimNvml("h200-mig")
    layout = sim.layout
    assert not sim.calls
    assert [g.index for g in layout] == list(range(8))
    assert [m.profile for m in layout[0].mig_devices] == [
        "3g.71gb", "3g.71gb", "2g.35gb", "1g.18gb", "1g.18gb"]
    sim.nvmlInit()
    h = sim.nvmlDeviceGetHandleByIndex(0)
    assert sim.nvmlDeviceGetUUID(h) == layout[0].uuid
    slot = layout[0].mig_devices[1].slot
    assert sim.nvmlDeviceGetUUID(sim.nvmlDeviceGetMigDeviceHandleByIndex(h, slot)) == \
        layout[0].mig_devices[1].uuid
    sim.nvmlShutdown()

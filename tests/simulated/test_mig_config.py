"""`--sim.mig-config`: the simulated node starts with a mig-parted config applied, answers for
the new instances through pynvml's calls, and the simulated kubelet hands them to pods."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pynvml
import pytest
import yaml

from exporter.config import parse_serve_args
from exporter.devices.enumerate import enumerate_devices
from exporter.devices.filter import ALL_DEVICES
from exporter.partitions.mig_profiles import MODELS, Placement, layout_problems, placeable_layouts
from exporter.partitions.migparted import MigPartedError
from exporter.simulated.kubelet import allocatable_for, plan_allocations
from exporter.simulated.node import SimNvml
from exporter.simulated.node.mig_config import split_mig_config_arg
from exporter.simulated.node.profiles import H200_CAPTURE_LAYOUT
from tests.support.mig_configs import OPERATOR_SHAPED_CONFIG
from tests.support.paths import ROOT

MIB = 1024 * 1024
H200 = MODELS["NVIDIA H200"]

# GPU 0 as the capture has it; GPU 1 as seven 1g; GPU 2 one whole 7g; the rest MIG off.
CAPTURE_LIKE = """\
version: v1
mig-configs:
  pool:
    - devices: all
      mig-enabled: false
    - devices: [0]
      mig-enabled: true
      mig-devices: {"1c.3g.71gb": 1, "2c.3g.71gb": 1, "2g.35gb": 1, "1g.18gb": 2}
    - devices: [1]
      mig-enabled: true
      mig-devices: {"1g.18gb": 7}
    - device-filter: ["0x233510DE"]
      devices: [2]
      mig-enabled: true
      mig-devices: {"7g.141gb": 1}
"""


def _walk(sim: SimNvml) -> dict[int, list[tuple[int, int, str, int, int, str]]]:
    """GPU index -> (GI id, CI id, name, memory MiB, SMs, UUID) per MIG device, by pynvml's
    calls; GPUs with MIG off are absent."""
    sim.nvmlInit()
    out: dict[int, list[tuple[int, int, str, int, int, str]]] = {}
    try:
        for index in range(sim.nvmlDeviceGetCount()):
            gpu = sim.nvmlDeviceGetHandleByIndex(index)
            if sim.nvmlDeviceGetMigMode(gpu)[0] != pynvml.NVML_DEVICE_MIG_ENABLE:
                continue
            rows = out.setdefault(index, [])
            for slot in range(sim.nvmlDeviceGetMaxMigDeviceCount(gpu)):
                try:
                    mig = sim.nvmlDeviceGetMigDeviceHandleByIndex(gpu, slot)
                except pynvml.NVMLError_NotFound:
                    continue
                attrs = sim.nvmlDeviceGetAttributes_v2(mig)
                rows.append((
                    sim.nvmlDeviceGetGpuInstanceId(mig), sim.nvmlDeviceGetComputeInstanceId(mig),
                    sim.nvmlDeviceGetName(mig),
                    sim.nvmlDeviceGetMemoryInfo(mig, version=pynvml.nvmlMemory_v2).total // MIB,
                    attrs.multiprocessorCount, sim.nvmlDeviceGetUUID(mig)))
    finally:
        sim.nvmlShutdown()
    return out


@pytest.fixture
def pool(tmp_path: Path) -> Path:
    path = tmp_path / "pool.yaml"
    path.write_text(CAPTURE_LIKE)
    return path


def _ci_slices(name: str, profile_slices: int) -> int:
    """Compute slices from NVML's MIG device name: `1c.3g.71gb` names them, `3g.71gb` is
    the whole instance."""
    last = name.rsplit(" ", 1)[-1]
    return int(last.split("c.", 1)[0]) if "c." in last else profile_slices


def test_the_config_is_applied_as_nvml_answers_it(pool: Path) -> None:
    sim = SimNvml("h200-mig", mig_config=str(pool))
    walked = _walk(sim)
    assert set(walked) == {0, 1, 2}
    profile_of = {m.uuid: m.profile for g in sim.layout for m in g.mig_devices}
    # GPU 0 comes out as the capture's layout: the same GPU instances, ids, memory and
    # compute instances.
    captured = sorted((gi.gi_id, gi.profile, gi.memory_mib,
                       tuple(sorted(ci.slices for ci in gi.compute_instances)))
                      for gi in H200_CAPTURE_LAYOUT)
    mine: dict[tuple[int, str, int], list[int]] = {}
    for gi, _, name, memory, _, uuid in walked[0]:
        profile = H200.profile(profile_of[uuid])
        mine.setdefault((gi, profile.name, memory), []).append(
            _ci_slices(name, profile.compute_slices))
    assert sorted((*key, tuple(sorted(cis))) for key, cis in mine.items()) == captured
    # Every instance: memory and SMs as the profile table has them, the name NVML gives.
    for _, _, name, memory, sms, uuid in walked[0] + walked[1] + walked[2]:
        profile = H200.profile(profile_of[uuid])
        slices = _ci_slices(name, profile.compute_slices)
        assert memory == profile.memory_mib
        assert sms == (profile.multiprocessors if slices == profile.compute_slices
                       else 16 * slices)
        assert name.endswith(profile.name)
    assert [row[0] for row in walked[1]] == [7, 8, 9, 10, 11, 12, 13]
    assert [(row[0], row[2], row[3], row[4]) for row in walked[2]] == [
        (0, "NVIDIA H200 MIG 7g.141gb", 143360, 132)]
    uuids = [row[5] for rows in walked.values() for row in rows]
    assert len(set(uuids)) == len(uuids) == 13
    assert all(u.startswith("MIG-") for u in uuids)


def test_gpus_keep_their_uuids_and_unselected_gpus_their_layout(tmp_path: Path) -> None:
    path = tmp_path / "one.yaml"
    path.write_text("version: v1\nmig-configs:\n  one:\n    - devices: [3]\n"
                    "      mig-enabled: true\n      mig-devices: {\"3g.71gb\": 2}\n")
    plain, applied = SimNvml("h200-mig"), SimNvml("h200-mig", mig_config=str(path))
    assert [g.uuid for g in plain.layout] == [g.uuid for g in applied.layout]
    # GPU 0 and 1 keep the profile's layout; GPU 3 gains two 3g instances.
    assert plain.layout[0] == applied.layout[0]
    assert plain.layout[1] == applied.layout[1]
    assert not plain.layout[3].mig_devices
    assert [m.profile for m in applied.layout[3].mig_devices] == ["3g.71gb", "3g.71gb"]


def test_an_operator_shaped_balanced_config_applies_its_h200_entry(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(OPERATOR_SHAPED_CONFIG)
    sim = SimNvml("h200-mig", mig_config=f"{path}:all-balanced")
    for gpu in sim.layout:
        assert sorted(m.profile for m in gpu.mig_devices) == [
            "1g.18gb", "1g.18gb", "2g.35gb", "3g.71gb"]
    # A config behind another model's device filter selects no GPU here: the layout stays.
    assert SimNvml("h200-mig", mig_config=f"{path}:all-1g.23gb").layout == \
        SimNvml("h200-mig").layout
    # A config for another model's profiles does not fit this node: refused in one line.
    with pytest.raises(MigPartedError, match=r"mig-configs\.all-1g\.5gb\[0\] on GPU 0: "
                       r"'1g\.5gb' is not a MIG profile of NVIDIA H200; expected one of"):
        SimNvml("h200-mig", mig_config=f"{path}:all-1g.5gb")
    with pytest.raises(MigPartedError, match="holds 25 mig-configs; name one of: "):
        SimNvml("h200-mig", mig_config=str(path))
    # all-enabled: MIG mode on everywhere, no instance yet.
    enabled = SimNvml("h200-mig", mig_config=f"{path}:all-enabled")
    assert set(_walk(enabled)) == set(range(8))
    assert not any(g.mig_devices for g in enabled.layout)


def test_the_simulated_kubelet_hands_each_instance_to_a_pod(pool: Path) -> None:
    sim = SimNvml("h200-mig", mig_config=str(pool))
    sim.nvmlInit()
    try:
        inventory = enumerate_devices(sim, ALL_DEVICES).inventory
    finally:
        sim.nvmlShutdown()
    pods = plan_allocations(inventory)
    held = {(d.resource_name, i) for p in pods for c in p.containers for d in c.devices
            for i in d.device_ids}
    expected = {(f"nvidia.com/mig-{m.profile}", m.uuid)
                for g in sim.layout for m in g.mig_devices}
    assert expected <= held
    assert {r for r, _ in expected} == {"nvidia.com/mig-3g.71gb", "nvidia.com/mig-2g.35gb",
                                        "nvidia.com/mig-1g.18gb", "nvidia.com/mig-7g.141gb"}
    advertised = {d.resource_name: set(d.device_ids) for d in allocatable_for(inventory)}
    assert advertised["nvidia.com/mig-1g.18gb"] == {
        m.uuid for g in sim.layout for m in g.mig_devices if m.profile == "1g.18gb"}


def test_the_flag_and_its_variable(pool: Path) -> None:
    assert parse_serve_args(["--sim.mig-config", f"{pool}:pool"]).sim.mig_config == \
        f"{pool}:pool"
    env = {"GPU_EXPORTER_SIM_MIG_CONFIG": str(pool)}
    assert parse_serve_args([], env=env).sim.mig_config == str(pool)
    assert parse_serve_args([], env={}).sim.mig_config is None
    assert split_mig_config_arg(str(pool)) == (pool, None)
    assert split_mig_config_arg(f"{pool}:pool") == (pool, "pool")


def test_serve_refuses_a_bad_config_in_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(CAPTURE_LIKE.replace('"1g.18gb": 7', '"1g.18gb": 8'))
    result = subprocess.run(
        [sys.executable, "-m", "exporter", "serve", "--backend", "sim", "-a", "127.0.0.1:0",
         "--sim.mig-config", str(bad)],
        cwd=ROOT, capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 2, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"gpu-exporter: --sim.mig-config: {bad}: mig-configs.pool[2] "
                               "on GPU 1: 8x 1g.18gb cannot be placed together on NVIDIA H200")


_FIRST_ID = {8: 0, 4: 1, 2: 3, 1: 7}


@pytest.mark.parametrize(("profile", "model_name"), [
    ("h200-mig", "NVIDIA H200"), ("h100-8", "NVIDIA H100 80GB HBM3"),
    ("a100-timesliced", "NVIDIA A100-SXM4-80GB")])
def test_every_placeable_layout_applies(tmp_path: Path, profile: str, model_name: str) -> None:
    """Every layout the profile table can place comes out on the node as asked: the same
    instances, memory as the table has it, and GPU-instance ids that name placements which
    do not overlap."""
    model = MODELS[model_name]
    layouts = placeable_layouts(model)
    assert len(layouts) > 100
    for n, names in enumerate(layouts):
        path = tmp_path / f"layout-{n}.yaml"
        path.write_text(yaml.safe_dump({"version": "v1", "mig-configs": {"one": [
            {"devices": [1], "mig-enabled": True,
             "mig-devices": {p: names.count(p) for p in set(names)}}]}}))
        gpu = SimNvml(profile, mig_config=str(path)).layout[1]
        assert sorted(m.profile for m in gpu.mig_devices) == sorted(names)
        placements = []
        for mig in gpu.mig_devices:
            table = model.profile(mig.profile)
            size = table.memory_slices
            start = (mig.gpu_instance_id - _FIRST_ID[size]) * size
            placements.append(Placement(start, table))
        assert layout_problems(model, placements) == (), (names, placements)

"""The MIG profile table: its figures against real `nvidia-smi` captures, and the layout rules
(placements, memory overlap, compute slices, one `+me`) on hand-worked layouts."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from exporter.partitions.mig_profiles import (
    MODELS,
    Placement,
    find_model,
    is_valid_layout,
    layout_problems,
    place,
    placeable_layouts,
)

CAPTURES = Path(__file__).resolve().parents[1] / "fixtures" / "nvidia-smi"
# A MIG device row of the default table: GPU GI CI Dev | used / total | SM ...
ROW = re.compile(r"^\|\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s+\|\s+\d+MiB /\s*(\d+)MiB\s+\|\s+(\d+)\s")
LISTED = re.compile(r"^\s+MIG (?:(\d+)c\.)?(\S+)\s+Device\s+(\d+):")


def _capture_devices(name: str) -> list[tuple[str, int | None, int, int]]:
    """(profile, compute slices of the CI or None when whole, memory MiB, SMs) per MIG
    device of the capture's first default table."""
    lines = (CAPTURES / name).read_text(encoding="utf-8").splitlines()
    listed: dict[int, tuple[str, int | None]] = {}
    for line in lines:
        match = LISTED.match(line)
        if match:
            listed[int(match[3])] = (match[2], int(match[1]) if match[1] else None)
    rows: dict[int, tuple[int, int]] = {}
    for line in lines:
        match = ROW.match(line)
        if match and int(match[4]) not in rows:
            rows[int(match[4])] = (int(match[5]), int(match[6]))
    assert listed
    assert rows.keys() == listed.keys()
    return [(*listed[d], *rows[d]) for d in sorted(rows)]


@pytest.mark.parametrize(("capture", "model_name"), [
    ("linux-x86_64__nvidia-h100-mig__590.48.01.txt", "NVIDIA H100 80GB HBM3"),
    ("linux-x86_64__nvidia-h200-mig__590.48.01.txt", "NVIDIA H200"),
])
def test_memory_and_sms_match_the_capture(capture: str, model_name: str) -> None:
    model = find_model(model_name)
    assert model is not None
    devices = _capture_devices(capture)
    for profile_name, ci_slices, memory_mib, sms in devices:
        profile = model.profile(profile_name)
        assert profile.memory_mib == memory_mib, profile_name
        if ci_slices is None:  # a split GPU instance shows its compute instance's SMs
            assert profile.multiprocessors == sms, profile_name
    assert len({d[0] for d in devices}) >= 3


@pytest.mark.parametrize(("capture", "model_name"), [
    ("linux-x86_64__nvidia-h100-80gb-hbm3__590.48.01.txt", "NVIDIA H100 80GB HBM3"),
    ("linux-x86_64__nvidia-h200__590.48.01.txt", "NVIDIA H200"),
    ("linux-x86_64__nvidia-l40s__595.80.txt", "NVIDIA L40S"),
])
def test_whole_gpu_memory_matches_the_capture(capture: str, model_name: str) -> None:
    text = (CAPTURES / capture).read_text(encoding="utf-8")
    totals = {int(t) for t in re.findall(r"\d+MiB /\s*(\d+)MiB \|", text)}
    model = find_model(model_name)
    assert model is not None
    assert totals == {model.memory_mib}


def test_names_are_unique_and_the_simulated_boards_are_known() -> None:
    assert find_model(" NVIDIA A100-SXM4-80GB ") is MODELS["NVIDIA A100-SXM4-80GB"]
    assert find_model("NVIDIA L4") is not None
    assert not MODELS["NVIDIA L4"].mig_capable
    assert find_model("NVIDIA B200") is None
    for model in set(MODELS.values()):
        names = [p.name for p in model.profiles]
        assert len(names) == len(set(names))
        for profile in model.profiles:
            assert profile.memory_mib < model.memory_mib
            assert all(s + profile.memory_slices <= model.memory_slices for s in profile.starts)


def test_resource_names_follow_the_mixed_strategy() -> None:
    h100 = MODELS["NVIDIA H100 80GB HBM3"]
    assert h100.profile("3g.40gb").resource_name == "nvidia.com/mig-3g.40gb"
    assert h100.profile("1g.10gb+me").resource_name == "nvidia.com/mig-1g.10gb.me"


H100 = MODELS["NVIDIA H100 80GB HBM3"]


def _layout(*spec: tuple[str, int]) -> list[Placement]:
    return [Placement(start, H100.profile(name)) for name, start in spec]


def test_valid_layouts() -> None:
    # The operator's all-balanced on H100: 2x1g + 2g + 3g.
    assert is_valid_layout(H100, _layout(("3g.40gb", 4), ("2g.20gb", 2), ("1g.10gb", 0),
                                         ("1g.10gb", 1)))
    assert is_valid_layout(H100, _layout(*[("1g.10gb", s) for s in range(7)]))
    assert is_valid_layout(H100, _layout(("4g.40gb", 0), ("3g.40gb", 4)))
    assert is_valid_layout(H100, _layout(("7g.80gb", 0)))
    assert is_valid_layout(H100, [])


def test_invalid_layouts_say_why() -> None:
    assert layout_problems(H100, _layout(("3g.40gb", 2))) == (
        "3g.40gb cannot start at memory slice 2 (allowed: 0, 4)",)
    assert "overlap in memory" in layout_problems(
        H100, _layout(("2g.20gb", 0), ("1g.10gb", 1)))[0]
    # 4g + 2g + 1g.20gb: memory fits (0-3, 4-5, 6-7) but 4 + 2 + 1 = 7 is fine; add a 1g:
    assert layout_problems(H100, _layout(("4g.40gb", 0), ("2g.20gb", 4), ("1g.10gb", 6),
                                         ("1g.10gb", 7))) != ()
    assert "more than one +me instance" in layout_problems(
        H100, _layout(("1g.10gb+me", 0), ("1g.10gb+me", 1)))
    assert "8 compute slices taken, 7 exist" in layout_problems(
        H100, _layout(("7g.80gb", 0), ("1g.10gb", 0)))
    h200 = MODELS["NVIDIA H200"]
    assert layout_problems(H100, [Placement(0, h200.profile("1g.18gb"))]) == (
        "1g.18gb is not a MIG profile of NVIDIA H100 80GB HBM3",)


def test_place_finds_placements_or_none() -> None:
    placed = place(H100, ["1g.10gb", "3g.40gb", "2g.20gb", "1g.10gb"])
    assert placed is not None
    assert is_valid_layout(H100, placed)
    assert [p.profile.name for p in placed] == ["3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"]
    assert place(H100, ["3g.40gb", "3g.40gb", "1g.10gb"]) is None  # memory is full
    assert place(H100, ["1g.20gb"] * 4) is not None
    assert place(H100, ["1g.20gb"] * 4 + ["1g.10gb"]) is None
    assert place(H100, ["2g.20gb"] * 3 + ["1g.10gb"]) is not None  # 0-1, 2-3, 4-5, 6
    with pytest.raises(KeyError, match=r"has no MIG profile .1g\.18gb."):
        place(H100, ["1g.18gb"])


def test_placeable_layouts_are_every_valid_multiset() -> None:
    layouts = placeable_layouts(H100)
    assert ("7g.80gb",) in layouts
    assert ("1g.10gb",) * 7 in layouts
    assert ("1g.10gb",) * 8 not in layouts
    assert all(place(H100, names) is not None for names in layouts)
    assert len(layouts) == len(set(layouts))
    # Maximal ones by hand: nothing can be added to 3g + 3g.
    assert not any(len(n) == 3 and n.count("3g.40gb") == 2 for n in layouts)

"""Laying mig-parted configs out on the profile table: a config in the shape of the GPU
Operator's default one, written here, fits every known model it names, and profiles not of
the model or sets that cannot be placed are refused in one line."""

from __future__ import annotations

import pytest

from exporter.partitions.mig_profiles import MODELS
from exporter.partitions.migparted import MigPartedError, parse
from exporter.partitions.migparted_layout import (
    PCI_DEVICE_IDS,
    NodeGpu,
    check_layouts,
    entry_layout,
    node_layout,
)
from tests.support.mig_configs import OPERATOR_SHAPED_CONFIG, PARTITIONING_EXAMPLE

H200 = MODELS["NVIDIA H200"]
H100 = MODELS["NVIDIA H100 80GB HBM3"]
L4 = MODELS["NVIDIA L4"]


def test_an_operator_shaped_config_lays_out_on_every_known_model_it_names() -> None:
    checks = check_layouts(parse(OPERATOR_SHAPED_CONFIG, "default-mig-parted-config"))
    placed = {(c.config, c.index): c.placed_on for c in checks}
    balanced = {m for (name, _), models in placed.items() if name == "all-balanced"
                for m in models}
    assert balanced == {"h200", "h100-80gb", "a100-80gb"}
    assert placed[("all-balanced", 2)] == ("h200",)
    assert placed[("all-1g.5gb", 0)] == ("a100-40gb",)
    assert placed[("all-7g.141gb", 0)] == ("h200",)
    # 1g.10gb is a double-memory profile on the A100 40GB (4 fit) and the smallest on the
    # A100 80GB and H100 (7 fit): each count sits behind its model's filter.
    assert set(placed[("all-1g.10gb", 1)]) == {"h100-80gb", "a100-80gb"}
    assert set(placed[("all-1g.10gb.me", 0)]) == {"h100-80gb", "a100-80gb"}
    # Every known model is checked somewhere; entries for models the table lacks (A100 40GB
    # by PCI id, B200) are left unchecked, never guessed.
    assert {m for models in placed.values() for m in models} == {
        "a100-40gb", "a100-80gb", "h100-80gb", "h200"}
    unchecked = sorted(k for k, models in placed.items() if not models)
    assert unchecked == [("all-1g.10gb", 0), ("all-1g.23gb", 0), ("all-3g.90gb", 0),
                         ("all-balanced", 0), ("all-balanced", 3)]
    assert len(placed) - len(unchecked) == 23


def test_the_h200_count_of_the_balanced_config_is_checked() -> None:
    # One more 3g.71gb on the H200 entry no longer fits: the check reaches that entry.
    text = OPERATOR_SHAPED_CONFIG.replace('"3g.71gb": 1', '"3g.71gb": 2', 1)
    assert text != OPERATOR_SHAPED_CONFIG
    with pytest.raises(MigPartedError, match=r"mig-configs\.all-balanced\[2\] on NVIDIA H200: "
                       r"2x 1g\.18gb, 1x 2g\.35gb, 2x 3g\.71gb cannot be placed"):
        check_layouts(parse(text, "default-mig-parted-config"))


def test_the_format_example_lays_out() -> None:
    checks = check_layouts(parse(PARTITIONING_EXAMPLE, "config.yaml"))
    placed = {(c.config, c.index): c.placed_on for c in checks}
    assert placed == {("all-balanced", 0): ("a100-40gb",), ("custom-config", 1): ("a100-40gb",)}


def _config(devices: str, filter_line: str = "") -> str:
    return ("version: v1\nmig-configs:\n  pool:\n    - " + filter_line
            + "devices: all\n      mig-enabled: true\n      mig-devices: " + devices + "\n")


H200_FILTER = 'device-filter: "0x233510DE"\n      '


@pytest.mark.parametrize(("devices", "says"), [
    ('{"1g.5gb": 7}', "'1g.5gb' is not a MIG profile of NVIDIA H200; expected one of: "
     "1g.18gb, 1g.18gb+me"),
    ('{"3g.71gb": 2, "1g.18gb": 1}', "2x 3g.71gb, 1x 1g.18gb cannot be placed together on "
     "NVIDIA H200; expected a set of GPU instances that fits 8 memory"),
    ('{"1g.35gb": 4, "1g.18gb": 1}', "4x 1g.35gb, 1x 1g.18gb cannot be placed together"),
    ('{"1g.18gb+me": 2}', "2x 1g.18gb+me cannot be placed"),
    ('{"4c.3g.71gb": 1}', "'4c.3g.71gb' asks 4 compute slices of a 3g.71gb instance; "
     "expected 1 to 3"),
])
def test_refusals_on_the_model_a_filter_names(devices: str, says: str) -> None:
    config = parse(_config(devices, H200_FILTER), "pool.yaml")
    with pytest.raises(MigPartedError) as caught:
        check_layouts(config)
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith("pool.yaml: mig-configs.pool[0] on NVIDIA H200: ")
    assert says in message


def test_a_filter_is_checked_whatever_devices_it_names() -> None:
    text = _config('{"1g.5gb": 1}', H200_FILTER).replace("devices: all", "devices: [3]")
    with pytest.raises(MigPartedError, match="is not a MIG profile of NVIDIA H200"):
        check_layouts(parse(text, "p"))


def test_compute_instances_share_a_gpu_instance_while_it_has_room() -> None:
    layout = entry_layout(H200, {"1c.3g.71gb": 3, "2c.3g.71gb": 1}, "x")
    # Largest first, each into the last instance while it has slices left: (2, 1), (1, 1).
    assert [(g.profile.name, g.placement.start, g.compute_instances) for g in layout] == [
        ("3g.71gb", 0, (2, 1)), ("3g.71gb", 4, (1, 1))]
    # Two 3g instances fill memory: a 1g instance cannot be placed beside them.
    with pytest.raises(MigPartedError, match=r"2x 3g\.71gb, 1x 1g\.18gb cannot be placed"):
        check_layouts(parse(_config('{"1c.3g.71gb": 3, "2c.3g.71gb": 1, "1g.18gb": 1}',
                                    H200_FILTER), "p"))


def _h200_node(count: int = 4) -> list[NodeGpu]:
    return [NodeGpu(i, H200, PCI_DEVICE_IDS["NVIDIA H200"]) for i in range(count)]


def test_node_layout_applies_entries_in_order() -> None:
    text = """\
version: v1
mig-configs:
  half:
    - devices: all
      mig-enabled: false
    - devices: [1, 2]
      mig-enabled: true
      mig-devices: {"3g.71gb": 1, "2g.35gb": 1, "1g.18gb": 2}
    - device-filter: "0x233010DE"
      devices: all
      mig-enabled: true
      mig-devices: {"7g.80gb": 1}
"""
    name, layout = node_layout(parse(text, "half.yaml"), None, _h200_node())
    assert name == "half"
    assert layout[0] is None
    assert layout[3] is None
    # With the 3g at slice 0 the two 1g would need slices 6 and 7, and no 1g starts at 7.
    expected = [("3g.71gb", 4), ("2g.35gb", 0), ("1g.18gb", 2), ("1g.18gb", 3)]
    for gpu in (1, 2):
        assert [(g.profile.name, g.placement.start) for g in layout[gpu] or ()] == expected


def test_node_layout_refuses_what_apply_would() -> None:
    mixed = [*_h200_node(1), NodeGpu(1, L4, 0x27B810DE)]
    by_index = parse(_config('{"1g.18gb": 7}').replace("devices: all", "devices: [1]"), "p")
    with pytest.raises(MigPartedError, match=r"GPU 1 \(NVIDIA L4\) has no MIG"):
        node_layout(by_index, None, mixed)
    # Under `devices: all` a GPU without MIG is skipped, as apply skips it.
    _, layout = node_layout(parse(_config('{"1g.18gb": 7}'), "p"), None, mixed)
    assert list(layout) == [0]
    with pytest.raises(MigPartedError, match=r"p: mig-configs.pool\[0\] on GPU 0: '1g.5gb' "
                       "is not a MIG profile of NVIDIA H200"):
        node_layout(parse(_config('{"1g.5gb": 1}'), "p"), "pool", _h200_node(1))
    with pytest.raises(MigPartedError, match="no mig-config 'other'; expected one of: pool"):
        node_layout(parse(_config('{"1g.18gb": 1}'), "p"), "other", _h200_node(1))

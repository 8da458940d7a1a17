from __future__ import annotations

import pytest

from exporter.k8s.device_ids import DeviceId, DeviceIdError, DeviceKind, parse_device_id

UUID = "GPU-5b2e3c3a-7f6e-4d2b-9a1c-0123456789ab"
MIG = "MIG-1f2e3d4c-5b6a-4978-8a9b-abcdefabcdef"


@pytest.mark.parametrize(
    ("raw", "kind", "uuid", "index", "gi", "ci", "replica"),
    [
        (UUID, DeviceKind.GPU_UUID, UUID, None, None, None, None),
        (f"{UUID}::3", DeviceKind.GPU_UUID, UUID, None, None, None, 3),
        (MIG, DeviceKind.MIG_UUID, MIG, None, None, None, None),
        (f"{MIG}::7", DeviceKind.MIG_UUID, MIG, None, None, None, 7),
        (f"MIG-{UUID}/2/0", DeviceKind.MIG_LEGACY, UUID, None, 2, 0, None),
        (f"MIG-{UUID}/13/1::2", DeviceKind.MIG_LEGACY, UUID, None, 13, 1, 2),
        ("nvidia0", DeviceKind.GKE_INDEX, None, 0, None, None, None),
        ("nvidia12", DeviceKind.GKE_INDEX, None, 12, None, None, None),
        ("nvidia3/gi4", DeviceKind.GKE_INDEX, None, 3, 4, None, None),
        ("nvidia1/vgpu5", DeviceKind.GKE_INDEX, None, 1, None, None, 5),
        ("nvidia1/gi2/vgpu0", DeviceKind.GKE_INDEX, None, 1, 2, None, 0),
    ],
)
def test_valid_ids(
    raw: str,
    kind: DeviceKind,
    uuid: str | None,
    index: int | None,
    gi: int | None,
    ci: int | None,
    replica: int | None,
) -> None:
    parsed = parse_device_id(raw)
    assert isinstance(parsed, DeviceId), parsed
    assert (parsed.kind, parsed.uuid, parsed.gpu_index) == (kind, uuid, index)
    assert (parsed.gpu_instance_id, parsed.compute_instance_id, parsed.replica) == (gi, ci, replica)
    assert parsed.raw == raw


@pytest.mark.parametrize(
    "raw",
    [
        "",
        "GPU-",
        "GPU-zz12",
        f"{UUID}::",
        f"{UUID}::x",
        f"{UUID}:3",
        f" {UUID}",
        f"MIG-{UUID}/2",
        f"MIG-{UUID}/a/0",
        "nvidia",
        "nvidia0/gi",
        "nvidia0/vgpu",
        "nvidia-0",
        "gpu0",
        "0",
        "GPU-" + "a" * 400,
        "GPU-ab\ncd",
        "\x00\xff",
    ],
)
def test_malformed_ids_are_values_not_exceptions(raw: str) -> None:
    parsed = parse_device_id(raw)
    assert isinstance(parsed, DeviceIdError)
    assert parsed.reason
    assert parsed.shown.isprintable()
    assert len(parsed.shown) <= 400

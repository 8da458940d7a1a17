"""The kubelet device-id parser: any string gives a value (never an exception), and every id
built from parts in one of the known forms parses back to those parts."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from exporter.k8s.device_ids import (
    MAX_ID_LENGTH,
    DeviceId,
    DeviceIdError,
    DeviceKind,
    parse_device_id,
)

hex_group = st.text("0123456789abcdefABCDEF", min_size=1, max_size=12)
uuid_body = st.lists(hex_group, min_size=1, max_size=5).map("-".join)
replica = st.one_of(st.none(), st.integers(0, 999_999_999))
small = st.integers(0, 9999)

noise = st.one_of(
    st.text(max_size=80),
    st.text(max_size=MAX_ID_LENGTH + 40),
    st.builds(lambda prefix, rest: prefix + rest,
              st.sampled_from(["GPU-", "MIG-", "MIG-GPU-", "nvidia", "nvidia0/", "GPU-ab::"]),
              st.text(max_size=40)),
)


def _suffix(n: int | None) -> str:
    return "" if n is None else f"::{n}"


@given(noise)
def test_any_string_is_a_value(raw: str) -> None:
    parsed = parse_device_id(raw)
    assert isinstance(parsed, DeviceId | DeviceIdError)
    assert parsed.raw == raw
    if isinstance(parsed, DeviceIdError):
        shown = parsed.shown
        assert shown.isascii()
        assert shown.isprintable()
        assert len(shown) <= 80 * 10  # shortened before escaping: bounded in a log line
        assert parsed.reason
    else:
        assert len(raw) <= MAX_ID_LENGTH
        assert raw == raw.strip()


@given(uuid_body, replica)
def test_gpu_uuids(body: str, n: int | None) -> None:
    parsed = parse_device_id(f"GPU-{body}{_suffix(n)}")
    assert isinstance(parsed, DeviceId)
    assert (parsed.kind, parsed.uuid, parsed.replica) == (DeviceKind.GPU_UUID, f"GPU-{body}", n)


@given(uuid_body, replica)
def test_mig_uuids(body: str, n: int | None) -> None:
    parsed = parse_device_id(f"MIG-{body}{_suffix(n)}")
    assert isinstance(parsed, DeviceId)
    assert (parsed.kind, parsed.uuid, parsed.replica) == (DeviceKind.MIG_UUID, f"MIG-{body}", n)


@given(uuid_body, small, small, replica)
def test_legacy_mig_ids(body: str, gi: int, ci: int, n: int | None) -> None:
    parsed = parse_device_id(f"MIG-GPU-{body}/{gi}/{ci}{_suffix(n)}")
    assert isinstance(parsed, DeviceId)
    assert (parsed.kind, parsed.uuid, parsed.gpu_instance_id, parsed.compute_instance_id,
            parsed.replica) == (DeviceKind.MIG_LEGACY, f"GPU-{body}", gi, ci, n)


@given(small, st.one_of(st.none(), small), replica)
def test_gke_ids(index: int, gi: int | None, n: int | None) -> None:
    raw = f"nvidia{index}" + ("" if gi is None else f"/gi{gi}") + (
        "" if n is None else f"/vgpu{n}")
    parsed = parse_device_id(raw)
    assert isinstance(parsed, DeviceId)
    assert (parsed.kind, parsed.gpu_index, parsed.gpu_instance_id, parsed.replica) == (
        DeviceKind.GKE_INDEX, index, gi, n)


@given(uuid_body, st.sampled_from([" ", "\t", "\n"]))
def test_surrounding_whitespace_is_refused(body: str, blank: str) -> None:
    assert isinstance(parse_device_id(f"{blank}GPU-{body}"), DeviceIdError)
    assert isinstance(parse_device_id(f"GPU-{body}{blank}"), DeviceIdError)

"""Device ids as the kubelet reports them for GPUs, parsed into what they point at.

Forms understood (REFERENCE §3.2):

- NVIDIA device plugin: `GPU-<uuid>`, `MIG-<uuid>`, older drivers' `MIG-GPU-<uuid>/<gi>/<ci>`,
  each optionally with a time-slicing/MPS replica suffix `::<n>` (EKS: `MIG-<uuid>::7`).
- GKE's plugin: `nvidia<N>`, MIG `nvidia<N>/gi<M>`, shared `nvidia<N>/vgpu<K>` (and, by
  extension, `nvidia<N>/gi<M>/vgpu<K>`).

Parsing never raises: anything else comes back as a `DeviceIdError` value, because one odd
device plugin must not stop the attribution of every other device on the node.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum

# NVML UUIDs are hex groups joined by dashes (8-4-4-4-12 on every driver seen); the group
# layout is not enforced so that a simulated node's shorter ids still parse.
_HEX_GROUPS = r"[0-9a-fA-F]+(?:-[0-9a-fA-F]+)*"
_REPLICA = r"(?:::(?P<replica>\d{1,9}))?"
_GPU_UUID = re.compile(rf"(?P<uuid>GPU-{_HEX_GROUPS}){_REPLICA}")
_MIG_LEGACY = re.compile(
    rf"MIG-(?P<uuid>GPU-{_HEX_GROUPS})/(?P<gi>\d{{1,4}})/(?P<ci>\d{{1,4}}){_REPLICA}"
)
_MIG_UUID = re.compile(rf"(?P<uuid>MIG-{_HEX_GROUPS}){_REPLICA}")
_GKE = re.compile(
    r"nvidia(?P<index>\d{1,4})(?:/gi(?P<gi>\d{1,4}))?(?:/vgpu(?P<replica>\d{1,9}))?"
)

MAX_ID_LENGTH = 256
"""Longer ids are rejected outright (and not echoed whole into logs)."""


class DeviceKind(Enum):
    """Which form of device id the kubelet reported."""

    GPU_UUID = "gpu_uuid"
    """`GPU-…`: a whole GPU by UUID."""
    MIG_UUID = "mig_uuid"
    """`MIG-…`: one MIG device (compute instance) by its own UUID."""
    MIG_LEGACY = "mig_legacy"
    """`MIG-GPU-<uuid>/<gi>/<ci>`: a MIG device by parent UUID and instance ids."""
    GKE_INDEX = "gke_index"
    """`nvidia<N>[/gi<M>][/vgpu<K>]`: by GPU index (and GPU instance id)."""


@dataclass(frozen=True, slots=True)
class DeviceId:
    """A device id the kubelet reported, parsed into what it points at."""

    raw: str
    kind: DeviceKind
    uuid: str | None = None
    """`GPU-…` for GPU_UUID and MIG_LEGACY, `MIG-…` for MIG_UUID, None for GKE ids."""
    gpu_index: int | None = None
    gpu_instance_id: int | None = None
    compute_instance_id: int | None = None
    replica: int | None = None
    """The shared-replica number (`::N` or GKE `vgpuK`); None for an unshared device."""


@dataclass(frozen=True, slots=True)
class DeviceIdError:
    """A device id that could not be parsed, and why."""

    raw: str
    reason: str

    @property
    def shown(self) -> str:
        """Return the raw id, shortened and made printable for log lines and messages."""
        text = self.raw if len(self.raw) <= 80 else self.raw[:77] + "..."
        return text.encode("unicode_escape").decode("ascii")


def _int(text: str | None) -> int | None:
    return None if text is None else int(text)


def parse_device_id(raw: str) -> DeviceId | DeviceIdError:
    """Return what a kubelet device id points at, or why it could not be understood."""
    if not raw:
        return DeviceIdError(raw, "empty device id")
    if len(raw) > MAX_ID_LENGTH:
        return DeviceIdError(raw, f"device id longer than {MAX_ID_LENGTH} characters")
    if raw != raw.strip():
        return DeviceIdError(raw, "device id has surrounding whitespace")
    if m := _MIG_LEGACY.fullmatch(raw):
        return DeviceId(
            raw,
            DeviceKind.MIG_LEGACY,
            uuid=m["uuid"],
            gpu_instance_id=int(m["gi"]),
            compute_instance_id=int(m["ci"]),
            replica=_int(m["replica"]),
        )
    if m := _GPU_UUID.fullmatch(raw):
        return DeviceId(raw, DeviceKind.GPU_UUID, uuid=m["uuid"], replica=_int(m["replica"]))
    if m := _MIG_UUID.fullmatch(raw):
        return DeviceId(raw, DeviceKind.MIG_UUID, uuid=m["uuid"], replica=_int(m["replica"]))
    if m := _GKE.fullmatch(raw):
        return DeviceId(
            raw,
            DeviceKind.GKE_INDEX,
            gpu_index=int(m["index"]),
            gpu_instance_id=_int(m["gi"]),
            replica=_int(m["replica"]),
        )
    if raw.startswith(("GPU-", "MIG-")):
        return DeviceIdError(raw, "not a valid NVIDIA UUID (expected hex groups, optional ::N)")
    if raw.startswith("nvidia"):
        return DeviceIdError(raw, "not a GKE device id (expected nvidiaN[/giM][/vgpuK])")
    return DeviceIdError(raw, "unknown device id format (expected GPU-…, MIG-… or nvidiaN)")


def looks_like_gpu_id(raw: str) -> bool:
    """Return whether an id under some resource name is a GPU id, which shows a resource that was
    renamed."""
    return isinstance(parse_device_id(raw), DeviceId)

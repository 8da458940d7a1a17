"""Unit conversions from an NVML answer to the exported value, one per `Convert`.

Each returns None for a value that must not be exported (NaN, an absent sensor's reading, a
code with no DCGM equivalent): the series is omitted, never faked.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from exporter.devices.fabric import cluster_uuid, fabric_manager_error, fabric_manager_status
from exporter.fields.catalog import Convert

Conv = Callable[[Any], float | None]

_TEMPERATURE_CEILING = 200
"""NVML answers absurd temperatures for absent sensors; DCGM drops values above this."""

_DCGM_COMPUTE_MODE = {0: 0.0, 2: 1.0, 3: 2.0}
"""DCGM's value for each nvmlComputeMode_t: default 0, prohibited 1, exclusive process 2 (NVML's
exclusive-thread mode 1 no longer exists, and DCGM has no value for it)."""


def _finite(v: float) -> float | None:
    return None if v != v else float(v)  # NaN is the one value unequal to itself


def _ber(raw: int) -> float:
    """Return the bit error rate that NVML packs as a mantissa (bits 8 to 11) and a negative
    exponent (bits 0 to 7)."""
    mantissa = (int(raw) >> 8) & 0xF
    exponent = int(raw) & 0xFF
    return mantissa * 10.0 ** -exponent


def _fb_used_ratio(memory: Any) -> float | None:
    usable = memory.total - memory.reserved
    return memory.used / usable if usable > 0 else None


_NOT_REPORTED = 0xFF
"""Platform info's one-byte numbers read 0xFF where the platform reports none."""
_GRID_LICENSE_FEATURE_CODE_VGPU = 1


def _vgpu_licensed(features: Any) -> float | None:
    """Return 1 when the first vGPU feature listed is licensed (its state is not zero), and 0
    when it is not or licensing is not supported; no value when no vGPU feature is listed, as
    DCGM does."""
    if not features.isGridLicenseSupported:
        return 0.0
    for feature in features.gridLicensableFeatures[:features.licensableFeaturesCount]:
        if feature.featureCode == _GRID_LICENSE_FEATURE_CODE_VGPU:
            return 1.0 if feature.featureState else 0.0
    return None


def _compute_capability(version: tuple[int, int]) -> float:
    major, minor = version
    return float((major << 16) | minor)


CONVERTERS: dict[Convert, Conv] = {
    Convert.NONE: _finite,
    Convert.MILLIWATT_TO_WATT: lambda v: v / 1000.0,
    Convert.MILLIWATT_TO_WATT_FLOOR: lambda v: float(int(v) // 1000),
    Convert.BYTES_TO_MIB: lambda v: float(int(v) >> 20),
    Convert.PERCENT_TO_RATIO: lambda v: None if v != v else v / 100.0,
    Convert.MIB_PER_S_TO_BYTES_PER_S: lambda v: None if v != v else v * 1048576.0,
    Convert.TEMPERATURE: lambda v: float(v) if v <= _TEMPERATURE_CEILING else None,
    Convert.MILLIJOULE_TO_JOULE: lambda v: v / 1000.0,
    Convert.MHZ_TO_HZ: lambda v: float(v) * 1e6,
    Convert.TRUNCATE: lambda v: None if v != v else float(int(v)),
    Convert.COMPUTE_MODE: _DCGM_COMPUTE_MODE.get,
    Convert.COMPUTE_CAPABILITY: _compute_capability,
    Convert.BER: _ber,
    Convert.FB_USED_RATIO: _fb_used_ratio,
    Convert.FABRIC_MANAGER_STATUS: fabric_manager_status,
    Convert.FABRIC_MANAGER_ERROR: fabric_manager_error,
    Convert.UNSET_0XFF: lambda v: None if v == _NOT_REPORTED else float(v),
    Convert.VGPU_LICENSED: _vgpu_licensed,
}

_BRANDS = ("Unknown", "Quadro", "Tesla", "NVS", "Grid", "GeForce", "Titan",
           "NVIDIA Virtual Applications", "NVIDIA Virtual PC", "NVIDIA Virtual Compute Server",
           "NVIDIA RTX Virtual Workstation", "NVIDIA vGaming", "Quadro RTX", "NVIDIA RTX",
           "NVIDIA", "GeForce RTX", "Titan RTX")
"""The name DCGM gives each nvmlBrandType_t (nvidia-smi's words); later values are Unknown."""


def _brand(value: int) -> str:
    return _BRANDS[value] if 0 <= value < len(_BRANDS) else "Unknown"


def _guid_hex(raw: Any) -> str:
    """Return the first 8 bytes as one little-endian 64-bit number written as "0x%016llx", as
    DCGM prints it."""
    return f"0x{int.from_bytes(bytes(raw)[:8], 'little'):016x}"


def _serial(raw: Any) -> str | None:
    """Return the ASCII text up to the first NUL; no value when the first byte is NUL or every
    byte is 0xFF, which is how DCGM sees a blank."""
    data = bytes(raw)
    if not data or data[0] == 0 or all(b == _NOT_REPORTED for b in data):
        return None
    return data.split(b"\0", 1)[0].decode("ascii", "replace")


LABEL_CONVERTERS: dict[Convert, Callable[[Any], str | None]] = {
    Convert.BRAND_NAME: _brand,
    Convert.GUID_HEX: _guid_hex,
    Convert.SERIAL_BYTES: _serial,
    Convert.UUID_BYTES: cluster_uuid,
}
"""Label fields whose NVML answer is not the text itself; None: no label."""

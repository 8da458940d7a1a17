"""Unit conversions from an NVML answer to the exported value, one per `Convert`.

Each returns None for a value that must not be exported (NaN, an absent sensor's reading, a
code with no DCGM equivalent): the series is omitted, never faked.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from exporter.devices.fabric import fabric_manager_status
from exporter.fields.catalog import Convert

Conv = Callable[[Any], float | None]

_TEMPERATURE_CEILING = 200
"""NVML answers absurd temperatures for absent sensors; DCGM drops values above this."""

_DCGM_COMPUTE_MODE = {0: 0.0, 2: 1.0, 3: 2.0}
"""nvmlComputeMode_t -> DCGM's: default 0, prohibited 1, exclusive process 2 (NVML's
exclusive-thread mode 1 no longer exists, and DCGM has no value for it)."""


def _finite(v: float) -> float | None:
    return None if v != v else float(v)  # NaN is the one value unequal to itself


def _ber(raw: int) -> float:
    """NVML packs a bit error rate as mantissa (bits 8-11) and negative exponent (bits 0-7)."""
    mantissa = (int(raw) >> 8) & 0xF
    exponent = int(raw) & 0xFF
    return mantissa * 10.0 ** -exponent


def _fb_used_ratio(memory: Any) -> float | None:
    usable = memory.total - memory.reserved
    return memory.used / usable if usable > 0 else None


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
}

"""A simulated GPU that answers every served field, and the value each field must export.

Every served spec gets its own raw value, set in the scenario under the key of the exact NVML
call (or field id and scope, or GPM metric) the spec says DCGM reads; the expected exported
value is computed here from that raw value by an independent statement of each conversion.
A field read through the wrong call, id, scope or argument finds no value (the simulated
library answers NOT_SUPPORTED) and a wrong conversion gives another number.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from exporter.fields.catalog import (
    CATALOG,
    HANDLE,
    LINK,
    Call,
    Convert,
    FieldRefs,
    FieldSpec,
    GpmLink,
    MetricType,
    Reader,
    Scope,
)
from exporter.fields.dcgm_names import dcgm_names

LINKS = 18
MIB = 1 << 20
NVML_VERSION = "13.590.48.01"
"""The simulated library's default NVML version."""
# NVML_COMPUTEMODE_* and DCGM's values, NVML_NVLINK_* BER encodings.
_COMPUTE_MODE = {0: 0, 2: 1, 3: 2}

# Catalog fields read by named readers: raw value from the scenario's named device keys.
NAMED: dict[str, Any] = {
    "name": "NVIDIA H100 80GB HBM3", "uuid": "GPU-7a1c0000-0000-4000-8000-0000000000ab",
    "pci_bus_id": "00000000:9B:00.0", "sm_clock_mhz": 1755, "mem_clock_mhz": 2619,
    "temperature_c": 61, "memory_temperature_c": 73, "power_w": 312.345,
    "power_limit_w": 699.999, "energy_mj": 5_000_000, "pcie_replay": 4, "gpu_util": 87,
    "memory_util": 41, "encoder_util": 3, "decoder_util": 9,
    "memory_total_bytes": 81559 * MIB + 123456, "memory_reserved_bytes": 535 * MIB + 999,
    "memory_used_bytes": 1234567891, "ecc_sbe_volatile": 11, "ecc_dbe_volatile": 2,
    "ecc_sbe_aggregate": 21, "ecc_dbe_aggregate": 5, "retired_pages_sbe": 3,
    "retired_pages_dbe": 1, "retired_pages_pending": 1, "remapped_rows_correctable": 6,
    "remapped_rows_uncorrectable": 1, "remap_pending": 1, "remap_failure": 0,
    "violation_power_ns": 1001, "violation_thermal_ns": 1002, "violation_sync_boost_ns": 1003,
    "violation_board_limit_ns": 1004, "violation_low_util_ns": 1005,
    "violation_reliability_ns": 1006, "nvlink_tx_kib": 5000, "nvlink_rx_kib": 7000,
    "nvlink_links": LINKS, "clock_event_reasons": 0x24, "minor_number": 3,
    "pci_device_id": 0x233010DE, "pci_subsystem_id": 0x16C110DE, "gpm_supported": 1,
}

# Calls the simulated library answers from its named device state, not from "calls" values:
# the raw answer, or the `NAMED` key holding it.
_NAMED_CALLS: dict[str, int | str] = {
    "nvmlDeviceGetCount()": 1, "nvmlDeviceGetIndex()": 0, "nvmlDeviceGetMigMode()[0]": 0,
    "nvmlDeviceGetMinorNumber()": "minor_number",
    "nvmlDeviceGetPciInfo_v3().pciDeviceId": "pci_device_id",
    "nvmlDeviceGetPciInfo_v3().pciSubSystemId": "pci_subsystem_id",
    "nvmlGpmQueryDeviceSupport().isSupportedDevice": "gpm_supported",
    "nvmlDeviceGetClockInfo(1)": "sm_clock_mhz", "nvmlDeviceGetClockInfo(2)": "mem_clock_mhz",
    # DCGM_FI_DEV_MIG_MAX_SLICES: 0 with MIG off (tests/devices/test_struct_reads.py has MIG on)
    "nvmlDeviceGetMaxMigDeviceCount()": 0,
}


@dataclass
class Scenario:
    device: dict[str, Any]
    expected: dict[str, float] = field(default_factory=dict)
    """Exported value of each GPU-level field, by spec name."""
    expected_links: dict[str, dict[int, float]] = field(default_factory=dict)
    """Exported value of each link field, by spec name and link."""
    expected_labels: dict[str, str] = field(default_factory=dict)
    """Value of each label-type field read through NVML, by spec name."""


def served_specs() -> list[FieldSpec]:
    """Every spec the exporter serves, each under the name it is served by."""
    by_name = {s.name: s for s in CATALOG}
    by_name.update((s.name, s) for s in dcgm_names().served.values())
    return list(by_name.values())


def _convert(convert: Convert, raw: Any) -> float | None:
    """Each conversion as DCGM states it (the field table's `conversion` column)."""
    if convert is Convert.NONE:
        return float(raw)
    if convert in (Convert.MILLIWATT_TO_WATT, Convert.MILLIJOULE_TO_JOULE):
        return float(raw / 1000)
    if convert is Convert.MILLIWATT_TO_WATT_FLOOR:
        return float(raw // 1000)
    if convert is Convert.BYTES_TO_MIB:
        return float(raw // MIB)
    if convert is Convert.PERCENT_TO_RATIO:
        return float(raw / 100)
    if convert is Convert.MIB_PER_S_TO_BYTES_PER_S:
        return float(raw * 1048576)
    if convert is Convert.TEMPERATURE:
        return float(raw) if raw <= 200 else None
    if convert is Convert.MHZ_TO_HZ:
        return float(raw * 1_000_000.0)
    if convert is Convert.TRUNCATE:
        return float(int(raw))
    if convert is Convert.COMPUTE_MODE:
        return float(_COMPUTE_MODE[raw])
    if convert is Convert.COMPUTE_CAPABILITY:
        major, minor = raw
        return float(major * 65536 + minor)
    if convert is Convert.BER:
        return float(((raw >> 8) & 0xF) * 10.0 ** -(raw & 0xFF))
    if convert is Convert.FABRIC_MANAGER_STATUS:
        state, status = raw  # completed (3): success or failure by status; else the state
        return (3.0 if status == 0 else 4.0) if state == 3 else float(min(state, 5))
    if convert is Convert.FB_USED_RATIO:
        return float(raw.used / (raw.total - raw.reserved))
    if convert is Convert.FABRIC_MANAGER_ERROR:
        state, status = raw  # completed: DCGM's code for the NVML status (UNINITIALIZED -56)
        return {0: 0.0, 1: -56.0}[status] if state == 3 else None
    if convert is Convert.UNSET_0XFF:
        return None if raw == 0xFF else float(raw)
    if convert is Convert.VGPU_LICENSED:
        return 1.0 if raw else 0.0  # the vGPU feature's state
    raise AssertionError(f"no expectation for {convert}")


_ONE_BYTE = frozenset({"nvmlDeviceGetPlatformInfo"})
"""Calls whose members are single bytes."""
_RETURN_CODE = {"nvmlDeviceValidateInforom": 0}
"""Calls answering in their return code: the value that selects an error answer (0: the
infoROM is corrupted, exported as 0)."""


def _raw_for(spec: FieldSpec, n: int) -> Any:
    part = spec.part
    if isinstance(part, Call) and part.function in _ONE_BYTE:
        return 1 + n % 200
    if isinstance(part, Call) and part.function in _RETURN_CODE:
        return _RETURN_CODE[part.function]
    if spec.part == "healthSummary":
        return 2  # an unsigned char: NVML_GPU_FABRIC_HEALTH_SUMMARY_UNHEALTHY
    return _raw(spec.convert, n)


def _raw(convert: Convert, n: int) -> Any:
    """A raw value for the n-th field, valid for its conversion and telling it apart."""
    if convert is Convert.TEMPERATURE:
        return 40 + n % 100
    if convert is Convert.PERCENT_TO_RATIO:
        return 1.5 + n % 97
    if convert is Convert.COMPUTE_MODE:
        return 3
    if convert is Convert.COMPUTE_CAPABILITY:
        return (9, n % 7)
    if convert in (Convert.FABRIC_MANAGER_STATUS, Convert.FABRIC_MANAGER_ERROR):
        return (3, 1)  # registration completed with an error: DCGM's "failure", 4
    if convert is Convert.BER:
        return (3 << 8) | (10 + n % 9)
    if convert in (Convert.MILLIWATT_TO_WATT, Convert.MILLIWATT_TO_WATT_FLOOR):
        return 600_000 + 1000 * n + 789
    if convert is Convert.TRUNCATE:
        return 1000 + n + 0.75
    return 1000 + 3 * n


def _call_key(call: Call, link: int | None) -> str:
    """The simulated library's key for a call: pynvml's arguments without the handle."""
    args = [str(link if a == LINK else a) for a in call.args if a != HANDLE]
    pick = "" if call.pick is None else (
        f".{call.pick}" if isinstance(call.pick, str) else f"[{call.pick}]")
    return f"{call.function}({','.join(args)}){pick}"


_NAMED_FIELD_IDS: set[object] = {3, 4, 5, 6, 29, 30, 31, 74, 75, 76, 77, 78, 79, 82, "tx+rx"}
"""Field values the simulated library answers from its named device keys (`NAMED`)."""

# String calls the simulated library answers from its named device state.
_NAMED_STRINGS = {"nvmlDeviceGetName()": NAMED["name"], "nvmlDeviceGetUUID()": NAMED["uuid"],
                  "nvmlDeviceGetPciInfo_v3().busId": NAMED["pci_bus_id"],
                  "nvmlSystemGetNVMLVersion()": NVML_VERSION}


# Label fields whose NVML answer is not the text: where the raw answer is set, the raw
# value, and the text DCGM makes of it (an independent statement of each conversion).
_CONVERTED_LABELS: dict[Convert, tuple[str, str, Any, str]] = {
    Convert.BRAND_NAME: ("calls", "nvmlDeviceGetBrand()", 9, "NVIDIA Virtual Compute Server"),
    Convert.GUID_HEX: ("calls", "nvmlDeviceGetPlatformInfo().ibGuid", 0x000A1B2C3D4E5F60,
                       "0x000a1b2c3d4e5f60"),
    Convert.SERIAL_BYTES: ("strings", "nvmlDeviceGetPlatformInfo().chassisSerialNumber",
                           "1650924060012", "1650924060012"),
    Convert.UUID_BYTES: ("strings", "nvmlDeviceGetGpuFabricInfoV().clusterUuid",
                         "5c0ffee0d15ea5e0b0bacafe12345678",
                         "5c0ffee0-d15e-a5e0-b0ba-cafe12345678"),
}


def _labels(scenario: Scenario, specs: list[FieldSpec]) -> None:
    """Label-type fields: a string per call, set where the simulated library looks."""
    for n, spec in enumerate(s for s in specs if s.type is MetricType.LABEL):
        if not isinstance(spec.part, Call):
            continue  # the driver version, from the inventory
        if spec.convert in _CONVERTED_LABELS:
            table, key, raw, text = _CONVERTED_LABELS[spec.convert]
            scenario.device[table][key] = raw
            scenario.expected_labels[spec.name] = text
            continue
        key = _call_key(spec.part, None)
        value = _NAMED_STRINGS.get(key)
        if value is None:
            value = scenario.device["strings"].setdefault(key, f"{spec.name[8:20]}-{n}")
        scenario.expected_labels[spec.name] = value


def build() -> Scenario:
    scenario = Scenario(dict(NAMED, fields={}, calls={}, gpm={}, strings={}))
    device = scenario.device
    specs = served_specs()
    _labels(scenario, specs)
    specs = [s for s in specs if s.type is not MetricType.LABEL]
    # First every key gets a value (the first spec to read it picks one valid for its
    # conversion), then each spec's expectation is worked out from what its keys hold:
    # several fields may read one key (a lane field and the same link's link field).
    for n, spec in enumerate(specs):
        for link in (range(LINKS) if spec.scope is Scope.LINK else [None]):
            _set(device, spec, _raw_for(spec, n + 7 * (link or 0)), link)
    for spec in specs:
        for link in (range(LINKS) if spec.scope is Scope.LINK else [None]):
            raw = _stored(device, spec, link)
            value = None if raw is None else _convert(spec.convert, raw)
            if value is None:
                continue
            if link is None:
                scenario.expected[spec.name] = value
            else:
                scenario.expected_links.setdefault(spec.name, {})[link] = value
    return scenario


def _keys(spec: FieldSpec, link: int | None) -> tuple[str, list[str]] | None:
    """Where the spec's raw value lives: ("calls" | "fields" | "gpm", keys), or None for a
    catalog field read by a named reader (its value comes from `NAMED`)."""
    part = spec.part
    if spec.reader is Reader.CALL:
        assert isinstance(part, Call)
        key = _call_key(part, link)
        if spec.convert is Convert.COMPUTE_CAPABILITY:
            return "calls", [key + "[0]", key + "[1]"]
        return "calls", [key]
    if spec.reader is Reader.FABRIC:
        members = [str(part)] if part is not None else ["state", "status"]
        return "calls", [f"nvmlDeviceGetGpuFabricInfoV().{m}" for m in members]
    if spec.reader is Reader.FIELD_VALUES and part not in _NAMED_FIELD_IDS:
        if isinstance(part, int):
            return "fields", [f"{part}@0"]
        assert isinstance(part, FieldRefs)
        return "fields", [f"{f}@{link if s == LINK else s}" for f, s in part.refs]
    if spec.reader is Reader.GPM:
        metric = part.metric(link or 0) if isinstance(part, GpmLink) else part
        return "gpm", [str(metric)]
    return None


# Struct members and list entries the simulated call fills together: all set, or the call
# answers NOT_SUPPORTED.
_SIBLINGS = {
    "nvmlDeviceGetBAR1MemoryInfo()": [".bar1Total", ".bar1Used", ".bar1Free"],
    "nvmlDeviceGetRowRemapperHistogram()": [".max", ".high", ".partial", ".low", ".none"],
    "nvmlDeviceGetPowerManagementLimitConstraints()": ["[0]", "[1]"],
    "nvmlDeviceGetAutoBoostedClocksEnabled()": ["[0]", "[1]"],
    "nvmlDeviceGetCpuAffinity(4)": ["[0]", "[1]", "[2]", "[3]"],
    "nvmlDeviceGetMemoryAffinity(4,0)": ["[0]", "[1]", "[2]", "[3]"],
}


def _set(device: dict[str, Any], spec: FieldSpec, raw: Any, link: int | None) -> None:
    where = _keys(spec, link)
    if where is None or where[1][0] in _NAMED_CALLS:
        return
    table, keys = where
    values = list(raw) if isinstance(raw, tuple) else [raw] + [0] * (len(keys) - 1)
    for key, value in zip(keys, values, strict=True):
        device[table].setdefault(key, value)
        for call, members in _SIBLINGS.items():
            if key.startswith(call):
                for member in members:
                    device[table].setdefault(call + member, 0)


def _stored(device: dict[str, Any], spec: FieldSpec, link: int | None) -> Any:
    """The raw value NVML answers the spec's read with; None where no expectation is set."""
    if spec.reader is Reader.MEMORY and spec.part in (None, "total"):
        total, reserved = NAMED["memory_total_bytes"], NAMED["memory_reserved_bytes"]
        if spec.part == "total":
            return total
        memory = _Memory(total, reserved, NAMED["memory_used_bytes"])
        return memory
    where = _keys(spec, link)
    if where is None:
        return None
    table, keys = where
    if keys[0] in _NAMED_CALLS:
        named = _NAMED_CALLS[keys[0]]
        return NAMED[named] if isinstance(named, str) else named
    values = [device[table][k] for k in keys]
    if spec.convert in (Convert.COMPUTE_CAPABILITY, Convert.FABRIC_MANAGER_STATUS,
                        Convert.FABRIC_MANAGER_ERROR):
        return tuple(values)
    return sum(values) if len(values) > 1 else values[0]


@dataclass
class _Memory:
    total: int
    reserved: int
    used: int

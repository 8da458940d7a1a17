"""A simulated GPU that answers every served field, and the value each field must export.

Every served field gets its own raw value, put in the scenario where DCGM's own field table
(`tests/fixtures/dcgm-fields/dcgm-fields.csv`) says DCGM reads it: the NVML call with its
arguments, the field id and scope, or the GPM metric, read from the table's `nvml_source`,
`scope` and `conversion` columns by `tests/nvmlsim/dcgm_sources.py`, never from the
exporter's field specs. The expected exported value is computed here from that raw value by
an independent statement of each conversion. A spec reading another call, id, scope or
argument than DCGM's finds no value (the simulated library answers NOT_SUPPORTED) or another
field's; a wrong conversion gives another number (`wrong_values` reports both).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from exporter.fields.catalog import CATALOG, Convert, FieldSpec, MetricType
from exporter.fields.dcgm_names import dcgm_names
from exporter.simulated.node.call_table import CALLS_BY_NAME
from tests.nvmlsim.dcgm_sources import Row, Source, per_link, reference_rows, source

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


_ONE_BYTE = ("nvmlDeviceGetPlatformInfo",)
"""Calls whose members are single bytes."""
_RETURN_CODE = {"nvmlDeviceValidateInforom": 0}
"""Calls answering in their return code: the value that selects an error answer (0: the
infoROM is corrupted, exported as 0)."""


def _raw_for(spec: FieldSpec, row: Row, n: int) -> Any:
    nvml_source = row["nvml_source"]
    if nvml_source.startswith(_ONE_BYTE):
        return 1 + n % 200
    if nvml_source in _RETURN_CODE:
        return _RETURN_CODE[nvml_source]
    if row["conversion"].startswith(".healthSummary"):
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


# String calls the simulated library answers from its named device state.
_NAMED_STRINGS = {"nvmlDeviceGetName()": NAMED["name"], "nvmlDeviceGetUUID()": NAMED["uuid"],
                  "nvmlDeviceGetPciInfo_v3().busId": NAMED["pci_bus_id"],
                  "nvmlSystemGetNVMLVersion()": NVML_VERSION}


# Label fields whose NVML answer is not the text, by where the table says the answer lies:
# the raw answer, and the text DCGM makes of it (an independent statement of each conversion).
_CONVERTED_LABELS: dict[str, tuple[Any, str]] = {
    "nvmlDeviceGetBrand()": (9, "NVIDIA Virtual Compute Server"),
    "nvmlDeviceGetPlatformInfo().ibGuid": (0x000A1B2C3D4E5F60, "0x000a1b2c3d4e5f60"),
    "nvmlDeviceGetPlatformInfo().chassisSerialNumber": ("1650924060012", "1650924060012"),
    "nvmlDeviceGetGpuFabricInfoV().clusterUuid": ("5c0ffee0d15ea5e0b0bacafe12345678",
                                                  "5c0ffee0-d15e-a5e0-b0ba-cafe12345678"),
}


def _labels(scenario: Scenario, specs: list[FieldSpec]) -> None:
    """Label-type fields: a string per call, set where the table says DCGM reads it."""
    rows = reference_rows()
    for n, spec in enumerate(s for s in specs if s.type is MetricType.LABEL):
        where = source(rows[spec.name])
        if where is None:
            continue  # the driver version, from the inventory
        (key,) = where.keys
        if key in _CONVERTED_LABELS:
            raw, text = _CONVERTED_LABELS[key]
            scenario.device[where.table][key] = raw
            scenario.expected_labels[spec.name] = text
            continue
        value = _NAMED_STRINGS.get(key)
        if value is None:
            value = scenario.device[where.table].setdefault(key, f"{spec.name[8:20]}-{n}")
        scenario.expected_labels[spec.name] = value


def links_of(row: Row) -> list[int | None]:
    """The NVLinks a field is read on, by the table: each link, or none (one value)."""
    return list(range(LINKS)) if per_link(row) else [None]


def build() -> Scenario:
    scenario = Scenario(dict(NAMED, fields={}, calls={}, gpm={}, strings={}))
    device = scenario.device
    rows = reference_rows()
    specs = served_specs()
    _labels(scenario, specs)
    specs = [s for s in specs if s.type is not MetricType.LABEL]
    # First every key gets a value (the first field to read it picks one valid for its
    # conversion), then each field's expectation is worked out from what its keys hold:
    # several fields may read one key (a lane field and the same link's link field).
    for n, spec in enumerate(specs):
        row = rows[spec.name]
        for link in links_of(row):
            _set(device, source(row, link), _raw_for(spec, row, n + 7 * (link or 0)))
    for key in list(device["calls"]):  # what no field reads but its call needs: 0
        for sibling in _needed_with(key):
            device["calls"].setdefault(sibling, 0)
    for spec in specs:
        row = rows[spec.name]
        for link in links_of(row):
            raw = _stored(device, source(row, link))
            value = None if raw is None else _convert(spec.convert, raw)
            if value is None:
                continue
            if link is None:
                scenario.expected[spec.name] = value
            else:
                scenario.expected_links.setdefault(spec.name, {})[link] = value
    return scenario


def wrong_values(scenario: Scenario, result: dict[str, Any]) -> dict[str, Any]:
    """Each field whose read value is not the scenario's: (read, expected), by name (and
    `name@link` for a link field); a field read where no value lies reads None."""
    values, links = result["values"], result["links"]
    wrong: dict[str, Any] = {
        name: (values.get(name), want) for name, want in scenario.expected.items()
        if values.get(name) is None or values[name] != pytest.approx(want, rel=1e-9)}
    for name, by_link in scenario.expected_links.items():
        for link, want in by_link.items():
            got = links.get(f"{link}:{name}")
            if got is None or got != pytest.approx(want, rel=1e-9):
                wrong[f"{name}@{link}"] = (got, want)
    return wrong


def _needed_with(key: str) -> tuple[str, ...]:
    """The keys the simulated call answering `key` needs besides it, by the simulators' call
    table (a struct's needed members, a list's entries, a set's words): all set, or the call
    answers NOT_SUPPORTED."""
    function, _, rest = key.partition("(")
    call = CALLS_BY_NAME.get(function)
    if call is None:
        return ()
    return call.needed_keys(tuple(int(a) for a in rest.split(")")[0].split(",") if a))


def _set(device: dict[str, Any], where: Source | None, raw: Any) -> None:
    if where is None or where.table == "memory" or where.keys[0] in _NAMED_CALLS:
        return  # answered from the named device state
    table, keys = where.table, where.keys
    values = list(raw) if isinstance(raw, tuple) else [raw] + [0] * (len(keys) - 1)
    for key, value in zip(keys, values, strict=True):
        device[table].setdefault(key, value)


def _stored(device: dict[str, Any], where: Source | None) -> Any:
    """The raw value NVML answers at `where`; None where no expectation is set here."""
    if where is None:
        return None
    if where.table == "memory":
        total, reserved = NAMED["memory_total_bytes"], NAMED["memory_reserved_bytes"]
        used = NAMED["memory_used_bytes"]
        member = where.keys[0]
        if member == "ratio":
            return _Memory(total, reserved, used)
        return {"total": total, "reserved": reserved, "used": used,
                "free": total - reserved - used}[member]
    if where.keys[0] in _NAMED_CALLS:
        named = _NAMED_CALLS[where.keys[0]]
        return NAMED[named] if isinstance(named, str) else named
    values = [device[where.table][k] for k in where.keys]
    if len(values) == 2 and where.keys[0].endswith(("[0]", ".state")):
        return tuple(values)  # a pair the conversion takes apart
    return sum(values) if len(values) > 1 else values[0]


@dataclass
class _Memory:
    total: int
    reserved: int
    used: int

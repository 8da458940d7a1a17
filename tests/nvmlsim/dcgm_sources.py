"""Where DCGM reads each field, read from DCGM's own field table, apart from the exporter.

`tests/fixtures/dcgm-fields/dcgm-fields.csv` says, per field name, which NVML call (or
`NVML_FI_*` field id and scope, or GPM metric) DCGM reads (`nvml_source`), on which entity
(`scope`) and how it picks and converts the answer (`conversion`). `source` turns a row into
the simulated library's key for that answer: the call as pynvml makes it without the device
handle (`nvmlDeviceGetMaxClockInfo(1)`, `...BAR1MemoryInfo().bar1Free`), `<id>@<scope id>`
for a field value, the metric id for GPM. Nothing here looks at the exporter's field specs,
so a spec naming another call, id or scope than DCGM's reads a key where no value was put.

The pynvml shapes that differ from the C call the table names are stated here, as facts
about pynvml: `nvmlDeviceGetCount` for `_v2`, affinity calls taking the set's size first,
`nvmlDeviceGetMarginTemperature` returning the member itself, two-value answers as a list.
"""

from __future__ import annotations

import csv
import functools
import re
from collections.abc import Mapping
from dataclasses import dataclass

import pynvml

from tests.support.paths import fixture_file

Row = Mapping[str, str]


@dataclass(frozen=True)
class Source:
    table: str
    """Where the simulated library looks: "calls", "fields", "gpm", "strings", or "memory"
    (its named framebuffer state: member "total", "free", "used", "reserved", or "ratio")."""
    keys: tuple[str, ...]
    """One key, or the keys whose values make one answer (summed, or a pair)."""


@functools.cache
def reference_rows() -> dict[str, dict[str, str]]:
    """DCGM's field table by name (every name: canonical, alias, 1.x)."""
    with fixture_file("dcgm-fields", "dcgm-fields.csv").open(newline="", encoding="utf-8") as f:
        return {row["dcgm_name"]: row for row in csv.DictReader(f)}


def per_link(row: Row) -> bool:
    """DCGM reads the field once per NVLink (one series per link)."""
    return row["scope"] == "link"


NAMED_STATE = (
    # Calls the simulated library answers only from its named device state (the scenario's
    # `temperature_c`, `power_w`, ...), never from a value put under a key: their values are
    # stated apart, in tests/devices/test_nvml_clib.py. A source is one of these, or begins
    # with one followed by "(".
    "nvmlDeviceGetTemperature", "nvmlDeviceGetPowerUsage", "nvmlDeviceGetPowerManagementLimit",
    "nvmlDeviceGetPcieReplayCounter", "nvmlDeviceGetUtilizationRates",
    "nvmlDeviceGetEncoderUtilization", "nvmlDeviceGetDecoderUtilization",
    "nvmlDeviceGetRetiredPages", "nvmlDeviceGetCurrentClocksEventReasons",
    "nvmlSystemGetDriverVersion", "nvmlDeviceRegisterEvents", "nvmlDeviceGetP2PStatus",
)
READ_ANOTHER_WAY = {
    # Fields this exporter reads through another NVML call than the one DCGM's table names,
    # one that answers the same counter (the table's own note says so for the energy).
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": "nvmlDeviceGetTotalEnergyConsumption",
    "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS": "nvmlDeviceGetRemappedRows",
    "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": "nvmlDeviceGetRemappedRows",
    "DCGM_FI_DEV_ROW_REMAP_PENDING": "nvmlDeviceGetRemappedRows",
    "DCGM_FI_DEV_ROW_REMAP_FAILURE": "nvmlDeviceGetRemappedRows",
}
"""Checked against the named state in tests/devices/test_nvml_clib.py, like NAMED_STATE."""
FROM_SEVERAL_CALLS = {
    # DCGM's health watches over many NVML answers (tests/devices/test_health.py).
    "DCGM_EXP_GPU_HEALTH_STATUS",
}

_FIELD_VALUES = re.compile(r"nvmlDeviceGetFieldValues\(([\w +]+)\)(?: scopeId=(\w+))?")
_GPM = re.compile(r"nvmlGpmMetricsGet\((NVML_GPM_METRIC_[\w<>]+?)\)")
_PPCNT = re.compile(r"nvmlDeviceReadWritePRM_v1\(PPCNT register group (0x[0-9A-F]+)\b.*\)")
_PPCNT_MEMBER = re.compile(r"raw TLV register read, big-endian unpack of (\w+?)(_high<<32.*)?")
_PRM_COUNTER = re.compile(r"nvmlDeviceReadPRMCounters_v1\((NVML_PRM_COUNTER_ID_\w+)\)")
_CALL = re.compile(r"(nvml\w+)(?:\((.*)\))?")
_WORD = re.compile(r"word (\d) of a (\d) x 64-bit (?:cpu|node)Set")

_PYNVML_NAMES = {"nvmlDeviceGetCount_v2": "nvmlDeviceGetCount"}
_RETURNS_THE_MEMBER = {"nvmlDeviceGetMarginTemperature"}
_PAIRS = {"isEnabled": "[0]", "current mode only": "[0]", "minLimit": "[0]",
          "maxLimit": "[1]"}
"""Answers pynvml gives as a list: the item DCGM picks, by the conversion's first words."""
_LABEL_SOURCES = {
    # The table's conversion of a string field whose NVML answer is not the text, and where
    # pynvml's answer lies for the simulated library.
    "nvmlBrandType_t -> fixed string": ("calls", ""),
    'ibGuid first 8 bytes as "0x%016llx"': ("calls", ".ibGuid"),
    "chassisSerialNumber (16 bytes)": ("strings", ".chassisSerialNumber"),
    ".clusterUuid formatted as a GUID string": ("strings", ".clusterUuid"),
}


def _constant(name: str) -> int:
    value = getattr(pynvml, name)
    assert isinstance(value, int), name
    return value


def _args(text: str | None, link: int | None) -> list[str]:
    out: list[str] = []
    for arg in (a.strip() for a in (text or "").split(",") if a.strip()):
        lane = re.fullmatch(r"link=(\d+)", arg)
        if lane is not None:
            out.append(lane.group(1))
        elif arg == "link":
            assert link is not None, text
            out.append(str(link))
        else:
            out.append(str(_constant(arg)))
    return out


def _field_values(row: Row, link: int | None) -> Source:
    match = _FIELD_VALUES.fullmatch(row["nvml_source"])
    assert match is not None, row["nvml_source"]
    ids = [_constant(name.strip()) for name in match.group(1).split("+")]
    scope_text = match.group(2)
    if per_link(row) or scope_text == "link":
        assert link is not None
        scope = link
    elif scope_text is not None:
        scope = int(scope_text, 0)
    elif "scopeId=0xFFFFFFFF" in row["notes"]:
        scope = 0xFFFFFFFF
    else:
        scope = 0
    return Source("fields", tuple(f"{i}@{scope}" for i in ids))


def _gpm(row: Row, link: int | None) -> Source:
    match = _GPM.fullmatch(row["nvml_source"])
    assert match is not None, row["nvml_source"]
    name = match.group(1)
    if "<n>" in name:
        assert link is not None
        name = name.replace("<n>", str(link))
    return Source("gpm", (str(_constant(name)),))


def _prm(row: Row, link: int | None) -> Source | None:
    group = _PPCNT.fullmatch(row["nvml_source"])
    if group is not None:
        member = _PPCNT_MEMBER.fullmatch(row["conversion"])
        assert member is not None, row["conversion"]
        return Source("calls", (f"nvmlDeviceReadWritePRM_v1({link},{int(group.group(1), 16)})"
                                f".{member.group(1)}",))
    counter = _PRM_COUNTER.fullmatch(row["nvml_source"])
    if counter is not None:
        return Source("calls", (f"nvmlDeviceReadPRMCounters_v1({link},"
                                f"{_constant(counter.group(1))})",))
    return None


def _memory(conversion: str) -> Source:
    if conversion.startswith("used / (total - reserved)"):
        return Source("memory", ("ratio",))
    member = re.match(r"\.(total|free|used|reserved) bytes", conversion)
    assert member is not None, conversion
    return Source("memory", (member.group(1),))


def _label(row: Row) -> Source:
    function, args = _call(row["nvml_source"].split(" + ")[0])
    for prefix, (table, pick) in _LABEL_SOURCES.items():
        if row["conversion"].startswith(prefix):
            return Source(table, (f"{function}({args}){pick}",))
    pick = ".busId" if row["conversion"] == ".busId" else ""
    return Source("strings", (f"{function}({args}){pick}",))


def _call(text: str, link: int | None = None) -> tuple[str, str]:
    match = _CALL.fullmatch(text)
    assert match is not None, text
    function = _PYNVML_NAMES.get(match.group(1), match.group(1))
    return function, ",".join(_args(match.group(2), link))


def source(row: Row, link: int | None = None) -> Source | None:
    """Where the answer DCGM reads for this row lies (`link`: the NVLink of a per-link
    field); None where the simulated library answers only from its named device state, or
    the exporter reads the same counter another way (READ_ANOTHER_WAY)."""
    nvml_source, conversion = row["nvml_source"], row["conversion"]
    if row["dcgm_name"] in READ_ANOTHER_WAY or row["dcgm_name"] in FROM_SEVERAL_CALLS or \
            nvml_source in NAMED_STATE or \
            nvml_source.startswith(tuple(f"{named}(" for named in NAMED_STATE)):
        return None
    if row["dcgm_type"] == "string":
        return _label(row)
    if nvml_source.startswith("nvmlDeviceGetFieldValues("):
        return _field_values(row, link)
    if nvml_source.startswith("nvmlGpmMetricsGet("):
        return _gpm(row, link)
    if nvml_source.startswith("nvmlDeviceGetMemoryInfo"):
        return _memory(conversion)
    prm = _prm(row, link)
    if prm is not None:
        return prm
    function, args = _call(nvml_source, link)
    key = f"{function}({args})"
    word = _WORD.fullmatch(conversion)
    if word is not None:  # pynvml takes the set's size (in 64-bit words) first
        sized = ",".join([word.group(2), *([args] if args else [])])
        return Source("calls", (f"{function}({sized})[{word.group(1)}]",))
    if conversion == "(major << 16) | minor":
        return Source("calls", (f"{key}[0]", f"{key}[1]"))
    if function == "nvmlDeviceGetGpuFabricInfoV" and re.match(r"\.(state|status)\b", conversion):
        return Source("calls", (f"{key}.state", f"{key}.status"))
    pair = next((pick for words, pick in _PAIRS.items() if conversion.startswith(words)), None)
    if pair is not None:
        return Source("calls", (key + pair,))
    member = re.match(r"\.(\w+)", conversion)
    if member is not None and function not in _RETURNS_THE_MEMBER:
        return Source("calls", (f"{key}.{member.group(1)}",))
    return Source("calls", (key,))

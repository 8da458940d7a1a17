"""How this exporter reads a DCGM field, worked out from its row of the reference table.

A build tool, run by `tools.derive_dcgm_names` (never by the exporter, which reads the
generated `exporter/fields/dcgm-names.csv`). The table says which NVML call (or `NVML_FI_*`
field id, or GPM metric id) DCGM reads and which conversion it applies, in a small set of
recurring phrasings. `recipe` turns a canonical row into a `FieldSpec`: a plain call, a
field value, a GPM metric, a PRM register, or one of the struct reads and composed values
the device layer knows (`exporter.devices.struct_reads`). A row of a phrasing it does not
know gives None, and the field is listed as having an NVML source that is not served; no
row does today (`tests/fields/test_dcgm_names.py` fails if one appears). NVML constants are
resolved through pynvml, so a name nvml.h does not define fails the generation rather than
shipping a wrong id.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

import pynvml

from exporter.fields.catalog import (
    HANDLE,
    LINK,
    NVLINK_SCOPE_ALL_LINKS,
    P2P_BITMAP_PART,
    Arg,
    Call,
    Convert,
    FieldRefs,
    FieldSpec,
    GpmLink,
    MetricType,
    NvmlSource,
    Reader,
    Scope,
)

Row = Mapping[str, str]

_FIELD_VALUES = re.compile(r"nvmlDeviceGetFieldValues\(([\w +]+)\)(?: scopeId=(\w+))?")
_GPM = re.compile(r"nvmlGpmMetricsGet\((NVML_GPM_METRIC_\w+)\)")
_GPM_ID = re.compile(r"metric id (\d+)")
_GPM_LINK = re.compile(r"L0_[TR]X_PER_SEC\((\d+)\) \+ 2n .*L18_[TR]X_PER_SEC\((\d+)\)")
_CALL = re.compile(r"(nvml\w+)(?:\(([\w, =]*)\))?")
_LINK_ARG = re.compile(r"link=(\d+)")

_THROUGHPUT = "rate = (delta KiB)"
"""DCGM turns the NVLink KiB counters into MB/s rates; this exporter exports the counters
themselves (as it does for DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL): `rate()` gives the same."""

_FIELD_CONVERSIONS = {
    "none (raw field value; valueType converted to int64)": Convert.NONE,
    "none (raw field value; valueType converted to double)": Convert.NONE,
    "value.uiVal": Convert.NONE,
    "value.uiVal used regardless of valueType; > 200 -> blank": Convert.TEMPERATURE,
    "value.uiVal mW / 1000.0 -> W (double)": Convert.MILLIWATT_TO_WATT,
    "mJ / 1000 -> J": Convert.MILLIJOULE_TO_JOULE,
}
_GPM_CONVERSIONS = {
    "GPM percent 0..100 / 100 -> ratio 0..1 (double)": Convert.PERCENT_TO_RATIO,
    "GPM MiB/s * 1048576 -> bytes/s, truncated to int64": Convert.MIB_PER_S_TO_BYTES_PER_S,
    "GPM MiB/s * 1048576 -> bytes/s (int64)": Convert.MIB_PER_S_TO_BYTES_PER_S,
    "GPM percent 0..100 truncated to int64 (NOT divided by 100)": Convert.TRUNCATE,
    "GPM value truncated to int64 (cumulative since reboot)": Convert.TRUNCATE,
}

# pynvml's names where they differ from the C function the table names.
_PYNVML_FUNCTION = {
    "nvmlDeviceGetCount_v2": "nvmlDeviceGetCount",
}
# Functions whose pynvml wrapper already returns the one value the table picks.
_RETURNS_THE_VALUE = {"nvmlDeviceGetMarginTemperature": "marginTemperature"}
_NOT_READ: frozenset[str] = frozenset()
"""Calls no field is read through yet."""
_PPCNT = re.compile(r"nvmlDeviceReadWritePRM_v1\(PPCNT register group (0x[0-9A-F]+) [\w ]+\)")
_PPCNT_MEMBER = re.compile(r"raw TLV register read, big-endian unpack of (\w+?)(?:_high<<32\|low)?")
_PRM_COUNTER = re.compile(r"nvmlDeviceReadPRMCounters_v1\((NVML_PRM_COUNTER_ID_\w+)\)")
# Calls read by the device layer's struct reads (`exporter.devices.struct_reads`): a struct
# passed in, an answer in the return code, or a value composed from several calls.
_STRUCT_READS = frozenset({"nvmlDeviceGetPlatformInfo", "nvmlDeviceGetSramEccErrorStatus",
                           "nvmlDeviceGetUnrepairableMemoryFlag_v1",
                           "nvmlDeviceValidateInforom", "nvmlDeviceGetMaxMigDeviceCount"})
_STRUCT_CONVERSIONS: tuple[tuple[str, Pick, Convert], ...] = (
    ("NVML_SUCCESS -> 1, NVML_ERROR_CORRUPTED_INFOROM -> 0", None, Convert.NONE),
    ("max(that count, largest GI profile slice count)", None, Convert.NONE),
    ("1 if the NVML_GRID_LICENSE_FEATURE_CODE_VGPU feature", None, Convert.VGPU_LICENSED),
)
"""Conversions of struct reads and composed values: what to pick and how to convert it."""
_STRING_CONVERSIONS: Mapping[str, tuple[str, Pick, Convert]] = {
    "nvmlBrandType_t -> fixed string": ("nvmlDeviceGetBrand", None, Convert.BRAND_NAME),
    'ibGuid first 8 bytes as "0x%016llx"': ("nvmlDeviceGetPlatformInfo", "ibGuid",
                                           Convert.GUID_HEX),
    "chassisSerialNumber (16 bytes); empty or all 0xFF -> blank": (
        "nvmlDeviceGetPlatformInfo", "chassisSerialNumber", Convert.SERIAL_BYTES),
    # The whole answer: the UUID is only meaningful once registration completed.
    ".clusterUuid formatted as a GUID string": ("nvmlDeviceGetGpuFabricInfoV", None,
                                                Convert.UUID_BYTES),
    "formatted string: GPU-<uuid> | MIG-GPU-<uuid>/<gi> | MIG-GPU-<uuid>/<gi>/<ci>": (
        "nvmlDeviceGetUUID + nvmlDeviceGetGpuInstanceId + nvmlDeviceGetComputeInstanceId",
        None, Convert.CUDA_VISIBLE_DEVICES),
}
"""String fields whose NVML answer is not the string itself, by the table's conversion
(prefix): the call, the member and the conversion to text."""
_MEMORY_READER_PARTS = {".total": "total", ".free": "free", ".used": "used",
                        ".reserved": "reserved"}


def _constant(name: str) -> int:
    value = getattr(pynvml, name, None)
    if not isinstance(value, int):
        raise ValueError(f"{name} is not an NVML constant pynvml defines")
    return value


def _scope_of(row: Row, reader: Reader, part: NvmlSource) -> Scope:
    if row["scope"] == "link":
        return Scope.LINK
    if reader is Reader.P2P and part != P2P_BITMAP_PART:
        return Scope.PEER  # one series per GPU pair
    if reader in (Reader.GPM, Reader.MEMORY) or row["nvml_source"].startswith(
            "nvmlDeviceGetBAR1MemoryInfo"):
        # Read per MIG GPU instance under MIG (GPM on its scope, memory on its MIG device).
        return Scope.INSTANCE
    return Scope.GPU


def _type_of(row: Row) -> MetricType:
    text = " ".join((row["dcgm_name"], row["conversion"], row["notes"]))
    capacity = re.search(r"_(FB|BAR1)_TOTAL$", row["dcgm_name"]) is not None
    cumulative = ("cumulative" in text or (row["dcgm_name"].endswith("_TOTAL") and not capacity)
                  or _THROUGHPUT in row["conversion"]
                  or re.search(r"_ECC_[SD]BE_(VOL|AGG)_", row["dcgm_name"]) is not None
                  or row["dcgm_name"].endswith("_VIOLATION"))
    return MetricType.COUNTER if cumulative else MetricType.GAUGE


def _field_values(row: Row) -> tuple[NvmlSource, Convert, str] | None:
    match = _FIELD_VALUES.fullmatch(row["nvml_source"])
    if match is None:
        return None
    ids = [_constant(n.strip()) for n in match.group(1).split("+")]
    scope_text = match.group(2)
    unit = row["unit"]
    conversion = row["conversion"]
    if conversion.startswith(_THROUGHPUT):
        convert, unit = Convert.NONE, "KiB"
    elif conversion.startswith("decode: mantissa"):
        convert = Convert.BER
    elif conversion in _FIELD_CONVERSIONS:
        convert = _FIELD_CONVERSIONS[conversion]
    else:
        return None
    scope: Arg
    if scope_text == "link" or row["scope"] == "link":
        scope = LINK
    elif scope_text is not None:
        scope = int(scope_text, 0)
    elif "scopeId=0xFFFFFFFF" in row["notes"]:
        # NVLink5 counters: DCGM asks for the aggregate over all links.
        scope = NVLINK_SCOPE_ALL_LINKS
    else:
        scope = 0
    if len(ids) == 1 and scope == 0:
        return ids[0], convert, unit
    return FieldRefs(tuple((i, scope) for i in ids)), convert, unit


def _gpm(row: Row) -> tuple[NvmlSource, Convert, str] | None:
    convert = _GPM_CONVERSIONS.get(row["conversion"])
    if convert is None:
        return None
    link = _GPM_LINK.search(row["notes"])
    if link is not None:
        return GpmLink(int(link.group(1)), int(link.group(2))), convert, row["unit"]
    match = _GPM.fullmatch(row["nvml_source"])
    metric = _GPM_ID.search(row["notes"])
    if match is None or metric is None or int(metric.group(1)) != _constant(match.group(1)):
        return None
    unit = "ratio" if convert is Convert.PERCENT_TO_RATIO else row["unit"]
    return int(metric.group(1)), convert, unit


def _call_args(args_text: str | None, link_scope: bool) -> tuple[Arg, ...]:
    args: list[Arg] = []
    for arg in (a.strip() for a in (args_text or "").split(",") if a.strip()):
        lane = _LINK_ARG.fullmatch(arg)
        if lane is not None:
            args.append(int(lane.group(1)))
        elif arg == "link":
            args.append(LINK if link_scope else 0)
        else:
            args.append(_constant(arg))
    return tuple(args)


def _fabric(conversion: str) -> tuple[Reader, NvmlSource, Convert] | None:
    """Return the reader, source and conversion of the fabric registration fields (the cluster UUID,
    a string, is a label field)."""
    if conversion.startswith(".state/.status -> dcgmFabricManagerStatus_t"):
        return Reader.FABRIC, None, Convert.FABRIC_MANAGER_STATUS
    if conversion.startswith(".status converted to a dcgmReturn_t code"):
        return Reader.FABRIC, None, Convert.FABRIC_MANAGER_ERROR
    member = re.match(r"\.(cliqueId|healthMask|healthSummary)\b", conversion)
    return None if member is None else (Reader.FABRIC, member.group(1), Convert.NONE)


def _memory(conversion: str) -> tuple[Reader, NvmlSource, Convert] | None:
    if conversion.startswith("used / (total - reserved)"):
        return Reader.MEMORY, None, Convert.FB_USED_RATIO
    member = conversion.split(" ")[0]
    if member in _MEMORY_READER_PARTS and "1048576" in conversion:
        return Reader.MEMORY, _MEMORY_READER_PARTS[member], Convert.BYTES_TO_MIB
    return None


_READER_CALLS = {"nvmlDeviceGetMemoryInfo_v2": _memory, "nvmlDeviceGetGpuFabricInfoV": _fabric}
"""Calls a catalog reader makes already (and picks apart as it does)."""

Pick = str | int | None

_EXACT_CONVERSIONS: Mapping[str, tuple[Pick, Convert]] = {
    "none": (None, Convert.NONE),
    "none (cached at attach)": (None, Convert.NONE),
    "MHz * 1000000 -> Hz": (None, Convert.MHZ_TO_HZ),
    "isEnabled (first out-param)": (0, Convert.NONE),
    "current mode only": (0, Convert.NONE),
    "(major << 16) | minor": (None, Convert.COMPUTE_CAPABILITY),
}
_PREFIX_CONVERSIONS: tuple[tuple[str, Pick, Convert], ...] = (
    ("none; readings > 200", None, Convert.TEMPERATURE),
    ("mW / 1000 integer division", None, Convert.MILLIWATT_TO_WATT_FLOOR),
    ("minLimit mW / 1000 integer", 0, Convert.MILLIWATT_TO_WATT_FLOOR),
    ("maxLimit mW / 1000 integer", 1, Convert.MILLIWATT_TO_WATT_FLOOR),
    ("mW / 1000.0", None, Convert.MILLIWATT_TO_WATT),
    ("percent / 100 -> ratio", None, Convert.PERCENT_TO_RATIO),
    ("remap: NVML PROHIBITED(2)->1", None, Convert.COMPUTE_MODE),
    (".isSupportedDevice", "isSupportedDevice", Convert.NONE),
)
"""Conversion phrasings of plain calls: what to pick from the answer and how to convert it."""


def _by_prefix(table: tuple[tuple[str, Pick, Convert], ...], conversion: str
               ) -> tuple[Pick, Convert] | None:
    return next(((pick, convert) for prefix, pick, convert in table
                 if conversion.startswith(prefix)), None)


def _pick_and_convert(function: str, conversion: str) -> tuple[Pick, Convert] | None:
    if conversion in _EXACT_CONVERSIONS:
        return _EXACT_CONVERSIONS[conversion]
    found = _by_prefix(_PREFIX_CONVERSIONS, conversion)
    if found is not None:
        return found
    attribute = re.match(r"\.(\w+)", conversion)
    if attribute is None:
        return None
    name = attribute.group(1)
    if _RETURNS_THE_VALUE.get(function) == name:
        return None, Convert.NONE
    if "bytes / 1048576" in conversion:
        return name, Convert.BYTES_TO_MIB
    if re.fullmatch(r"\.\w+( bytes.*| \(signed\))?", conversion):
        return name, Convert.NONE
    return None


def _struct_pick(conversion: str) -> tuple[Pick, Convert] | None:
    """Return what a struct read yields: a member (`.slotNumber`, with 0xFF meaning "not
    reported" where the table says so), or the composed value itself."""
    found = _by_prefix(_STRUCT_CONVERSIONS, conversion)
    if found is not None:
        return found
    member = re.match(r"\.(\w+)(;| \(|$)", conversion)
    if member is None:
        return None
    unset = conversion.endswith("; 0xFF -> blank")
    return member.group(1), Convert.UNSET_0XFF if unset else Convert.NONE


def _prm(row: Row) -> Call | None:
    """Return a link's PRM register read: a PPCNT group (one call for all its members) or one
    counter, each as DCGM addresses the link's port (exporter.devices.prm)."""
    group = _PPCNT.fullmatch(row["nvml_source"])
    member = _PPCNT_MEMBER.fullmatch(row["conversion"])
    if group is not None and member is not None:
        return Call("nvmlDeviceReadWritePRM_v1", (HANDLE, LINK, int(group.group(1), 16)),
                    member.group(1))
    counter = _PRM_COUNTER.fullmatch(row["nvml_source"])
    if counter is not None and row["conversion"] == "counterValue uiVal/ulVal/ullVal":
        return Call("nvmlDeviceReadPRMCounters_v1", (HANDLE, LINK, _constant(counter.group(1))))
    return None


def _call(row: Row) -> tuple[Reader, NvmlSource, Convert] | None:
    """Return a plain call: the table's function with constant arguments, and a conversion of a
    known phrasing. Calls that take a struct or need more than one call return None."""
    prm = _prm(row)
    if prm is not None:
        return Reader.CALL, prm, Convert.NONE
    if row["conversion"].startswith("value = nvmlGpuP2PStatus_t for each ordered GPU pair"):
        return Reader.P2P, None, Convert.NONE
    if row["conversion"].startswith("bitmap: bit <DCGM gpuId of peer> set when status == "
                                    "NVML_P2P_STATUS_OK"):
        return Reader.P2P, P2P_BITMAP_PART, Convert.NONE
    match = _CALL.fullmatch(row["nvml_source"])
    if match is None:
        return None
    function, args_text = match.groups()
    conversion = row["conversion"]
    if function in _READER_CALLS:
        return _READER_CALLS[function](conversion)
    function = _PYNVML_FUNCTION.get(function, function)
    if function in _NOT_READ or not callable(getattr(pynvml, function, None)):
        return None
    if function in _STRUCT_READS or any(conversion.startswith(p) for p, _, _ in
                                         _STRUCT_CONVERSIONS):
        found = _struct_pick(conversion)
        return None if found is None else (Reader.CALL, Call(function, (HANDLE,), found[0]),
                                           found[1])
    args = _call_args(args_text, row["scope"] == "link")
    if function.startswith(("nvmlDevice", "nvmlGpm")) and function != "nvmlDeviceGetCount":
        args = (HANDLE, *args)
    word = re.fullmatch(r"word (\d) of a 4 x 64-bit (cpu|node)Set", conversion)
    if word is not None:
        # Four 64-bit words: CPUs / NUMA nodes 0-255.
        return Reader.CALL, Call(function, (HANDLE, 4, *args[1:]), int(word.group(1))), \
            Convert.NONE
    found = _pick_and_convert(function, conversion)
    if found is None:
        return None
    pick, convert = found
    return Reader.CALL, Call(function, args, pick), convert


_NOT_A_PLAIN_STRING = frozenset({
    "nvmlDeviceGetBrand",  # an enum DCGM spells with nvidia-smi's words (_STRING_CONVERSIONS)
    "nvmlSystemGetProcessName",  # DCGM asks for its own process's name
})


def _string(row: Row) -> Call | None:
    """Return a string field read with one plain call: served as a `label` field (the string is a
    label on the entity's other series, read once per enumeration)."""
    match = _CALL.fullmatch(row["nvml_source"])
    if match is None or row["conversion"] not in ("none", ".busId"):
        return None
    function, args_text = match.groups()
    if function in _NOT_A_PLAIN_STRING or function in _STRUCT_READS or not callable(
            getattr(pynvml, function, None)):
        return None
    args = _call_args(args_text, False)
    if function.startswith("nvmlDevice"):
        args = (HANDLE, *args)
    return Call(function, args, "busId" if row["conversion"] == ".busId" else None)


def _converted_string(row: Row) -> tuple[Call, Convert] | None:
    for prefix, (source, pick, convert) in _STRING_CONVERSIONS.items():
        if row["conversion"].startswith(prefix) and row["nvml_source"] == source:
            # The GPU's UUID, composed per entity by the device layer (CUDA_VISIBLE_DEVICES).
            function = source.split(" + ")[0]
            return Call(function, (HANDLE,), pick), convert
    return None


def recipe(row: Row, help_text: str) -> FieldSpec | None:
    """Return the spec serving the field of this canonical row, or None if it is not a plain
    read."""
    if row["dcgm_type"] == "string":
        converted = _converted_string(row)
        string, convert = converted if converted is not None else (_string(row), Convert.NONE)
        return None if string is None else FieldSpec(
            row["dcgm_name"], MetricType.LABEL, help_text, "", Reader.CALL, string, convert,
            Scope.GPU, default=False)
    if row["dcgm_type"] not in ("int64", "double"):
        return None
    source = row["nvml_source"]
    reader: Reader
    unit = row["unit"]
    if source.startswith("nvmlDeviceGetFieldValues("):
        found = _field_values(row)
        if found is None:
            return None
        part, convert, unit = found
        reader = Reader.FIELD_VALUES
    elif source.startswith("nvmlGpmMetricsGet("):
        gpm = _gpm(row)
        if gpm is None:
            return None
        part, convert, unit = gpm
        reader = Reader.GPM
    else:
        call = _call(row)
        if call is None:
            return None
        reader, part, convert = call
    return FieldSpec(row["dcgm_name"], _type_of(row), help_text, unit, reader, part, convert,
                     _scope_of(row, reader, part), default=False)

"""The simulated library speaks pynvml's ABI: same struct layouts, every symbol pynvml needs.

A struct whose C layout differs from pynvml's ctypes class would make the simulation lie in
exactly the place the tests rely on it, so sizes and member offsets are compared one by one.
"""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import pynvml

from exporter.devices.nvml_api import NvmlLib

from .harness import run_child

# nvml.h struct -> the pynvml class our calls hand to (or get back from) the library
STRUCTS: dict[str, str] = {
    "nvmlMemory_t": "c_nvmlMemory_t",
    "nvmlMemory_v2_t": "c_nvmlMemory_v2_t",
    "nvmlUtilization_t": "c_nvmlUtilization_t",
    "nvmlPciInfo_t": "nvmlPciInfo_t",
    "nvmlValue_t": "c_nvmlValue_t",
    "nvmlFieldValue_t": "c_nvmlFieldValue_t",
    "nvmlEventData_t": "c_nvmlEventData_t",
    "nvmlGpmMetric_t": "c_nvmlGpmMetric_t",
    "nvmlGpmMetricsGet_t": "c_nvmlGpmMetricsGet_t",
    "nvmlGpmSupport_t": "c_nvmlGpmSupport_t",
    "nvmlProcessInfo_t": "c_nvmlProcessInfo_v3_t",
    "nvmlProcessInfo_v2_t": "c_nvmlProcessInfo_v2_t",
    "nvmlProcessUtilizationSample_t": "c_nvmlProcessUtilizationSample_t",
    "nvmlDeviceAttributes_t": "c_nvmlDeviceAttributes",
    "nvmlGpuInstanceInfo_t": "c_nvmlGpuInstanceInfo_t",
    "nvmlGpuInstanceProfileInfo_v2_t": "c_nvmlGpuInstanceProfileInfo_v2_t",
}

# Calls outside the NvmlLib protocol (MIG attributes, GPU instance profile names), and the
# entry points pynvml itself needs.
EXTRA_CALLS = (
    "nvmlDeviceGetAttributes_v2",
    "nvmlDeviceGetGpuInstanceById",
    "nvmlGpuInstanceGetInfo",
    "nvmlDeviceGetGpuInstanceProfileInfoByIdV",
    "nvmlErrorString",
    "nvmlInitWithFlags",
)

_LOOKUP = re.compile(r'_nvmlGetFunctionPointer\("(\w+)"\)')
_CALL = re.compile(r"\b(nvml\w+)\(")


def pynvml_symbols(function: str, seen: set[str] | None = None) -> set[str]:
    """The C symbols pynvml's `function` looks up, following its calls to other wrappers."""
    seen = set() if seen is None else seen
    if function in seen:
        return set()
    seen.add(function)
    source = inspect.getsource(getattr(pynvml, function))
    symbols = set(_LOOKUP.findall(source))
    for callee in _CALL.findall(source):
        if callee != function and inspect.isfunction(getattr(pynvml, callee, None)):
            symbols |= pynvml_symbols(callee, seen)
    return symbols


def protocol_methods() -> list[str]:
    return sorted(name for name, _ in inspect.getmembers(NvmlLib, inspect.isfunction)
                  if name.startswith("nvml"))


def test_pynvml_symbol_scan_finds_versioned_names() -> None:
    # guards the scanner itself: pynvml resolves these calls to versioned symbols
    assert pynvml_symbols("nvmlDeviceGetCount") == {"nvmlDeviceGetCount_v2"}
    assert pynvml_symbols("nvmlDeviceGetPciInfo") == {"nvmlDeviceGetPciInfo_v3"}
    assert "nvmlDeviceGetMemoryInfo_v2" in pynvml_symbols("nvmlDeviceGetMemoryInfo")
    assert pynvml_symbols("nvmlInit") == {"nvmlInitWithFlags"}


def test_every_symbol_pynvml_needs_is_exported(nvmlsim_lib: Path) -> None:
    needed: set[str] = set()
    for method in protocol_methods():
        needed |= pynvml_symbols(method)
    for call in EXTRA_CALLS:
        needed |= pynvml_symbols(call) if hasattr(pynvml, call) else {call}
    assert {"nvmlDeviceGetHandleByIndex_v2", "nvmlEventSetWait_v2",
            "nvmlGpmMetricsGet"} <= needed
    result = run_child(nvmlsim_lib, f"""
        needed = {sorted(needed)!r}
        out["missing"] = [name for name in needed if not hasattr(sim.lib, name)]
        out["listed"] = sim.functions()
    """)
    assert result["missing"] == []
    # the control surface lists exactly what the library exports as NVML
    assert set(needed) <= set(result["listed"])


def test_struct_sizes_and_offsets_match_pynvml(nvmlsim_lib: Path) -> None:
    result = run_child(nvmlsim_lib, f"""
        structs = {STRUCTS!r}
        import ctypes
        rows = []
        for c_name, py_name in structs.items():
            cls = getattr(pynvml, py_name)
            rows.append([c_name, "<size>", sim.sizeof(c_name), ctypes.sizeof(cls)])
            for field in cls._fields_:
                name = field[0]
                rows.append([c_name, name, sim.offsetof(c_name, name), getattr(cls, name).offset])
        out["rows"] = rows
    """)
    rows = result["rows"]
    assert len(rows) > len(STRUCTS) * 2
    unprobed = [(s, f) for s, f, c, _ in rows if f != "<size>" and c == -1]
    assert unprobed == [], "pynvml members the library does not probe"
    mismatches = [(s, f, c, py) for s, f, c, py in rows if c != py]
    assert mismatches == [], "C layout differs from pynvml's ctypes class"


def test_no_internal_symbols_leak(nvmlsim_lib: Path) -> None:
    result = run_child(nvmlsim_lib, """
        out["internal"] = [n for n in ("sj_parse", "sim_sync", "g_sim", "sim_lock")
                           if hasattr(sim.lib, n)]
    """)
    assert result["internal"] == []

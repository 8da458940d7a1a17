"""ctypes handle on the simulated NVML's `nvmlsim_*` control functions.

Load it before pynvml's first call: `ctypes.CDLL(path)` maps the library under its SONAME
`libnvidia-ml.so.1`, and pynvml's own `CDLL("libnvidia-ml.so.1")` then gets that same object,
so the test and pynvml drive one simulated node. One process holds one such library for its
whole life (pynvml never unloads it); switch scenarios with `load_scenario`, not by reloading.

This module imports nothing from the project, so a child process can load it by path.
"""

from __future__ import annotations

import ctypes
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

LIBRARY_NAME = "libnvidia-ml.so.1"
NO_ID = 0xFFFFFFFF

RETURN_CODES: dict[str, int] = {
    "SUCCESS": 0,
    "UNINITIALIZED": 1,
    "INVALID_ARGUMENT": 2,
    "NOT_SUPPORTED": 3,
    "NO_PERMISSION": 4,
    "NOT_FOUND": 6,
    "INSUFFICIENT_SIZE": 7,
    "DRIVER_NOT_LOADED": 9,
    "TIMEOUT": 10,
    "LIBRARY_NOT_FOUND": 12,
    "FUNCTION_NOT_FOUND": 13,
    "GPU_IS_LOST": 15,
    "RESET_REQUIRED": 16,
    "LIB_RM_VERSION_MISMATCH": 18,
    "NO_DATA": 21,
    "ARGUMENT_VERSION_MISMATCH": 25,
    "NOT_READY": 27,
    "GPU_NOT_FOUND": 28,
    "UNKNOWN": 999,
}

Code = int | str
Scenario = Mapping[str, Any] | str


class NvmlSimError(RuntimeError):
    """A control call was refused; the message is the library's reason."""


def _code(code: Code) -> int:
    if isinstance(code, int):
        return code
    name = code.removeprefix("NVML_ERROR_")
    if name not in RETURN_CODES:
        raise ValueError(f"unknown NVML return code name {code!r}")
    return RETURN_CODES[name]


def _text(scenario: Scenario) -> bytes:
    return (scenario if isinstance(scenario, str) else json.dumps(scenario)).encode()


_SIGNATURES: dict[str, tuple[Any, list[Any]]] = {
    "nvmlsim_last_error": (ctypes.c_char_p, []),
    "nvmlsim_reset": (ctypes.c_int, []),
    "nvmlsim_load_scenario": (ctypes.c_int, [ctypes.c_char_p]),
    "nvmlsim_patch_device": (ctypes.c_int, [ctypes.c_uint, ctypes.c_char_p]),
    "nvmlsim_is_initialized": (ctypes.c_int, []),
    "nvmlsim_time": (ctypes.c_double, []),
    "nvmlsim_set_time": (ctypes.c_int, [ctypes.c_double]),
    "nvmlsim_advance": (ctypes.c_int, [ctypes.c_double]),
    "nvmlsim_set_value": (ctypes.c_int, [ctypes.c_uint, ctypes.c_char_p, ctypes.c_double]),
    "nvmlsim_set_gpm_value": (
        ctypes.c_int, [ctypes.c_uint, ctypes.c_int, ctypes.c_int, ctypes.c_uint, ctypes.c_double]),
    "nvmlsim_set_return": (ctypes.c_int, [ctypes.c_char_p, ctypes.c_int, ctypes.c_int]),
    "nvmlsim_set_field_return": (ctypes.c_int, [ctypes.c_uint, ctypes.c_uint, ctypes.c_int]),
    "nvmlsim_queue_xid": (
        ctypes.c_int,
        [ctypes.c_uint, ctypes.c_ulonglong, ctypes.c_uint, ctypes.c_uint, ctypes.c_double]),
    "nvmlsim_set_gpu_lost": (
        ctypes.c_int, [ctypes.c_uint, ctypes.c_longlong, ctypes.c_double, ctypes.c_double]),
    "nvmlsim_restore_gpu": (ctypes.c_int, [ctypes.c_uint]),
    "nvmlsim_is_gpu_lost": (ctypes.c_int, [ctypes.c_uint]),
    "nvmlsim_set_init_failure": (
        ctypes.c_int, [ctypes.c_int, ctypes.c_longlong, ctypes.c_double]),
    "nvmlsim_set_hang": (
        ctypes.c_int, [ctypes.c_char_p, ctypes.c_int, ctypes.c_double, ctypes.c_double]),
    "nvmlsim_end_hangs": (ctypes.c_int, []),
    "nvmlsim_hanging_calls": (ctypes.c_int, []),
    "nvmlsim_call_count": (ctypes.c_ulonglong, [ctypes.c_char_p, ctypes.c_int]),
    "nvmlsim_reset_call_counts": (None, []),
    "nvmlsim_function_count": (ctypes.c_int, []),
    "nvmlsim_function_name": (ctypes.c_char_p, [ctypes.c_int]),
    "nvmlsim_sizeof": (ctypes.c_ulong, [ctypes.c_char_p]),
    "nvmlsim_offsetof": (ctypes.c_long, [ctypes.c_char_p, ctypes.c_char_p]),
}


class NvmlSim:
    """The control surface of one loaded simulated library."""

    def __init__(self, library: Path) -> None:
        self.path = library
        self.lib = ctypes.CDLL(str(library))
        for name, (restype, argtypes) in _SIGNATURES.items():
            fn = getattr(self.lib, name)
            fn.restype = restype
            fn.argtypes = argtypes

    def _check(self, rc: int) -> None:
        if rc != 0:
            raise NvmlSimError(self.last_error())

    def last_error(self) -> str:
        raw = self.lib.nvmlsim_last_error()
        return raw.decode() if raw else ""

    # scenario
    def reset(self) -> None:
        """Back to a freshly loaded library: no scenario, not initialised, no event sets."""
        self._check(self.lib.nvmlsim_reset())

    def load_scenario(self, scenario: Scenario) -> None:
        """Replaces the node; nvmlInit state and event sets survive, handles change meaning."""
        self._check(self.lib.nvmlsim_load_scenario(_text(scenario)))

    def patch_device(self, gpu: int, patch: Scenario) -> None:
        """Applies device keys onto one GPU; a `mig` list replaces its MIG layout."""
        self._check(self.lib.nvmlsim_patch_device(gpu, _text(patch)))

    def is_initialized(self) -> int:
        """The nvmlInit reference count."""
        return int(self.lib.nvmlsim_is_initialized())

    # clock
    def time(self) -> float:
        return float(self.lib.nvmlsim_time())

    def set_time(self, t: float) -> None:
        """Switches to the manual clock at simulated time t (never backwards)."""
        self._check(self.lib.nvmlsim_set_time(t))

    def advance(self, dt: float) -> None:
        self._check(self.lib.nvmlsim_advance(dt))

    # values and faults
    def set_value(self, gpu: int, key: str, value: float) -> None:
        """Any numeric device key of the scenario format, e.g. ("power_w", 350)."""
        self._check(self.lib.nvmlsim_set_value(gpu, key.encode(), float(value)))

    def set_gpm_value(self, gpu: int, metric: int, value: float, *, gi: int | None = None,
                      mig_index: int | None = None) -> None:
        self._check(self.lib.nvmlsim_set_gpm_value(
            gpu, -1 if gi is None else gi, -1 if mig_index is None else mig_index, metric,
            float(value)))

    def set_return(self, function: str, code: Code, gpu: int | None = None) -> None:
        """Makes `function` return `code` (on one GPU, or everywhere); code 0 clears."""
        self._check(self.lib.nvmlsim_set_return(function.encode(), -1 if gpu is None else gpu,
                                                _code(code)))

    def set_field_return(self, gpu: int, field_id: int, code: Code) -> None:
        """Per-entry nvmlReturn of nvmlDeviceGetFieldValues for one field id; 0 clears."""
        self._check(self.lib.nvmlsim_set_field_return(gpu, field_id, _code(code)))

    def queue_xid(self, gpu: int, xid: int, *, gi: int | None = None, ci: int | None = None,
                  at: float | None = None) -> None:
        """An XID event, due now or at simulated time `at`; it reaches the event sets that
        have the GPU registered when it falls due."""
        self._check(self.lib.nvmlsim_queue_xid(
            gpu, xid, NO_ID if gi is None else gi, NO_ID if ci is None else ci,
            -1.0 if at is None else at))

    def set_gpu_lost(self, gpu: int, *, after_calls: int | None = None, at: float | None = None,
                     duration: float | None = None) -> None:
        """GPU_IS_LOST after that many more calls on the GPU, or from simulated time `at`
        (immediately on the next call when neither is given), for `duration` seconds or until
        `restore_gpu`."""
        if after_calls is None and at is None:
            after_calls = 0
        self._check(self.lib.nvmlsim_set_gpu_lost(
            gpu, -1 if after_calls is None else after_calls, -1.0 if at is None else at,
            -1.0 if duration is None else duration))

    def restore_gpu(self, gpu: int) -> None:
        self._check(self.lib.nvmlsim_restore_gpu(gpu))

    def is_gpu_lost(self, gpu: int) -> bool:
        return bool(self.lib.nvmlsim_is_gpu_lost(gpu))

    def set_init_failure(self, code: Code, *, count: int | None = None,
                         until: float | None = None) -> None:
        """nvmlInit fails with `code`: for the next `count` attempts, before simulated time
        `until`, or (neither given) until cleared."""
        self._check(self.lib.nvmlsim_set_init_failure(
            _code(code), -1 if count is None else count, -1.0 if until is None else until))

    def clear_init_failure(self) -> None:
        self._check(self.lib.nvmlsim_set_init_failure(0, -1, -1.0))

    def set_hang(self, function: str, duration: float, *, gpu: int | None = None,
                 at: float = 0.0) -> None:
        """From simulated time `at` on, each call of `function` (on GPU `gpu`, or on every GPU
        and the device-less calls) blocks for `duration` seconds of wall time before it
        answers; the library's lock is free meanwhile. Adds to the hangs already armed."""
        self._check(self.lib.nvmlsim_set_hang(function.encode(), -1 if gpu is None else gpu,
                                              float(at), float(duration)))

    def end_hangs(self) -> int:
        """Disarms every hang and wakes the calls blocked in one (they answer at once);
        returns how many were blocked."""
        return int(self.lib.nvmlsim_end_hangs())

    def hanging_calls(self) -> int:
        """Calls blocked in a hang right now."""
        return int(self.lib.nvmlsim_hanging_calls())

    # accounting and layout
    def call_count(self, function: str | None = None, gpu: int | None = None) -> int:
        """Calls of one exported function (or all), on one GPU (MIG handles count for their
        parent) or everywhere."""
        if function is not None and function not in self.functions():
            raise ValueError(f"{function!r} is not exported by the simulated library")
        return int(self.lib.nvmlsim_call_count(
            None if function is None else function.encode(), -1 if gpu is None else gpu))

    def reset_call_counts(self) -> None:
        self.lib.nvmlsim_reset_call_counts()

    def functions(self) -> list[str]:
        """The NVML entry points the library exports."""
        names = []
        for i in range(self.lib.nvmlsim_function_count()):
            raw = self.lib.nvmlsim_function_name(i)
            names.append(raw.decode())
        return names

    def sizeof(self, struct_name: str) -> int:
        """C sizeof of an nvml.h struct the library was compiled against (0: not probed)."""
        return int(self.lib.nvmlsim_sizeof(struct_name.encode()))

    def offsetof(self, struct_name: str, field: str) -> int:
        """C offsetof of a member (-1: not probed)."""
        return int(self.lib.nvmlsim_offsetof(struct_name.encode(), field.encode()))

    def shares_library_with(self, cdll: ctypes.CDLL) -> bool:
        """Whether another CDLL (e.g. `pynvml.nvmlLib`) is this very library."""
        ours = ctypes.cast(self.lib.nvmlInitWithFlags, ctypes.c_void_p).value
        theirs = ctypes.cast(cdll.nvmlInitWithFlags, ctypes.c_void_p).value
        return ours == theirs


_loaded: NvmlSim | None = None


def load(lib_dir: Path | str | None = None) -> NvmlSim:
    """Loads the library from `lib_dir` (default: $NVMLSIM_LIB_DIR) once per process."""
    global _loaded
    if _loaded is not None:
        return _loaded
    directory = lib_dir if lib_dir is not None else os.environ.get("NVMLSIM_LIB_DIR")
    if directory is None:
        raise NvmlSimError("no library directory given and NVMLSIM_LIB_DIR is not set")
    path = Path(directory) / LIBRARY_NAME
    if not path.is_file():
        raise NvmlSimError(f"{path} does not exist; build it with `python -m tests.nvmlsim.build`")
    _loaded = NvmlSim(path)
    return _loaded

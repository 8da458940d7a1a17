"""Runs test code in a child process that holds the simulated NVML.

A process can hold only one `libnvidia-ml.so.1` and pynvml never unloads it, so every
scenario runs in its own interpreter (the pytest process itself never loads the library:
other tests in the session expect a machine without NVML). The child gets:

- `sim`: the `control.NvmlSim` of the loaded library (loaded before pynvml's first call);
- `pynvml`: the unmodified bindings, which find the same library by its SONAME;
- `out`: a dict the code fills; it comes back to the test as JSON.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Mapping
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
PROJECT_ROOT = HERE.parent.parent
RESULT_MARK = "NVMLSIM-RESULT "

_PRELUDE = """\
import json, sys
sys.path.insert(0, {here!r})
import control
sim = control.load({lib_dir!r})
import pynvml
out = {{}}
"""

_EPILOGUE = """
print({mark!r} + json.dumps(out), flush=True)
"""


class ChildFailed(AssertionError):
    """The child exited non-zero or printed no result; carries its output."""


def child_env(lib_dir: Path, scenario_file: Path | None = None,
              extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """Environment for a process that should find the simulated library."""
    env = {k: v for k, v in os.environ.items() if k != "NVMLSIM_SCENARIO"}
    env["LD_LIBRARY_PATH"] = os.pathsep.join(
        p for p in (str(lib_dir), os.environ.get("LD_LIBRARY_PATH", "")) if p)
    env["NVMLSIM_LIB_DIR"] = str(lib_dir)
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(PROJECT_ROOT), os.environ.get("PYTHONPATH", "")) if p)
    if scenario_file is not None:
        env["NVMLSIM_SCENARIO"] = str(scenario_file)
    env.update(extra or {})
    return env


def write_scenario(directory: Path, scenario: Mapping[str, Any] | str,
                   name: str = "scenario.json") -> Path:
    path = directory / name
    path.write_text(scenario if isinstance(scenario, str) else json.dumps(scenario, indent=1))
    return path


def run_child(lib_dir: Path, code: str, *, scenario_file: Path | None = None,
              env: Mapping[str, str] | None = None, timeout: float = 60.0) -> dict[str, Any]:
    """Runs `code` (dedented) in a fresh interpreter and returns its `out` dict."""
    script = (_PRELUDE.format(here=str(HERE), lib_dir=str(lib_dir))
              + textwrap.dedent(code)
              + _EPILOGUE.format(mark=RESULT_MARK))
    proc = subprocess.run(
        [sys.executable, "-c", script], env=child_env(lib_dir, scenario_file, env),
        cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=timeout, check=False)
    for line in proc.stdout.splitlines():
        if line.startswith(RESULT_MARK) and proc.returncode == 0:
            result: dict[str, Any] = json.loads(line[len(RESULT_MARK):])
            result["_stderr"] = proc.stderr
            return result
    raise ChildFailed(
        f"child exited {proc.returncode}\n--- stdout\n{proc.stdout}\n--- stderr\n{proc.stderr}")

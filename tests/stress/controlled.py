"""The exporter with a hand on its simulated driver: `python -m tests.stress.controlled serve ...`.

A process holds one `libnvidia-ml.so.1`, so a test cannot reach the simulated driver of an
exporter it started. This launcher maps the simulated library first (from $NVMLSIM_LIB_DIR;
pynvml then finds the same one by its SONAME), starts a thread that applies control calls read
from stdin, one JSON object a line (`{"call": "set_gpu_lost", "args": [1], "kwargs": {}}`),
and then runs the exporter's own `main` unchanged in the main thread. A call that fails ends
the process with status 3, so a test never goes on believing a fault was injected.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import traceback
from typing import Any

from tests.nvmlsim import control

CONTROL_FAILED = 3


def _apply_commands(sim: control.NvmlSim) -> None:
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            command: dict[str, Any] = json.loads(line)
            method = getattr(sim, command["call"])
            method(*command.get("args", ()), **command.get("kwargs", {}))
        except Exception:
            traceback.print_exc()
            print(f"control call failed: {line.strip()}", file=sys.stderr, flush=True)
            os._exit(CONTROL_FAILED)


def command_line(call: str, *args: Any, **kwargs: Any) -> str:
    """One control call as the line this launcher reads."""
    return json.dumps({"call": call, "args": list(args), "kwargs": kwargs}) + "\n"


def main() -> int:
    sim = control.load()
    threading.Thread(target=_apply_commands, args=(sim,), name="sim-control",
                     daemon=True).start()
    from exporter.cli import main as exporter_main

    return exporter_main(sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())

"""What the NVIDIA container toolkit gives a GPU container, with the simulated driver.

The toolkit (or CDI) bind-mounts the driver's `libnvidia-ml.so.1` into the container's
library directory, `/usr/lib/<triplet>/` on a Debian-based image, where the dynamic loader
finds it by its default search path. Here the simulated library (tests/nvmlsim) is mounted
there instead, with the scenario naming the node's GPUs beside it (`NVMLSIM_SCENARIO`, the
simulator's own setting). The library is built for this machine's architecture.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.support.container import Bind

LIBRARY_DIRS = {"amd64": "/usr/lib/x86_64-linux-gnu", "arm64": "/usr/lib/aarch64-linux-gnu"}
SCENARIO_IN_CONTAINER = "/run/nvmlsim/scenario.json"


def nvml_injection(lib_dir: Path, scenario: dict[str, Any], scratch: Path,
                   arch: str = "amd64") -> tuple[tuple[Bind, ...], dict[str, str]]:
    """(the binds, the env) that put the simulated NVML with `scenario` into a container;
    `scratch` is a host directory for the scenario file."""
    scenario_file = scratch / "nvmlsim-scenario.json"
    scenario_file.write_text(json.dumps(scenario))
    scenario_file.chmod(0o644)
    binds = (Bind(lib_dir / "libnvidia-ml.so.1", f"{LIBRARY_DIRS[arch]}/libnvidia-ml.so.1"),
             Bind(scenario_file, SCENARIO_IN_CONTAINER))
    return binds, {"NVMLSIM_SCENARIO": SCENARIO_IN_CONTAINER}

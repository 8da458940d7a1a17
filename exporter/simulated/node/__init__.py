"""The built-in simulated node: pynvml's call surface over plausible, seeded GPU dynamics.

`SimNvml` stands in for the `pynvml` module below the real NVML backend, so the demo and most
tests drive exactly the code a GPU node runs. Profiles model real boards (figures from
nvidia-smi captures), `--sim.fault` specs inject XIDs, lost GPUs, a missing driver and more.
`call_table` describes every call a simulated GPU answers from plain values once, for this
node and for the simulated `libnvidia-ml.so.1` the tests build (tests/nvmlsim).
"""

from exporter.simulated.node.fault_specs import (
    GRAMMAR,
    EccFault,
    ExitFault,
    Fault,
    FbRampFault,
    GpmAdminOnlyFault,
    IdleFault,
    LostFault,
    NvlinkFault,
    NvmlDownFault,
    PowerBrakeFault,
    RemapFault,
    ResetFault,
    ThermalFault,
    Window,
    XidFault,
    parse_fault,
)
from exporter.simulated.node.library import GPM_METRIC_IDS, SimGpu, SimMigDevice, SimNvml
from exporter.simulated.node.profiles import PROFILES, Profile, profile_names

__all__ = [
    "GPM_METRIC_IDS",
    "GRAMMAR",
    "PROFILES",
    "EccFault",
    "ExitFault",
    "Fault",
    "FbRampFault",
    "GpmAdminOnlyFault",
    "IdleFault",
    "LostFault",
    "NvlinkFault",
    "NvmlDownFault",
    "PowerBrakeFault",
    "Profile",
    "RemapFault",
    "ResetFault",
    "SimGpu",
    "SimMigDevice",
    "SimNvml",
    "ThermalFault",
    "Window",
    "XidFault",
    "parse_fault",
    "profile_names",
]

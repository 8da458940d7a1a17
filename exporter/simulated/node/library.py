"""`SimNvml`: pynvml's function surface answered by a simulated node.

Pass it where the `pynvml` module would go; see `core` for how handles behave. The calls
answered from plain values are the call table's (`call_table`, answered by `api_table`); the
other modules answer the calls `call_table.COMPUTED` lists.
"""

from __future__ import annotations

from exporter.simulated.node.api_events import EventCalls
from exporter.simulated.node.api_gpm import GPM_METRIC_IDS, GpmCalls
from exporter.simulated.node.api_identity import IdentityCalls
from exporter.simulated.node.api_prm import PrmCalls
from exporter.simulated.node.api_processes import ProcessCalls
from exporter.simulated.node.api_table import TableCalls
from exporter.simulated.node.api_values import ValueCalls
from exporter.simulated.node.core import SimGpu, SimMigDevice

__all__ = ["GPM_METRIC_IDS", "SimGpu", "SimMigDevice", "SimNvml"]


class SimNvml(IdentityCalls, ValueCalls, TableCalls, PrmCalls, GpmCalls, EventCalls,
              ProcessCalls):
    """A simulated node answering pynvml's calls; thread-safe.

    `SimNvml(profile, *, seed=0, faults=(), clock=time.monotonic, mig_config=None)`:
    simulated time is `clock()` minus its value at construction; values are a pure function
    of (profile, seed, simulated time) and the faults. `mig_config` (`FILE[:NAME]`) applies a
    mig-parted config to the profile's GPUs first (`mig_config.apply_mig_config`). `calls`
    counts calls per pynvml function name.
    """

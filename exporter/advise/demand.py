"""What each holder used over the window and what it holds now: the advisor's input.

A holder is one pod on one device (a whole GPU or a MIG instance) of one node, as
dcgm-exporter's series name it: `namespace`, `pod`, `hostname` (or 4.8.2's `Hostname`), `UUID`,
`GPU_I_ID`. Everything the fitting and the packing decide follows from these rows, so tests
and the benchmark build them directly.
"""

from __future__ import annotations

from dataclasses import dataclass

WHOLE = "whole"
SHARED = "shared"
TIME_SLICING = "time-slicing"
UNNAMED_INSTANCE = "mig"
"""What a MIG instance whose series carry no `GPU_I_PROFILE` holds now."""


@dataclass(frozen=True, slots=True, order=True)
class Holder:
    """One pod on one device (a whole GPU or a MIG instance) of one node, with what it used over
    the window and what it holds now; the advice is decided from these alone."""

    namespace: str
    pod: str
    node: str
    gpu_model: str
    """`modelName` of the GPU (a MIG instance's parent)."""
    uuid: str
    gpu_instance: str
    """`GPU_I_ID`; "" on a whole GPU."""
    now: str
    """`whole`, the MIG profile held (`3g.40gb`), or `shared` (several pods on one device)."""
    samples: int
    """Framebuffer samples of the holding in the window."""
    hours: float
    """Time held: steps with a sample times the step."""
    peak_framebuffer_mib: float
    """The quantile of per-step maxima (`--memory-quantile`); a shared device's split evenly
    between the pods on it at each step."""
    compute_need: float | None
    """Part of a whole GPU's compute it kept busy (0-1), the quantile of per-step means
    (`--compute-quantile`); None: no activity series."""
    activity_source: str = ""
    """`profiling` (DCGM_FI_PROF_GR_ENGINE_ACTIVE) or `utilisation` (DCGM_FI_DEV_GPU_UTIL)."""
    sharers: int = 1
    """Most pods seen on the device at one step."""

    @property
    def device(self) -> tuple[str, str]:
        """Return the device held as its GPU's UUID and its MIG instance id ("" on a whole GPU),
        the pair that tells pods sharing one device from pods on different devices."""
        return (self.uuid, self.gpu_instance)

    @property
    def where(self) -> str:
        """Return the holder as a message names it: namespace/pod on node."""
        return f"{self.namespace}/{self.pod} on {self.node}"

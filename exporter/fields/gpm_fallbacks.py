"""What a GPU without GPM (one older than Hopper) has in place of each GPM field the catalog
serves.

GPM, the source of every `DCGM_FI_PROF_*` field, exists on Hopper and newer only; A100, A10G,
L4, L40S and T4 serve none of them. For some GPM fields NVML has a counterpart that measures
the same thing on every GPU, and the generated artifacts read it where the GPM series is
absent (`exporter.promql.measures` builds that PromQL). The others have none: a panel over them
says that it needs Hopper or newer, and `docs/metrics.md` lists them up front.

Facts only, no PromQL: the docs generator (this layer) and the PromQL building blocks (the
layer above) read the same table.
"""

from __future__ import annotations

from dataclasses import dataclass

GR_ENGINE_ACTIVE = "DCGM_FI_PROF_GR_ENGINE_ACTIVE"
DRAM_ACTIVE = "DCGM_FI_PROF_DRAM_ACTIVE"
NVLINK_TX_BYTES = "DCGM_FI_PROF_NVLINK_TX_BYTES"
NVLINK_RX_BYTES = "DCGM_FI_PROF_NVLINK_RX_BYTES"
GPU_UTIL = "DCGM_FI_DEV_GPU_UTIL"
MEM_COPY_UTIL = "DCGM_FI_DEV_MEM_COPY_UTIL"
NVLINK_BANDWIDTH_TOTAL = "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL"


@dataclass(frozen=True, slots=True)
class Counterpart:
    """An NVML-served field measuring what a GPM field measures, on every GPU."""

    field: str
    scale: float
    """Factor from its unit to the GPM field's (percent -> ratio: 0.01; KiB -> bytes: 1024)."""
    counter: bool = False
    """A cumulative counter: its rate is the GPM field's per-second value."""
    describe: str = ""
    """How the GPM value follows from it, for the docs."""


@dataclass(frozen=True, slots=True)
class GpmMeasure:
    """One quantity GPM measures, and what older GPUs have in its place."""

    key: str
    meaning: str
    gpm: tuple[str, ...]
    """The GPM fields whose sum is the quantity (NVLink: sent plus received)."""
    unit: str
    nvml: Counterpart | None
    without: str = ""
    """Where `nvml` is None: why older GPUs have no counterpart."""


NO_NVML = "NVML has no counterpart"
NO_PCIE = ("NVML's PCIe throughput (`nvmlDeviceGetPcieThroughput`) blocks for a 20 ms sample "
           "per GPU and direction, so this exporter does not read it, and DCGM 4 answers "
           "NOT_SUPPORTED for `DCGM_FI_DEV_PCIE_TX/RX_THROUGHPUT`")

GR_ENGINE = GpmMeasure(
    "gr-engine", "graphics/compute engine activity", (GR_ENGINE_ACTIVE,), "ratio",
    Counterpart(GPU_UTIL, 0.01, describe="`DCGM_FI_DEV_GPU_UTIL / 100` (share of time a "
                                         "kernel ran)"))
DRAM = GpmMeasure(
    "dram", "memory-interface activity", (DRAM_ACTIVE,), "ratio",
    Counterpart(MEM_COPY_UTIL, 0.01, describe="`DCGM_FI_DEV_MEM_COPY_UTIL / 100` (share of "
                                              "time device memory was read or written)"))
NVLINK_BYTES = GpmMeasure(
    "nvlink-bytes", "NVLink payload bytes per second, sent plus received",
    (NVLINK_TX_BYTES, NVLINK_RX_BYTES), "B/s",
    Counterpart(NVLINK_BANDWIDTH_TOTAL, 1024.0, counter=True,
                describe="`rate(DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL[..]) * 1024`, sent plus "
                         "received together (NVML has no per-direction total)"))


def _gpm_only(key: str, meaning: str, field: str, unit: str, why: str = NO_NVML
              ) -> GpmMeasure:
    return GpmMeasure(key, meaning, (field,), unit, None, why)


MEASURES: tuple[GpmMeasure, ...] = (
    GR_ENGINE,
    DRAM,
    NVLINK_BYTES,
    _gpm_only("sm-active", "share of cycles an SM had a warp", "DCGM_FI_PROF_SM_ACTIVE",
              "ratio"),
    _gpm_only("sm-occupancy", "resident warps over capacity", "DCGM_FI_PROF_SM_OCCUPANCY",
              "ratio"),
    _gpm_only("tensor", "tensor pipe activity", "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "ratio"),
    _gpm_only("fp64", "FP64 pipe activity", "DCGM_FI_PROF_PIPE_FP64_ACTIVE", "ratio"),
    _gpm_only("fp32", "FP32 pipe activity", "DCGM_FI_PROF_PIPE_FP32_ACTIVE", "ratio"),
    _gpm_only("fp16", "FP16 pipe activity", "DCGM_FI_PROF_PIPE_FP16_ACTIVE", "ratio"),
    _gpm_only("pcie-tx", "PCIe bytes sent per second", "DCGM_FI_PROF_PCIE_TX_BYTES", "B/s",
              NO_PCIE),
    _gpm_only("pcie-rx", "PCIe bytes received per second", "DCGM_FI_PROF_PCIE_RX_BYTES",
              "B/s", NO_PCIE),
)
"""Every GPM field of the catalog, each in exactly one measure (a test checks it)."""

GPM_ONLY: frozenset[str] = frozenset(f for m in MEASURES if m.nvml is None for f in m.gpm)
"""GPM fields nothing stands in for before Hopper."""

"""What a GPU without GPM (one older than Hopper) has in place of each GPM field the catalog
serves.

GPM, the source of every `DCGM_FI_PROF_*` field, exists on Hopper and newer only. For some GPM
fields NVML measures the same quantity on older GPUs (A100, A10G, L4, L40S, T4) too, and this
table says so twice over: `Served`, how the exporter itself serves the `DCGM_FI_PROF_*` row
there from NVML (unless `--no-prof-counterparts`), and `Counterpart`, the NVML field the
generated artifacts read where the GPM series is absent anyway (counterparts switched off, or
dcgm-exporter on a GPU its profiling module skips; `exporter.promql.measures` builds that
PromQL). The others have neither: a panel over them says that it needs Hopper or newer, and
`docs/metrics.md` lists them up front.

Facts only, no PromQL and no NVML calls: the docs generator (this layer), the device reader
and the PromQL building blocks (the layers above) read the same table.
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
class Served:
    """How the exporter serves one GPM field on a GPU without GPM, from an NVML reading of
    the same quantity, in DCGM's unit."""

    field: str
    """The GPM field (its catalog name) served this way."""
    samples: int | None
    """An `nvmlSamplingType_t`: the mean of the driver's samples since the previous poll
    (percent), or None for a counter."""
    counter: tuple[int, int] | None
    """An `nvmlDeviceGetFieldValues` entry (field id, scope id) whose increase over the poll
    interval, per second, is the value; None for samples."""
    scale: float
    """Factor from NVML's unit to DCGM's (percent -> ratio: 0.01; KiB -> bytes: 1024)."""
    nvml: str
    """The NVML source, for the docs."""
    sampling: str
    """How its sampling differs from DCGM's, for the docs."""


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
    """Where `nvml` is None: why the artifacts have no NVML field to fall back on."""
    served: tuple[Served, ...] = ()
    """The GPM fields the exporter itself serves on GPUs without GPM, and how."""


NO_NVML = "NVML has no counterpart"
NO_PCIE = ("no NVML field to fall back on: NVML's PCIe throughput "
           "(`nvmlDeviceGetPcieThroughput`) blocks for a 20 ms sample per GPU and direction, "
           "and DCGM 4 answers NOT_SUPPORTED for `DCGM_FI_DEV_PCIE_TX/RX_THROUGHPUT`")

NVML_GPU_UTILIZATION_SAMPLES = 1
NVML_MEMORY_UTILIZATION_SAMPLES = 2
NVML_FI_DEV_PCIE_COUNT_TX_BYTES = 197
NVML_FI_DEV_PCIE_COUNT_RX_BYTES = 198
NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX = 138
NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX = 139
ALL_LINKS = 0xFFFFFFFF
"""The scope id of an NVLink field value summed over every link of the GPU."""

_SAMPLED = ("the mean of the driver's utilisation samples (about one every 1/6 s) taken "
            "since the previous poll; DCGM's profiling module reads hardware counters over "
            "its own 1 s watch interval. No new sample since the last poll: no value")
_COUNTED = ("the counter's increase between two polls over the seconds between them, so an "
            "average over the poll interval; DCGM's profiling module samples at its own "
            "rate. The first poll, and a poll where the counter wrapped or went back, have "
            "no value")


def _sampled(field: str, sampling_type: int, name: str) -> Served:
    return Served(field, sampling_type, None, 0.01,
                  f"`nvmlDeviceGetSamples({name})` / 100", _SAMPLED)


def _counted(field: str, field_id: int, scope_id: int, scale: float, name: str) -> Served:
    return Served(field, None, (field_id, scope_id), scale, name, _COUNTED)


PCIE_TX_BYTES = "DCGM_FI_PROF_PCIE_TX_BYTES"
PCIE_RX_BYTES = "DCGM_FI_PROF_PCIE_RX_BYTES"

GR_ENGINE = GpmMeasure(
    "gr-engine", "graphics/compute engine activity", (GR_ENGINE_ACTIVE,), "ratio",
    Counterpart(GPU_UTIL, 0.01, describe="`DCGM_FI_DEV_GPU_UTIL / 100` (share of time a "
                                         "kernel ran)"),
    served=(_sampled(GR_ENGINE_ACTIVE, NVML_GPU_UTILIZATION_SAMPLES,
                     "NVML_GPU_UTILIZATION_SAMPLES"),))
DRAM = GpmMeasure(
    "dram", "memory-interface activity", (DRAM_ACTIVE,), "ratio",
    Counterpart(MEM_COPY_UTIL, 0.01, describe="`DCGM_FI_DEV_MEM_COPY_UTIL / 100` (share of "
                                              "time device memory was read or written)"),
    served=(_sampled(DRAM_ACTIVE, NVML_MEMORY_UTILIZATION_SAMPLES,
                     "NVML_MEMORY_UTILIZATION_SAMPLES"),))
NVLINK_BYTES = GpmMeasure(
    "nvlink-bytes", "NVLink payload bytes per second, sent plus received",
    (NVLINK_TX_BYTES, NVLINK_RX_BYTES), "B/s",
    Counterpart(NVLINK_BANDWIDTH_TOTAL, 1024.0, counter=True,
                describe="`rate(DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL[..]) * 1024`, sent plus "
                         "received together (no per-direction NVML field is served)"),
    served=(_counted(NVLINK_TX_BYTES, NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, ALL_LINKS, 1024.0,
                     "`NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX` (KiB, all links) x 1024 per s"),
            _counted(NVLINK_RX_BYTES, NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX, ALL_LINKS, 1024.0,
                     "`NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX` (KiB, all links) x 1024 per s")))


def _gpm_only(key: str, meaning: str, field: str, unit: str, why: str = NO_NVML,
              served: tuple[Served, ...] = ()) -> GpmMeasure:
    return GpmMeasure(key, meaning, (field,), unit, None, why, served)


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
    _gpm_only("pcie-tx", "PCIe bytes sent per second", PCIE_TX_BYTES, "B/s", NO_PCIE,
              (_counted(PCIE_TX_BYTES, NVML_FI_DEV_PCIE_COUNT_TX_BYTES, 0, 1.0,
                        "`NVML_FI_DEV_PCIE_COUNT_TX_BYTES` (bytes) per s"),)),
    _gpm_only("pcie-rx", "PCIe bytes received per second", PCIE_RX_BYTES, "B/s", NO_PCIE,
              (_counted(PCIE_RX_BYTES, NVML_FI_DEV_PCIE_COUNT_RX_BYTES, 0, 1.0,
                        "`NVML_FI_DEV_PCIE_COUNT_RX_BYTES` (bytes) per s"),)),
)
"""Every GPM field of the catalog, each in exactly one measure (a test checks it)."""

GPM_ONLY: frozenset[str] = frozenset(f for m in MEASURES if m.nvml is None for f in m.gpm)
"""GPM fields the artifacts have no NVML field to fall back on for."""

SERVED: dict[str, Served] = {s.field: s for m in MEASURES for s in m.served}
"""By GPM field: how the exporter serves it on a GPU without GPM."""

NO_COUNTERPART: frozenset[str] = GPM_ONLY - SERVED.keys()
"""GPM fields nothing stands in for before Hopper: absent there, whatever the options."""

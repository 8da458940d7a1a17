"""A synthetic day of dcgm-exporter series whose best partitioning is known, for a real
Prometheus (backfilled with promtool) and a real VictoriaMetrics (imported).

The fleet, worked out by hand with the profile table's H100 and L4 figures:

- `h100-a` (4 GPUs) and `h100-b` (5 GPUs, one idle): eight pods on whole H100s. Two fit
  3g.40gb (30,000 MiB, 30 % busy), two 2g.20gb (15,000 MiB, 20 %), one 1g.20gb (8,000 MiB
  with a 15,000 MiB spike for one scrape every hour, 10 %: the per-step maxima keep the
  spike, which 1g.10gb would not hold), one 1g.10gb (6,000 MiB, 5 %), one nothing smaller
  than the GPU (70,000 MiB, 80 %), one 1g.10gb (5,000, 5 %).
- `h100-c` (1 GPU in MIG mode): `steady` on 1g.10gb, which it fits (unchanged), and
  `brief`, held for 15 minutes (15 samples: not advised, so it keeps its 1g.10gb).
- `l4-a` (4 L4s, no MIG, no profiling: activity from DCGM_FI_DEV_GPU_UTIL): four pods of
  4,000 MiB at 15 % each; 4,400 MiB with headroom is under a fifth of 23,034 MiB and 15 %
  under a sixth: each fits 1/5 of a GPU.
- `l4-b` (1 L4) time-sliced today between `pair-a` and `pair-b`: the device's 8,000 MiB and
  30 % split evenly are the same 4,000 MiB and 15 % each.

The six L4 pods fit up to 5 replicas each: 2 GPUs at 3, 4 or 5 replicas (3 at 2), so the
smallest of those, 3, is advised (`replicas: 3`), both GPUs on `l4-a`.

MIG demand: 2 x 3g.40gb, 2 x 2g.20gb, 1 x 1g.20gb, 4 x 1g.10gb (two advised, `steady` and
`brief` kept): 15 compute slices, so at least 3 GPUs, and 3 suffice; with the whole one,
the H100 pool needs 4 of the 9 GPUs held now. The L4 pool needs 2 of 5. In all, 14 held,
6 needed, 8 freed.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from tests.report.history import Series

START = 1_760_000_400.0
"""2025-10-09T09:00:00Z."""
END = START + 86_400.0
INTERVAL_S = 60.0
H100 = "NVIDIA H100 80GB HBM3"
L4 = "NVIDIA L4"


@dataclass(frozen=True, slots=True)
class Pod:
    namespace: str
    pod: str
    node: str
    gpu: int
    model: str
    framebuffer_mib: float
    activity: float
    profile: str = ""
    gpu_instance: str = ""
    spike_mib: float | None = None
    """Framebuffer at one scrape every hour."""
    start: float = START
    end: float = END

    @property
    def uuid(self) -> str:
        return f"GPU-{self.node}-{self.gpu:02d}-0000-synthetic"


def _uuid(node: str, gpu: int) -> str:
    return f"GPU-{node}-{gpu:02d}-0000-synthetic"


PODS: tuple[Pod, ...] = (
    Pod("ml", "big-a", "h100-a", 0, H100, 30_000, 0.30),
    Pod("ml", "big-b", "h100-a", 1, H100, 30_000, 0.30),
    Pod("ml", "mid-a", "h100-a", 2, H100, 15_000, 0.20),
    Pod("ml", "mid-b", "h100-a", 3, H100, 15_000, 0.20),
    Pod("research", "spiky", "h100-b", 0, H100, 8_000, 0.10, spike_mib=15_000),
    Pod("research", "small", "h100-b", 1, H100, 6_000, 0.05),
    Pod("research", "trainer", "h100-b", 2, H100, 70_000, 0.80),
    Pod("research", "tiny", "h100-b", 3, H100, 5_000, 0.05),
    Pod("serving", "steady", "h100-c", 0, H100, 5_000, 0.05, "1g.10gb", "9"),
    Pod("serving", "brief", "h100-c", 0, H100, 5_000, 0.05, "1g.10gb", "10",
        start=START + 3_600, end=START + 3_600 + 15 * INTERVAL_S),
    *(Pod("web", f"infer-{i}", "l4-a", i, L4, 4_000, 0.15) for i in range(4)),
    # Time-sliced today: each pod's series carries the device's figures (8,000 MiB, 30 %),
    # which the advisor splits between the two.
    Pod("web", "pair-a", "l4-b", 0, L4, 8_000, 0.30),
    Pod("web", "pair-b", "l4-b", 0, L4, 8_000, 0.30),
)
IDLE_GPUS = (("h100-b", 4, H100),)

EXPECTED_ADVICE = {
    "big-a": "3g.40gb", "big-b": "3g.40gb", "mid-a": "2g.20gb", "mid-b": "2g.20gb",
    "spiky": "1g.20gb", "small": "1g.10gb", "trainer": "whole", "tiny": "1g.10gb",
    "steady": "1g.10gb", **{f"infer-{i}": "time-slicing" for i in range(4)},
    "pair-a": "time-slicing", "pair-b": "time-slicing",
}
"""`brief` is not advised."""


def host_label(node: str) -> str:
    """The node's host label: 4.8.2's `Hostname` on the `-b` nodes, `hostname` (4.8.3 and
    later, this exporter's default) on the others, so the fleet carries both."""
    return "Hostname" if node.endswith("-b") else "hostname"


def _labels(pod: Pod | None, node: str, gpu: int, model: str) -> tuple[tuple[str, str], ...]:
    base = (("gpu", str(gpu)), ("UUID", _uuid(node, gpu)), ("device", f"nvidia{gpu}"),
            ("modelName", model), (host_label(node), node))
    if pod is None:
        return base
    mig = (("GPU_I_PROFILE", pod.profile), ("GPU_I_ID", pod.gpu_instance)) if pod.profile else ()
    return (*base, *mig, ("container", "main"), ("namespace", pod.namespace), ("pod", pod.pod))


def _times(start: float, end: float) -> list[float]:
    count = round((end - start) / INTERVAL_S)
    return [start + i * INTERVAL_S for i in range(count)]


def series() -> Iterator[Series]:
    """Family by family, as OpenMetrics wants them."""
    framebuffer, activity, utilisation = [], [], []
    for pod in PODS:
        times = _times(pod.start, pod.end)
        labels = _labels(pod, pod.node, pod.gpu, pod.model)
        values = [pod.spike_mib if pod.spike_mib is not None and round(t - START) % 3600 == 1800
                  else pod.framebuffer_mib for t in times]
        framebuffer.append(Series("DCGM_FI_DEV_FB_USED", labels, times, values))
        if pod.model == L4:  # no profiling before Hopper: NVML's utilisation, in percent
            utilisation.append(Series("DCGM_FI_DEV_GPU_UTIL", labels, times,
                                      [pod.activity * 100] * len(times)))
        else:
            activity.append(Series("DCGM_FI_PROF_GR_ENGINE_ACTIVE", labels, times,
                                   [pod.activity] * len(times)))
    for node, gpu, model in IDLE_GPUS:
        times = _times(START, END)
        framebuffer.append(Series("DCGM_FI_DEV_FB_USED", _labels(None, node, gpu, model), times,
                                  [0.0] * len(times)))
    yield from framebuffer
    yield from activity
    yield from utilisation

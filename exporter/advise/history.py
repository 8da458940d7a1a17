"""What each holder used over the window, read from dcgm-exporter's series in Prometheus.

Three range queries at the advice's step (`--step`) and two instant ones, whatever the fleet:

- per step and labelled device series: the most framebuffer it held in the step
  (`max_over_time(DCGM_FI_DEV_FB_USED[step])`), so a spike between two evaluation times is
  kept;
- per step and labelled device series: its mean activity over the step, from profiling
  (`DCGM_FI_PROF_GR_ENGINE_ACTIVE`) where the GPU has it and from `DCGM_FI_DEV_GPU_UTIL`
  otherwise, the choice made once per GPU and step (`exporter.promql.holdings`);
- the samples of each holding in the window, and the GPUs of each node.

Only series dcgm-exporter writes are read (no recording rule, no self-metric of this
exporter). The quantiles over the steps are taken here: the peak framebuffer is the
`--memory-quantile` of the per-step maxima, the compute need the `--compute-quantile` of the
per-step means. A device several pods hold at one step (time-slicing) has its figures split
evenly between them at that step, as the report splits them.
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass

from exporter.advise.demand import SHARED, WHOLE, Holder
from exporter.partitions.mig_profiles import find_model
from exporter.promql import duration
from exporter.promql.holdings import (
    ACTIVITY_SOURCE,
    FRAMEBUFFER,
    LABELLED,
    Sampling,
    labelled_activity,
)
from exporter.report.connection import ReportError
from exporter.report.prometheus_api import PrometheusClient, Series
from exporter.report.query_plan import calls, windows

KEY_LABELS = "namespace, pod, Hostname, hostname, UUID, GPU_I_ID, GPU_I_PROFILE, modelName"
"""What names a holding: the pod, its node (dcgm-exporter writes `Hostname`; some setups
relabel it `hostname`), the device, and what the device is."""
NODE_LABELS = "Hostname, hostname"
MIG_COMPUTE = re.compile(r"^(\d+)g\.")

Key = tuple[str, str, str, str, str, str, str]
"""namespace, pod, node, UUID, GPU_I_ID, GPU_I_PROFILE, modelName."""


@dataclass(frozen=True, slots=True)
class HistoryRequest:
    start: float
    end: float
    step_s: float = 300.0
    resolution_s: float = 60.0
    """Sampling interval of the activity subquery (at least the scrape interval)."""
    max_chunk_s: float = 86400.0
    memory_quantile: float = 0.99
    compute_quantile: float = 0.95


def _short(seconds: float) -> str:
    return f"[{round(seconds * 1000) - 1}ms]"


def framebuffer_query(step_s: float) -> str:
    return (f"max by ({KEY_LABELS}) (\n"
            f"max_over_time({FRAMEBUFFER}{LABELLED}{_short(step_s)})\n)")


def activity_query(step_s: float, resolution_s: float) -> str:
    inner = labelled_activity("avg_over_time", Sampling(step_s, resolution_s))
    return f"max by ({KEY_LABELS}, {ACTIVITY_SOURCE}) (\n{inner}\n)"


def samples_query(range_s: float) -> str:
    return f"sum by ({KEY_LABELS}) (\ncount_over_time({FRAMEBUFFER}{LABELLED}{_short(range_s)})\n)"


def gpus_per_node_query(range_s: float) -> str:
    return (f"count by ({NODE_LABELS}) (\ncount by (UUID, {NODE_LABELS}) (\n"
            f"last_over_time({FRAMEBUFFER}{_short(range_s)})\n))")


def any_framebuffer_query(range_s: float) -> str:
    return f"count(last_over_time({FRAMEBUFFER}{_short(range_s)}))"


def _key(labels: dict[str, str]) -> Key:
    return (labels.get("namespace", ""), labels.get("pod", ""),
            labels.get("Hostname") or labels.get("hostname", ""), labels.get("UUID", ""),
            labels.get("GPU_I_ID", ""), labels.get("GPU_I_PROFILE", ""),
            labels.get("modelName", ""))


def aligned_start(request: HistoryRequest) -> float:
    """The window's start moved forward to leave whole steps before its end."""
    steps = math.floor(round((request.end - request.start) / request.step_s, 6))
    if steps < 1:
        raise ReportError(f"the range {duration(request.end - request.start)} is shorter than "
                          f"--step {duration(request.step_s)}")
    return request.end - steps * request.step_s


def _ranged(client: PrometheusClient, expr: str, request: HistoryRequest,
            progress: Callable[[], None]) -> list[Series]:
    start = aligned_start(request)
    out: list[Series] = []
    for call in calls(windows(start, request.end, request.step_s), request.max_chunk_s):
        if call.instant:
            out += client.query(expr, call.first)
        else:
            out += client.query_range(expr, call.first, call.last, call.step_s)
        progress()
    return out


def planned_queries(request: HistoryRequest) -> int:
    parts = calls(windows(aligned_start(request), request.end, request.step_s),
                  request.max_chunk_s)
    return 2 * len(parts) + 2


@dataclass
class _Steps:
    framebuffer: dict[Key, dict[float, float]]
    activity: dict[Key, dict[float, float]]
    sources: dict[Key, str]


def _per_step(fb: list[Series], activity: list[Series]) -> _Steps:
    steps = _Steps(defaultdict(dict), defaultdict(dict), {})
    for labels, points in fb:
        cells = steps.framebuffer[_key(labels)]
        for t, v in points:
            cells[t] = max(cells.get(t, v), v)
    for labels, points in activity:
        key = _key(labels)
        cells = steps.activity[key]
        for t, v in points:
            cells[t] = max(cells.get(t, v), v)
        steps.sources[key] = labels.get(ACTIVITY_SOURCE, "")
    return steps


def read_holders(client: PrometheusClient, request: HistoryRequest,
                 progress: Callable[[], None] = lambda: None
                 ) -> tuple[list[Holder], dict[str, int]]:
    """The holders of the window, and the GPUs of each node. ReportError for a window with
    no framebuffer series, or none with pod labels."""
    range_s = request.end - request.start
    fb = _ranged(client, framebuffer_query(request.step_s), request, progress)
    if not fb:
        found = client.query(any_framebuffer_query(range_s), request.end)
        progress()
        if not found or not found[0][1] or found[0][1][0][1] == 0:
            raise ReportError(f"no {FRAMEBUFFER} samples between {_utc(request.start)} and "
                              f"{_utc(request.end)}: an empty window (check --start/--end/"
                              "--last and the server)")
        raise ReportError(f"{FRAMEBUFFER} has no series with pod labels (namespace, pod) in "
                          "the window: nothing to advise (does dcgm-exporter map GPUs to pods? "
                          "it needs the kubelet's pod-resources socket)")
    activity = _ranged(client, activity_query(request.step_s, request.resolution_s), request,
                       progress)
    samples = {_key(labels): int(points[0][1]) for labels, points in
               client.query(samples_query(range_s), request.end) if points}
    progress()
    counts = {labels.get("Hostname") or labels.get("hostname", ""): int(points[0][1])
              for labels, points in client.query(gpus_per_node_query(range_s), request.end)
              if points}
    progress()
    return holders_from_steps(_per_step(fb, activity), samples, request), counts


def _utc(ts: float) -> str:
    from datetime import UTC, datetime

    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _slices_part(profile: str, gpu_model: str) -> float:
    """A MIG instance's compute slices over its GPU's (its activity is its own)."""
    match = MIG_COMPUTE.match(profile)
    if not match:
        return 1.0
    model = find_model(gpu_model)
    total = model.compute_slices if model is not None and model.compute_slices else 7
    return int(match[1]) / total


def holders_from_steps(steps: _Steps, samples: dict[Key, int],
                       request: HistoryRequest) -> list[Holder]:
    import numpy as np

    pods_at: dict[tuple[str, str], dict[float, int]] = defaultdict(lambda: defaultdict(int))
    for key, cells in steps.framebuffer.items():
        device = (key[3], key[4])
        for t in cells:
            pods_at[device][t] += 1
    holders = []
    for key, cells in sorted(steps.framebuffer.items()):
        namespace, pod, node, uuid, gpu_instance, profile, gpu_model = key
        on_device = pods_at[(uuid, gpu_instance)]
        sharers = max(on_device.values())
        times = sorted(cells)
        memory = np.array([cells[t] / on_device[t] for t in times])
        activity = steps.activity.get(key, {})
        part = _slices_part(profile, gpu_model) if gpu_instance else 1.0
        busy = [activity[t] / on_device[t] * part for t in times if t in activity]
        need = float(np.quantile(busy, request.compute_quantile, method="higher")) \
            if busy else None
        now = (profile or "mig") if gpu_instance else (SHARED if sharers > 1 else WHOLE)
        holders.append(Holder(
            namespace, pod, node, gpu_model, uuid, gpu_instance, now,
            samples.get(key, 0), len(times) * request.step_s / 3600,
            float(np.quantile(memory, request.memory_quantile, method="higher")),
            None if need is None else min(1.0, max(0.0, need)),
            steps.sources.get(key, ""), sharers))
    return holders

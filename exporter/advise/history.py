"""What each holder used over the window, read from dcgm-exporter's series in Prometheus.

The server does the arithmetic: seven instant queries at the window's end, whatever the
fleet, each answering one series per holding (or per device, or per node), so what comes back
is O(holdings) however long the window. Over the window's steps (`--step`, aligned to
multiples of it as subqueries align):

- framebuffer: per step the most each labelled device series held in it
  (`max_over_time(DCGM_FI_DEV_FB_USED[step])`, so a spike between two steps is kept), and the
  `--memory-quantile` of those per-step maxima;
- activity: per step the mean, from profiling (`DCGM_FI_PROF_GR_ENGINE_ACTIVE`) where the GPU
  has it and from `DCGM_FI_DEV_GPU_UTIL` otherwise, the choice made once per GPU and step
  (`exporter.promql.holdings`), and its `--compute-quantile`; which source it came from;
- the steps each holding was seen in, the most pods seen at one step on each device, the
  samples of each holding, and the GPUs of each node.

A device several pods hold at one step (time-slicing) has its figures split evenly between
them at that step, as the report splits them. Only series dcgm-exporter writes are read (no
recording rule, no self-metric of this exporter).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass

from exporter.advise.demand import SHARED, UNNAMED_INSTANCE, WHOLE, Holder
from exporter.partitions.mig_profiles import find_model
from exporter.promql import duration
from exporter.promql.holdings import (
    ACTIVITY_SOURCE,
    FRAMEBUFFER,
    LABELLED,
    Sampling,
    labelled_activity,
    short_range,
)
from exporter.report.connection import ReportError
from exporter.report.prometheus_api import PrometheusClient, Series

KEY_LABELS = "namespace, pod, Hostname, hostname, UUID, GPU_I_ID, GPU_I_PROFILE, modelName"
"""What names a holding: the pod, its node (dcgm-exporter 4.8.3 and later write `hostname`,
4.8.2 and earlier `Hostname`), the device, and what the device is."""
DEVICE = "UUID, GPU_I_ID"
NODE_LABELS = "Hostname, hostname"
MIG_COMPUTE = re.compile(r"^(\d+)g\.")
QUERIES = 7

Key = tuple[str, str, str, str, str, str, str]
"""namespace, pod, node, UUID, GPU_I_ID, GPU_I_PROFILE, modelName."""


@dataclass(frozen=True, slots=True)
class HistoryRequest:
    """The window to read and how to read it: its start and end (Unix seconds), the step its
    figures are taken over, the resolution of the activity subquery, and the quantiles taken of
    memory and compute."""

    start: float
    end: float
    step_s: float = 300.0
    resolution_s: float = 60.0
    """Sampling interval of the activity subquery (at least the scrape interval)."""
    memory_quantile: float = 0.99
    compute_quantile: float = 0.95


def _steps(request: HistoryRequest) -> str:
    return short_range(request.end - request.start, request.step_s)


def holding_maxima(step_s: float) -> str:
    """Return the query for the most framebuffer each labelled holding used within one step of
    `step_s` seconds, so a spike between two evaluations is kept."""
    return f"max by ({KEY_LABELS}) (max_over_time({FRAMEBUFFER}{LABELLED}{short_range(step_s)}))"


def pods_per_device(step_s: float) -> str:
    """Return the query counting the pods that hold each device within one step of `step_s`
    seconds."""
    return f"count by ({DEVICE}) ({holding_maxima(step_s)})"


def _split(expr: str, step_s: float) -> str:
    """Return `expr`, a query with one series per holding, divided by the number of pods on the
    holding's device at the step, so a shared device's figures are split evenly between its pods."""
    return f"(\n{expr}\n/ on({DEVICE}) group_left()\n{pods_per_device(step_s)}\n)"


def _activity(request: HistoryRequest) -> str:
    return labelled_activity("avg_over_time", Sampling(request.step_s, request.resolution_s))


def memory_query(request: HistoryRequest) -> str:
    """Return the query for each holding's peak framebuffer: the `--memory-quantile` over the
    window's steps of the most it held in each step, split between the pods sharing its device."""
    inner = _split(holding_maxima(request.step_s), request.step_s)
    return f"quantile_over_time({request.memory_quantile!r}, {inner}{_steps(request)})"


def steps_query(request: HistoryRequest) -> str:
    """Return the query counting the steps in which each holding was seen; the hours it was held
    follow from it."""
    return f"count_over_time(({holding_maxima(request.step_s)}){_steps(request)})"


def sharers_query(request: HistoryRequest) -> str:
    """Return the query for the most pods seen holding each device at one step, which tells a
    time-sliced device from one held by a single pod."""
    return f"max_over_time(({pods_per_device(request.step_s)}){_steps(request)})"


def compute_query(request: HistoryRequest) -> str:
    """Return the query for each holding's compute need: the `--compute-quantile` over the
    window's steps of its mean activity in each step, split between the pods sharing its device."""
    activity = f"max by ({KEY_LABELS}) (\n{_activity(request)}\n)"
    inner = _split(activity, request.step_s)
    return f"quantile_over_time({request.compute_quantile!r}, {inner}{_steps(request)})"


def source_query(request: HistoryRequest) -> str:
    """Return the query counting, for each holding and activity source, the steps whose activity
    came from that source, so each holding can be credited to the source of most of its steps."""
    activity = f"max by ({KEY_LABELS}, {ACTIVITY_SOURCE}) (\n{_activity(request)}\n)"
    return f"count_over_time(({activity}){_steps(request)})"


def samples_query(range_s: float) -> str:
    """Return the query counting each holding's framebuffer samples over `range_s` seconds, so a
    holding with too short a history can be left unadvised."""
    samples = f"count_over_time({FRAMEBUFFER}{LABELLED}{short_range(range_s)})"
    return f"sum by ({KEY_LABELS}) (\n{samples}\n)"


def gpus_per_node_query(range_s: float) -> str:
    """Return the query counting the GPUs each node reported framebuffer for over `range_s`
    seconds, held by a pod or not, so a node's idle GPUs are counted among its GPUs."""
    return (f"count by ({NODE_LABELS}) (\ncount by (UUID, {NODE_LABELS}) (\n"
            f"last_over_time({FRAMEBUFFER}{short_range(range_s)})\n))")


def any_framebuffer_query(range_s: float) -> str:
    """Return the query counting every framebuffer series over `range_s` seconds, with pod labels
    or without, which tells an empty window from one whose series carry no pod labels."""
    return f"count(last_over_time({FRAMEBUFFER}{short_range(range_s)}))"


def _key(labels: dict[str, str]) -> Key:
    return (labels.get("namespace", ""), labels.get("pod", ""),
            labels.get("hostname") or labels.get("Hostname", ""), labels.get("UUID", ""),
            labels.get("GPU_I_ID", ""), labels.get("GPU_I_PROFILE", ""),
            labels.get("modelName", ""))


def _values(series: list[Series]) -> dict[Key, float]:
    out: dict[Key, float] = {}
    for labels, points in series:
        if points and math.isfinite(points[0][1]):
            key = _key(labels)
            out[key] = max(out.get(key, points[0][1]), points[0][1])
    return out


def _utc(ts: float) -> str:
    from datetime import UTC, datetime

    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def read_holders(client: PrometheusClient, request: HistoryRequest,
                 progress: Callable[[], None] = lambda: None
                 ) -> tuple[list[Holder], dict[str, int]]:
    """Return every holder seen in the window, read with seven queries (`progress` is called
    after each), and the number of GPUs on each node. Raise ReportError when the window has no
    framebuffer series or none of them carries pod labels, saying which, so the user knows what
    to fix."""
    if request.end - request.start < request.step_s:
        raise ReportError(f"the range {duration(request.end - request.start)} is shorter than "
                          f"--step {duration(request.step_s)}")

    def ask(expr: str) -> list[Series]:
        answer = client.query(expr, request.end)
        progress()
        return answer

    range_s = request.end - request.start
    memory = _values(ask(memory_query(request)))
    if not memory:
        found = ask(any_framebuffer_query(range_s))
        if not found or not found[0][1] or found[0][1][0][1] == 0:
            raise ReportError(f"no {FRAMEBUFFER} samples between {_utc(request.start)} and "
                              f"{_utc(request.end)}: an empty window (check --start/--end/"
                              "--last and the server)")
        raise ReportError(f"{FRAMEBUFFER} has no series with pod labels (namespace, pod) in "
                          "the window: nothing to advise (does dcgm-exporter map GPUs to pods? "
                          "it needs the kubelet's pod-resources socket)")
    steps = _values(ask(steps_query(request)))
    sharers = {(labels.get("UUID", ""), labels.get("GPU_I_ID", "")): int(points[0][1])
               for labels, points in ask(sharers_query(request)) if points}
    compute = _values(ask(compute_query(request)))
    best: dict[Key, tuple[float, str]] = {}
    for labels, points in ask(source_query(request)):
        if points:  # the source of most steps; on a tie, the first by name
            key, candidate = _key(labels), (-points[0][1], labels.get(ACTIVITY_SOURCE, ""))
            if key not in best or candidate < best[key]:
                best[key] = candidate
    samples = {k: int(v) for k, v in _values(ask(samples_query(range_s))).items()}
    counts = {labels.get("hostname") or labels.get("Hostname", ""): int(points[0][1])
              for labels, points in ask(gpus_per_node_query(range_s)) if points}
    holders = []
    for key in sorted(memory):
        namespace, pod, node, uuid, gpu_instance, profile, gpu_model = key
        on_device = sharers.get((uuid, gpu_instance), 1)
        part = _slices_part(profile, gpu_model) if gpu_instance else 1.0
        need = compute.get(key)
        whole_now = SHARED if on_device > 1 else WHOLE
        now = (profile or UNNAMED_INSTANCE) if gpu_instance else whole_now
        holders.append(Holder(
            namespace, pod, node, gpu_model, uuid, gpu_instance, now, samples.get(key, 0),
            steps.get(key, 0.0) * request.step_s / 3600, memory[key],
            None if need is None else min(1.0, max(0.0, need * part)),
            best.get(key, (0.0, ""))[1], on_device))
    return holders, counts


def _slices_part(profile: str, gpu_model: str) -> float:
    """Return the part of its GPU's compute slices a MIG instance of `profile` has, which scales
    the instance's own activity to a part of the whole GPU; 1 when the profile name does not say."""
    match = MIG_COMPUTE.match(profile)
    if not match:
        return 1.0
    model = find_model(gpu_model)
    total = model.compute_slices if model is not None and model.compute_slices else 7
    return int(match[1]) / total

"""KEDA ScaledObjects that scale a Deployment on its GPUs.

KEDA's prometheus scaler runs the query as an instant query and fails with "returned multiple
elements" when more than one series comes back, so every query here aggregates without `by`.
Averages (utilisation, activity, framebuffer share) use `metricType: Value`; KEDA's default
`AverageValue` divides the value by the replica count, which is only right for sums such as a
queue length.

The GPU queries select the Deployment's pods by the pod labels on the device series, which
dcgm-exporter and this exporter both set for devices a container holds exclusively. Shared
devices (time-slicing replicas, a MIG GPU instance split between pods) carry no pod labels:
their load belongs to several workloads and is left out.

With a role (`--role prefill`), the pool is instead every pod of the namespace whose role
label says so - llm-d's `llm_d_ai_role` or Dynamo's component (sub-)type, as the exporter's
`--kubernetes.pod-labels` presets (or dcgm-exporter's allow-list) copy them - so a prefill
and a decode pool of one disaggregated server scale separately, whatever their pods are
named. The queue trigger then reads the serving metric of the pods whose GPUs carry that
role. A series matching several role labels is counted once (`or` keeps one of equal
label sets).

Activity triggers read GPM where a GPU has it and NVML's counterpart before Hopper
(`exporter.promql.measures`): graphics-engine activity falls back to `DCGM_FI_DEV_GPU_UTIL / 100`,
memory-interface activity to `DCGM_FI_DEV_MEM_COPY_UTIL / 100`, per GPU, before the average,
so a GPU with both is counted once. MIG instances of GPUs before Hopper report neither.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum
from typing import Any

from exporter.artifacts.fieldset import FieldSet
from exporter.k8s.inference_labels import ROLE
from exporter.promql import measures as gpm
from exporter.promql.measures import DRAM, GR_ENGINE, Measure, read

DEFAULT_PROMETHEUS = "http://prometheus-operated.monitoring.svc:9090"

# Pod names of a Deployment are <deployment>-<pod-template-hash>-<suffix>. The hash is
# written in Kubernetes' safe alphabet (no vowels), so "llm" does not also select
# "llm-prefill-..."; the 5-character suffix is matched loosely.
_SAFE = "[bcdfghjklmnpqrstvwxz2456789]"


def deployment_pods(deployment: str) -> str:
    """Return a regex matching the pods a Deployment's ReplicaSets create, and no other's."""
    return f"{deployment}-{_SAFE}{{6,10}}-[a-z0-9]{{5}}"


class Metric(Enum):
    """The GPU figure a ScaledObject scales on, as `--metric` names it: GPU utilisation,
    graphics-engine activity, framebuffer used, or memory-interface activity."""

    UTIL = "util"
    GR_ENGINE = "gr-engine"
    FB = "fb"
    DRAM = "dram"


ROLES = ("prefill", "decode")
"""Values of `--role`: the phases Dynamo and llm-d scale separately."""


@dataclass(frozen=True, slots=True)
class Pool:
    """The pods whose GPUs (and queue) a ScaledObject reads."""

    namespace: str
    pod_regex: str | None = None
    """The pods of one Deployment (`deployment_pods`); used when `role` is None."""
    role: str | None = None
    """Every pod of the namespace labelled with this inference role."""
    ns_op: str = "="

    def series(self, name: str | Measure) -> str:
        """Return the metric `name` (or a GPM measure's placeholder) restricted to the pool's
        pods."""
        namespace = f'namespace{self.ns_op}"{self.namespace}"'
        if self.role is None:
            return read(name, f'{{{namespace}, pod=~"{self.pod_regex}"}}')
        return read(name, *(f'{{{namespace}, {source.label}="{self.role}"}}'
                            for source in ROLE.sources if re.fullmatch(source.values, self.role)))


@dataclass(frozen=True, slots=True)
class TriggerQuery:
    """The query behind one KEDA trigger: its PromQL, KEDA's metric type for it, the field or
    measure that marks the pool's devices, and what it measures in words."""

    query: str
    """PromQL; a GPM measure in it is a placeholder until resolved against the collected
    fields (`FieldSet.resolve`)."""
    metric_type: str
    reads: str | Measure
    """The field or measure that marks the pool's devices."""
    meaning: str


def gpu_query(metric: Metric, pool: Pool) -> TriggerQuery:
    """Return the single-series query behind one GPU trigger, in percent."""
    pods = "the Deployment's pods" if pool.role is None else f"the {pool.role} pods"
    whose = "the Deployment's" if pool.role is None else f"the {pool.role} pods'"
    if metric is Metric.UTIL:
        return TriggerQuery(f"avg({pool.series('DCGM_FI_DEV_GPU_UTIL')})", "Value",
                            "DCGM_FI_DEV_GPU_UTIL", f"mean GPU utilisation (%) of {pods}")
    if metric is Metric.GR_ENGINE:
        return TriggerQuery(f"100 * avg({pool.series(GR_ENGINE)})", "Value", GR_ENGINE,
                            f"mean graphics-engine activity (%) of {whose} GPUs or MIG "
                            "instances (NVML utilisation on GPUs before Hopper)")
    if metric is Metric.DRAM:
        return TriggerQuery(f"100 * avg({pool.series(DRAM)})", "Value", DRAM,
                            f"mean memory-interface activity (%) of {whose} GPUs or MIG "
                            "instances, what bounds decoding (NVML memory utilisation on "
                            "GPUs before Hopper)")
    used, free = pool.series("DCGM_FI_DEV_FB_USED"), pool.series("DCGM_FI_DEV_FB_FREE")
    return TriggerQuery(
        f"100 * sum({used}) / (sum({used}) + sum({free}))", "Value", "DCGM_FI_DEV_FB_USED",
        f"framebuffer used (%) across {whose} GPUs or MIG instances")


QUEUE_METRIC = "vllm:num_requests_waiting"


def queue_query(pool: Pool, metric: str = QUEUE_METRIC, *,
                gpu_field: str | Measure = "DCGM_FI_DEV_FB_USED") -> str:
    """Return the requests waiting in the inference servers' queues, summed over the pool. A role
    pool's pods are those whose `gpu_field` series (or measure) carry the role (serving metrics have
    no pod labels of their own)."""
    if pool.role is None:
        return f"sum({pool.series(metric)})"
    namespace = f'namespace{pool.ns_op}"{pool.namespace}"'
    return f"sum({metric}{{{namespace}}} and on (namespace, pod) {pool.series(gpu_field)})"


@dataclass(frozen=True, slots=True)
class ScaledObjectSpec:
    """What one ScaledObject scales and on what: the Deployment, the GPU figure and its target,
    the replica range, the Prometheus address, and optionally a queue target and an inference
    role."""

    namespace: str
    deployment: str
    metric: Metric
    target: float
    min_replicas: int = 1
    max_replicas: int = 10
    prometheus: str = DEFAULT_PROMETHEUS
    queue_target: float | None = None
    """When set, a second trigger on the inference queue length (requests per replica)."""
    name: str | None = None
    role: str | None = None
    """Scale one role's pool: select pods by role label instead of by the Deployment's pod
    names (see the module docstring)."""

    @property
    def pool(self) -> Pool:
        """Return the pods the ScaledObject reads: every pod of the namespace with the role when
        a role is set, else the pods of the Deployment."""
        if self.role is not None:
            return Pool(self.namespace, role=self.role)
        return Pool(self.namespace, deployment_pods(self.deployment))


def _number(value: float) -> str:
    """Write a number as KEDA's CRD wants metadata values, as a string: "70", not 70 or "70.0"."""
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def check_spec(spec: ScaledObjectSpec, fields: FieldSet) -> None:
    """Raise ValueError with the offending flag when a spec cannot work."""
    if spec.min_replicas < 0:
        raise ValueError(f"--min must be 0 or more, got {spec.min_replicas}")
    if spec.max_replicas < max(1, spec.min_replicas):
        raise ValueError(f"--max must be at least 1 and at least --min ({spec.min_replicas}), "
                         f"got {spec.max_replicas}")
    if not spec.target > 0:
        raise ValueError(f"--target must be positive, got {spec.target}")
    if spec.role is not None and spec.role not in ROLES:
        raise ValueError(f"--role must be one of {', '.join(ROLES)}, got {spec.role}")
    if spec.metric is not Metric.FB and spec.target > 100:
        raise ValueError(f"--target is a percentage for --metric {spec.metric.value}, got "
                         f"{spec.target}")
    query = gpu_query(spec.metric, spec.pool).query
    if fields.resolve(query) is None:
        raise ValueError(f"--metric {spec.metric.value} needs {_needs(query, fields)}, which "
                         f"{fields.source} does not enable")


def _needs(query: str, fields: FieldSet) -> str:
    """Return what `query` reads that `fields` lacks: plain fields, and for a GPM measure with no
    enabled source, its sources."""
    missing = [f for f in dict.fromkeys(re.findall(r"\bDCGM_FI_[A-Z0-9_]+", query))
               if f not in fields.names]
    for measure in gpm.measures_in(query):
        from_gpm = fields.has(*measure.gpm)
        from_nvml = measure.nvml is not None and fields.has(measure.nvml.field)
        if not (from_gpm or from_nvml):
            fallback = f" or {measure.nvml.field} (before Hopper)" if measure.nvml else ""
            missing.append(f"{' and '.join(measure.gpm)} (GPM){fallback}")
    return ", ".join(missing)


def _resolved(query: str, fields: FieldSet) -> str:
    resolved = fields.resolve(query)
    if resolved is None:
        raise ValueError(f"{fields.source} does not enable what {query!r} reads")
    return resolved


def scaled_object(spec: ScaledObjectSpec, fields: FieldSet) -> dict[str, Any]:
    """Return the ScaledObject, reading only fields `fields` enables (check_spec first)."""
    gpu = gpu_query(spec.metric, spec.pool)
    triggers: list[dict[str, Any]] = []
    if spec.queue_target is not None:
        triggers.append({
            "type": "prometheus",
            "name": "inference-queue",
            "metricType": "AverageValue",
            "metadata": {
                "serverAddress": spec.prometheus,
                "query": _resolved(queue_query(spec.pool, gpu_field=gpu.reads), fields),
                "threshold": _number(spec.queue_target),
                "ignoreNullValues": "true",
            },
        })
    triggers.append({
        "type": "prometheus",
        "name": f"gpu-{spec.metric.value}",
        "metricType": gpu.metric_type,
        "metadata": {
            "serverAddress": spec.prometheus,
            "query": _resolved(gpu.query, fields),
            "threshold": _number(spec.target),
            "ignoreNullValues": "true",
        },
    })
    return {
        "apiVersion": "keda.sh/v1alpha1",
        "kind": "ScaledObject",
        "metadata": {
            "name": spec.name or f"{spec.deployment}-gpu",
            "namespace": spec.namespace,
            "labels": {"app.kubernetes.io/part-of": "gpu-exporter-examples"},
        },
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment",
                               "name": spec.deployment},
            "minReplicaCount": spec.min_replicas,
            "maxReplicaCount": spec.max_replicas,
            "pollingInterval": 30,
            "cooldownPeriod": 300,
            "triggers": triggers,
        },
    }


@dataclass(frozen=True, slots=True)
class Example:
    """One example ScaledObject written under deploy/keda/: its file name, the summary at its
    top, and what it scales."""

    filename: str
    summary: str
    spec: ScaledObjectSpec


EXAMPLES: tuple[Example, ...] = (
    Example("gpu-utilization.yaml",
            "Keep the mean GPU utilisation of an inference Deployment's pods near 70 %.",
            ScaledObjectSpec("inference", "llm-server", Metric.UTIL, 70)),
    Example("mig-gr-engine.yaml",
            "A workload on MIG slices: scale on graphics-engine activity (MIG has no GPU_UTIL). "
            "GPM, so Hopper and newer:\nMIG instances of older GPUs (A100, A30) report no "
            "activity at all; scale those on framebuffer or the queue.",
            ScaledObjectSpec("inference", "embedder", Metric.GR_ENGINE, 60, max_replicas=7)),
    Example("framebuffer-pressure.yaml",
            "Add replicas before the model server's GPUs run out of framebuffer.",
            ScaledObjectSpec("inference", "llm-server", Metric.FB, 80,
                             name="llm-server-framebuffer")),
    Example("inference-queue.yaml",
            "Scale on the vLLM request queue (5 waiting requests per replica) and on GPU "
            "activity, whichever asks for more replicas.",
            ScaledObjectSpec("inference", "vllm", Metric.GR_ENGINE, 75, max_replicas=16,
                             queue_target=5)),
    Example("prefill-pool.yaml",
            "The prefill pool of a disaggregated server (llm-d, NVIDIA Dynamo): every pod of "
            "the namespace labelled prefill,\nscaled on their graphics-engine activity and on "
            "the requests waiting in their vLLM queues, whichever asks for more.\nNeeds the "
            "role labels on the GPU series: the exporter's `--kubernetes.pod-labels inference`.",
            ScaledObjectSpec("inference", "llm-prefill", Metric.GR_ENGINE, 70, max_replicas=8,
                             queue_target=4, role="prefill")),
    Example("decode-pool.yaml",
            "The decode pool of the same server, scaled separately: on memory-interface "
            "activity (decoding is bound by\nmemory bandwidth) and on the requests waiting in "
            "the decode pods' vLLM queues, whichever asks for more.",
            ScaledObjectSpec("inference", "llm-decode", Metric.DRAM, 70, max_replicas=16,
                             queue_target=8, role="decode")),
)


def examples(fields: FieldSet) -> list[tuple[Example, dict[str, Any]]]:
    """Return the example objects whose GPU metric the collectors enable."""
    out = []
    for ex in EXAMPLES:
        if fields.resolve(gpu_query(ex.spec.metric, ex.spec.pool).query) is not None:
            out.append((ex, scaled_object(ex.spec, fields)))
    return out

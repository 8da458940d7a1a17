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
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any

from exporter.artifacts.fieldset import FieldSet

DEFAULT_PROMETHEUS = "http://prometheus-operated.monitoring.svc:9090"

# Pod names of a Deployment are <deployment>-<pod-template-hash>-<suffix>. The hash is
# written in Kubernetes' safe alphabet (no vowels), so "llm" does not also select
# "llm-prefill-..."; the 5-character suffix is matched loosely.
_SAFE = "[bcdfghjklmnpqrstvwxz2456789]"


def deployment_pods(deployment: str) -> str:
    """A regex matching the pods a Deployment's ReplicaSets create, and no other's."""
    return f"{deployment}-{_SAFE}{{6,10}}-[a-z0-9]{{5}}"


class Metric(Enum):
    UTIL = "util"
    GR_ENGINE = "gr-engine"
    FB = "fb"


@dataclass(frozen=True, slots=True)
class TriggerQuery:
    query: str
    metric_type: str
    fields: tuple[str, ...]
    meaning: str


def gpu_query(metric: Metric, namespace: str, pod_regex: str, *, ns_op: str = "=") -> TriggerQuery:
    """The single-series query behind one GPU trigger, in percent."""
    s = f'{{namespace{ns_op}"{namespace}", pod=~"{pod_regex}"}}'
    if metric is Metric.UTIL:
        return TriggerQuery(f"avg(DCGM_FI_DEV_GPU_UTIL{s})", "Value",
                            ("DCGM_FI_DEV_GPU_UTIL",),
                            "mean GPU utilisation (%) of the Deployment's pods")
    if metric is Metric.GR_ENGINE:
        return TriggerQuery(f"100 * avg(DCGM_FI_PROF_GR_ENGINE_ACTIVE{s})", "Value",
                            ("DCGM_FI_PROF_GR_ENGINE_ACTIVE",),
                            "mean graphics-engine activity (%) of the Deployment's GPUs or "
                            "MIG instances")
    return TriggerQuery(
        f"100 * sum(DCGM_FI_DEV_FB_USED{s}) / (sum(DCGM_FI_DEV_FB_USED{s}) + "
        f"sum(DCGM_FI_DEV_FB_FREE{s}))", "Value",
        ("DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE"),
        "framebuffer used (%) across the Deployment's GPUs or MIG instances")


def queue_query(namespace: str, pod_regex: str, metric: str = "vllm:num_requests_waiting",
                *, ns_op: str = "=") -> str:
    """Requests waiting in the inference server's queue, summed over the Deployment."""
    return f'sum({metric}{{namespace{ns_op}"{namespace}", pod=~"{pod_regex}"}})'


@dataclass(frozen=True, slots=True)
class ScaledObjectSpec:
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


def _number(value: float) -> str:
    """KEDA's CRD wants metadata values as strings: "70", not 70 or "70.0"."""
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
    if spec.metric is not Metric.FB and spec.target > 100:
        raise ValueError(f"--target is a percentage for --metric {spec.metric.value}, got "
                         f"{spec.target}")
    missing = [f for f in gpu_query(spec.metric, "x", "x").fields if f not in fields.names]
    if missing:
        raise ValueError(f"--metric {spec.metric.value} needs {', '.join(missing)}, which "
                         f"{fields.source} does not enable")


def scaled_object(spec: ScaledObjectSpec) -> dict[str, Any]:
    pods = deployment_pods(spec.deployment)
    gpu = gpu_query(spec.metric, spec.namespace, pods)
    triggers: list[dict[str, Any]] = []
    if spec.queue_target is not None:
        triggers.append({
            "type": "prometheus",
            "name": "inference-queue",
            "metricType": "AverageValue",
            "metadata": {
                "serverAddress": spec.prometheus,
                "query": queue_query(spec.namespace, pods),
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
            "query": gpu.query,
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
    filename: str
    summary: str
    spec: ScaledObjectSpec


EXAMPLES: tuple[Example, ...] = (
    Example("gpu-utilization.yaml",
            "Keep the mean GPU utilisation of an inference Deployment's pods near 70 %.",
            ScaledObjectSpec("inference", "llm-server", Metric.UTIL, 70)),
    Example("mig-gr-engine.yaml",
            "A workload on MIG slices: scale on graphics-engine activity (MIG has no GPU_UTIL).",
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
)


def examples(fields: FieldSet) -> list[tuple[Example, dict[str, Any]]]:
    """The example objects whose GPU metric the collectors enable."""
    out = []
    for ex in EXAMPLES:
        if all(f in fields.names for f in gpu_query(ex.spec.metric, "x", "x").fields):
            out.append((ex, scaled_object(ex.spec)))
    return out

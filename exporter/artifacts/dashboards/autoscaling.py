"""(e) Inference autoscaling: the KEDA trigger values next to the replica counts, then the
inference fleet by role and by KAI queue (`inference`)."""

from __future__ import annotations

from exporter.artifacts.dashboards.inference import QUEUES, ROLES, SERVING
from exporter.artifacts.dashboards.spec import (
    JOB_VAR,
    Dashboard,
    Kind,
    Panel,
    Query,
    Section,
    Variable,
)
from exporter.artifacts.dashboards.workloads import holders
from exporter.artifacts.keda import Metric, Pool, deployment_pods, gpu_query, queue_query

TS = Kind.TIMESERIES
PODS = deployment_pods("$deployment")
NS = "$namespace"
DEPLOYMENT_NS = f'namespace="{NS}"'
DEPLOYMENT_PODS = f'pod=~"{PODS}"'
POOL = Pool(NS, PODS)

NAMESPACE_VAR = Variable("namespace", "Namespace",
                         'label_values({__name__=~"DCGM_F.+|gpu_exporter_pod_gpu_allocation", '
                         'namespace!=""}, namespace)',
                         multi=False)
DEPLOYMENT_VAR = Variable("deployment", "Deployment", "label_values(kube_deployment_spec_"
                          'replicas{namespace="$namespace"}, deployment)', multi=False)


NO_POOL = ("No device series of the Deployment's pods: it holds no device exclusively "
           "(shared devices carry no pod labels)")


def _trigger(metric: Metric, title: str, no_value: str = NO_POOL) -> Panel:
    q = gpu_query(metric, POOL)
    return Panel(title, TS, (Query(q.query, metric.value),), "percent",
                 f"The exact `generate keda --metric {metric.value}` query: {q.meaning}. "
                 "Desired replicas = ceil(replicas x value / target).", width=8, min=0, max=100,
                 no_value=no_value)


TRIGGERS = Section("KEDA trigger values", (
    _trigger(Metric.UTIL, "GPU utilisation trigger",
             f"{NO_POOL}, or only MIG instances (NVML reports no utilisation under MIG)"),
    _trigger(Metric.GR_ENGINE, "Graphics engine trigger",
             f"{NO_POOL}, or only MIG instances of GPUs before Hopper (no activity)"),
    _trigger(Metric.FB, "Framebuffer pressure trigger"),
    Panel("Inference queue trigger", TS, (Query(queue_query(POOL), "waiting requests"),),
          "short", "Requests waiting in vLLM's queue, summed over the Deployment "
          "(AverageValue: desired = ceil(value / target)).", width=8, external=True,
          no_value="No vllm:num_requests_waiting from the Deployment's pods"),
    Panel("GPUs held by the Deployment", TS, (Query(
        f"count(group by (instance, UUID, GPU_I_ID) "
        f"({holders(DEPLOYMENT_NS, DEPLOYMENT_PODS)}))", "devices"),), "none",
          "GPU and MIG devices held by the Deployment's pods (exclusive or shared).", width=8),
    Panel("KEDA scaler metric", TS, (Query(
        'keda_scaler_metrics_value{exported_namespace="$namespace", '
        'scaledObject=~"$deployment.*"}', "{{scaledObject}} {{scaler}} {{metric}}"),),
          "short", "The value KEDA last read for each trigger (KEDA operator metrics).",
          width=8, external=True),
))

REPLICAS = Section("Replicas", (
    Panel("Replicas", TS, (
        Query('kube_deployment_spec_replicas{namespace="$namespace", '
              'deployment="$deployment"}', "desired (spec)"),
        Query('kube_deployment_status_replicas{namespace="$namespace", '
              'deployment="$deployment"}', "current"),
        Query('kube_deployment_status_replicas_available{namespace="$namespace", '
              'deployment="$deployment"}', "available"),
    ), "none", "Replica counts from kube-state-metrics.", width=12, external=True),
    Panel("HPA bounds and target", TS, (
        Query('kube_horizontalpodautoscaler_status_desired_replicas{namespace="$namespace", '
              'horizontalpodautoscaler=~"keda-hpa-$deployment.*"}', "HPA desired"),
        Query('kube_horizontalpodautoscaler_spec_min_replicas{namespace="$namespace", '
              'horizontalpodautoscaler=~"keda-hpa-$deployment.*"}', "min"),
        Query('kube_horizontalpodautoscaler_spec_max_replicas{namespace="$namespace", '
              'horizontalpodautoscaler=~"keda-hpa-$deployment.*"}', "max"),
    ), "none", "The HPA KEDA manages for the ScaledObject (keda-hpa-<name>).", width=12,
          external=True),
))

AUTOSCALING = Dashboard(
    uid="gpu-exporter-autoscaling",
    filename="gpu-inference-autoscaling.json",
    title="GPU inference autoscaling",
    description="KEDA trigger queries of an inference Deployment next to its replica counts; "
                "prefill against decode with the serving metrics that explain them; GPU-hours "
                "and activity per KAI queue.",
    tags=("gpu-exporter", "gpu", "nvidia", "kubernetes", "keda"),
    variables=(JOB_VAR, NAMESPACE_VAR, DEPLOYMENT_VAR),
    sections=(TRIGGERS, REPLICAS, ROLES, SERVING, QUEUES),
)

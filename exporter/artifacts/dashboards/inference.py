"""Inference fleets on the autoscaling dashboard: prefill against decode, the serving metrics
that explain them, and GPU use per KAI queue.

The role and queue come from the pod labels the exporter's `--kubernetes.pod-labels`
presets copy (dcgm-exporter's allow-list gives the same names): `llm_d_ai_role`, Dynamo's
`nvidia_com_dynamo_(sub_)component_type`, `kai_scheduler_queue`. The role can sit in any of
three labels, so role queries first keep only series carrying one, then `label_replace`
copies it into a `role` label (in `exporter.k8s.inference_labels.ROLE`'s precedence) to
group by. Role panels read devices a pod holds exclusively, whose own series carry its labels;
the queue panels also count shared devices through the allocation rows. Engine and
memory-interface activity are GPM's where a GPU has it, NVML utilisation's before Hopper
(`exporter.promql.measures`).

Serving metrics (vLLM, Dynamo's frontend) carry the serving pod's `namespace` and `pod` (from
the scrape), not its labels: they get their role from the GPU series of the same pod. Without
them, or without the role labels, a panel says what it is missing instead of "No data"; the
GPU panels never depend on them.
"""

from __future__ import annotations

from exporter.artifacts.dashboards.spec import HOST, JOB, Kind, Panel, Query, Section, sel
from exporter.artifacts.dashboards.workloads import holders
from exporter.k8s.inference_labels import QUEUE, ROLE
from exporter.promql.measures import DRAM, GR_ENGINE, Measure, read

TS, TABLE = Kind.TIMESERIES, Kind.TABLE
NS = 'namespace="$namespace"'
DEVICE = "instance, UUID, GPU_I_ID"
QUEUE_LABEL = QUEUE.sources[0].label
ALLOCATIONS = "gpu_exporter_pod_gpu_allocation"

NO_ROLE = ("No GPU series with a role label here: run the exporter with "
           "--kubernetes.pod-labels inference (deploy/README.md)")
NO_SERVING = ("No serving metrics (vllm:*, dynamo_frontend_*) from pods whose GPUs carry a "
              "role in this namespace")
NO_QUEUE = ("No GPU series with kai_scheduler_queue: KAI-scheduled pods, and the exporter "
            "with --kubernetes.pod-labels kai (or inference)")


def with_role(expr: str) -> str:
    """Return `expr` with a `role` label copied from whichever role label its series carry."""
    for source in reversed(ROLE.sources):  # the highest precedence is applied last
        expr = f'label_replace({expr}, "role", "$1", "{source.label}", "({source.values})")'
    return expr


def role_holders(metric: str | Measure, *matchers: str) -> str:
    """Return `metric` on devices held by a pod with an inference role (a series matching several
    role labels is kept once: `or` drops equal label sets)."""
    return read(metric, *(sel(*matchers, f'{s.label}=~"{s.values}"') for s in ROLE.sources))


def by_role(aggregation: str, metric: str | Measure) -> str:
    """Return the query aggregating `metric` with `aggregation` (`sum`, `avg`, `count`...) per
    inference role, over the devices held by pods of the chosen job and namespace that carry one."""
    return f"{aggregation} by (role) ({with_role(role_holders(metric, JOB, NS))})"


FREE, USED = (role_holders(f"DCGM_FI_DEV_FB_{m}", JOB, NS) for m in ("FREE", "USED"))
HEADROOM = with_role(f"{FREE} / ({USED} + {FREE})")
"""Per device: the free share of its framebuffer."""
POOL_HEADROOM = (f"{by_role('sum', 'DCGM_FI_DEV_FB_FREE')} / "
                 f"({by_role('sum', 'DCGM_FI_DEV_FB_USED')} + "
                 f"{by_role('sum', 'DCGM_FI_DEV_FB_FREE')})")

ROLES = Section("Prefill and decode ($namespace)", (
    Panel("Engine activity by role", TS, (Query(
        by_role("avg", GR_ENGINE), "{{role}}"),), "percentunit",
          "Mean graphics-engine activity of the GPUs and MIG instances each role's pods hold: "
          "prefill is compute-bound and runs hot in bursts, decode stays busy longer at lower "
          "activity. GPM on Hopper and newer, NVML utilisation / 100 on older GPUs.",
          width=8, min=0, max=1, no_value=NO_ROLE),
    Panel("Memory-interface activity by role", TS, (Query(
        by_role("avg", DRAM), "{{role}}"),), "percentunit",
          "Mean share of time the memory interface was busy: what bounds decoding (the "
          "decode pool's KEDA trigger). GPM on Hopper and newer, NVML memory utilisation / "
          "100 on older GPUs.", width=8, min=0, max=1, no_value=NO_ROLE),
    Panel("Devices held by role", TS, (Query(
        by_role("count", "DCGM_FI_DEV_FB_USED"), "{{role}}"),), "none",
          "GPUs and MIG instances held by each role's pods: the replicas the autoscaler "
          "gave each pool.", width=8, min=0, no_value=NO_ROLE),
    Panel("Framebuffer headroom by role", TS, (
        Query(f"min by (role) ({HEADROOM})", "{{role}} tightest device"),
        Query(POOL_HEADROOM, "{{role}} pool"),
    ), "percentunit",
          "Free share of framebuffer: on the device closest to full, and over the pool. "
          "vLLM reserves its KV cache at start, so low headroom is normal; a drop below it "
          "means memory outside the cache is growing.", min=0, max=1, no_value=NO_ROLE),
    Panel("Power by role", TS, (Query(
        by_role("sum", "DCGM_FI_DEV_POWER_USAGE"), "{{role}}"),), "watt",
          "Power drawn by the whole GPUs each role holds. A MIG instance has no power of its "
          "own (its GPU's is shared by all instances), so MIG pools are not in it.",
          min=0, no_value=NO_ROLE),
))

POD_ROLES = (f"group by (namespace, pod, role) "
             f"({with_role(role_holders('DCGM_FI_DEV_FB_USED', JOB, NS))})")
"""One series per serving pod with the role its GPUs carry, to join serving metrics on."""


def serving_by_role(aggregation: str, metric: str) -> str:
    """Return the query aggregating the serving metric `metric` with `aggregation` per inference
    role, each serving pod taking the role its GPU series carry, since serving metrics carry no
    pod labels of their own."""
    return (f"{aggregation} by (role) ({metric}{{{NS}}} "
            f"* on (namespace, pod) group_left (role) {POD_ROLES})")


def ttft_by_role(quantile: float) -> str:
    """Return the query for the `quantile` of vLLM's time to first token per inference role, each
    serving pod taking the role its GPU series carry."""
    return (f"histogram_quantile({quantile}, sum by (le, role) "
            f"(rate(vllm:time_to_first_token_seconds_bucket{{{NS}}}[$__rate_interval]) "
            f"* on (namespace, pod) group_left (role) {POD_ROLES}))")


SERVING = Section("Serving metrics by role ($namespace)", (
    Panel("Queue depth", TS, (
        Query(serving_by_role("sum", "vllm:num_requests_waiting"), "{{role}} waiting (vLLM)"),
        Query(f"sum by (model) (dynamo_frontend_queued_requests{{{NS}}})",
              "frontend {{model}} queued (Dynamo)"),
    ), "short", "Requests waiting in the vLLM servers of each role (the KEDA queue trigger), "
                "and in Dynamo's frontend per model.", width=8, min=0, external=True,
          no_value=NO_SERVING),
    Panel("KV-cache use", TS, (
        Query(serving_by_role("max", "vllm:kv_cache_usage_perc"), "{{role}} fullest pod"),
        Query(serving_by_role("avg", "vllm:kv_cache_usage_perc"), "{{role}} mean"),
    ), "percentunit", "Share of vLLM's KV cache in use: near 1, decode pods preempt requests "
                      "and the queue grows.", width=8, min=0, max=1, external=True,
          no_value=NO_SERVING),
    Panel("Time to first token (p90)", TS, (
        Query(ttft_by_role(0.9), "{{role}} (vLLM)"),
        Query("histogram_quantile(0.9, sum by (le, model) (rate("
              f"dynamo_frontend_time_to_first_token_seconds_bucket{{{NS}}}[$__rate_interval])))",
              "frontend {{model}} (Dynamo)"),
    ), "s", "90th percentile time to first token as each role's vLLM servers and Dynamo's "
            "frontend measure it: prefill capacity shows here first.", width=8, min=0,
          external=True, no_value=NO_SERVING),
))


# -- KAI queues ------------------------------------------------------------------------------

HOLDER = f"{DEVICE}, namespace, pod, container, {QUEUE_LABEL}"
IN_A_QUEUE = f'{QUEUE_LABEL}!=""'
HELD, UNHELD = 'pod!=""', 'pod=""'
"""Device series of a device one container holds (with its pod labels), and of the rest."""
ANY_FIELD = '__name__=~"DCGM_F.+"'
HOLDERS_PER_DEVICE = (f"count by ({DEVICE}) (group by ({DEVICE}, namespace, pod) "
                      f"({holders(JOB)}))")


def queue_share(*matchers: str) -> str:
    """Return, per (device, holder in a queue), the holder's share of the device, 1 / its
    holders."""
    exclusive = f"group by ({HOLDER}) ({sel(ANY_FIELD, JOB, *matchers, IN_A_QUEUE, HELD)})"
    shared = f"group by ({HOLDER}) ({ALLOCATIONS}{sel(JOB, *matchers, IN_A_QUEUE)})"
    return f"({exclusive} or {shared}) / on ({DEVICE}) group_left {HOLDERS_PER_DEVICE}"


WHOLE, MIG = 'GPU_I_ID=""', 'GPU_I_ID!=""'


def hours(share: str) -> str:
    """Return the device-hours over the dashboard's range, sampled every $__interval."""
    return (f"sum by ({QUEUE_LABEL}) (sum_over_time(({share})[$__range:$__interval])) "
            "* $__interval_ms / 3600000")


def queue_activity(field: str | Measure) -> str:
    """Return `field` per (device, holder in a queue), exclusive and shared devices alike."""
    keep = f"{DEVICE}, {HOST}, gpu"
    exclusive = (f"max by ({keep}, namespace, pod, container, {QUEUE_LABEL}) "
                 f"({read(field, sel(JOB, IN_A_QUEUE, HELD))})")
    shared = (f"max by ({keep}) ({read(field, sel(JOB, UNHELD))}) "
              f"* on ({DEVICE}) group_right ({HOST}, gpu) "
              f"group by ({HOLDER}) ({ALLOCATIONS}{sel(JOB, IN_A_QUEUE)})")
    return f"{exclusive} or {shared}"


QUEUE_LEGEND = f"{{{{{QUEUE_LABEL}}}}}"

QUEUES = Section("KAI queues (all namespaces)", (
    Panel("GPU-hours per queue", TABLE, (
        Query(hours(queue_share(WHOLE)), instant=True),
        Query(hours(queue_share(MIG)), instant=True),
    ), "none", "Over the dashboard's time range: GPU-hours of whole GPUs (A) and "
               "instance-hours of MIG instances (B) held by each queue's pods. A GPU shared "
               "by time-slicing is split evenly between the pods holding it.", width=8,
          no_value=NO_QUEUE),
    Panel("Devices held per queue", TS, (
        Query(f"sum by ({QUEUE_LABEL}) ({queue_share(WHOLE)})", f"{QUEUE_LEGEND} GPUs"),
        Query(f"sum by ({QUEUE_LABEL}) ({queue_share(MIG)})",
              f"{QUEUE_LEGEND} MIG instances"),
    ), "none", "Whole GPUs and MIG instances each queue's pods hold now (shared ones split "
               "evenly): the rate at which the table's hours accrue.", width=8, min=0,
          no_value=NO_QUEUE),
    Panel("Engine activity per queue", TS, (Query(
        f"avg by ({QUEUE_LABEL}) ({queue_activity(GR_ENGINE)})",
        QUEUE_LEGEND),), "percentunit",
          "Mean graphics-engine activity of the devices each queue holds (a shared device "
          "counts once per holder): low activity on many GPU-hours is quota to give back. "
          "GPM on Hopper and newer, NVML utilisation / 100 on older GPUs.",
          width=8, min=0, max=1, no_value=NO_QUEUE),
))

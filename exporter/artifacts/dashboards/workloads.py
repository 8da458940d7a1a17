"""(d) Kubernetes workloads: GPUs per namespace / pod / container.

Device series carry the pod labels of one owner; `gpu_exporter_pod_gpu_allocation` has one
series per (device, pod, container), so joining on it shows every pod of a shared
(time-sliced) GPU and lets power be split between them.
"""

from __future__ import annotations

from exporter.artifacts.dashboards.spec import (
    HOST, JOB, JOB_VAR, Dashboard, Kind, Panel, Query, Section, Variable, sel,
)

J = sel(JOB)
ALLOC = (f'gpu_exporter_pod_gpu_allocation{{{JOB}, namespace=~"$namespace", '
         'pod=~"$pod"}')
DEVICE = "instance, UUID, GPU_I_ID"
IDLE_BELOW = 0.05
POD_LEGEND = f"{{{{namespace}}}}/{{{{pod}}}}/{{{{container}}}} {{{{{HOST}}}}} gpu {{{{gpu}}}}"
TS, STAT, TABLE = Kind.TIMESERIES, Kind.STAT, Kind.TABLE

NAMESPACE_VAR = Variable("namespace", "Namespace",
                         f"label_values(gpu_exporter_pod_gpu_allocation{J}, namespace)")
POD_VAR = Variable("pod", "Pod", "label_values(gpu_exporter_pod_gpu_allocation"
                   f'{{{JOB}, namespace=~"$namespace"}}, pod)')


def per_container(device_expr: str) -> str:
    """A per-device value repeated on every (pod, container) holding that device."""
    return (f"max by ({DEVICE}, {HOST}, gpu) ({device_expr}) "
            f"* on ({DEVICE}) group_right ({HOST}, gpu) "
            f"group by ({DEVICE}, namespace, pod, container) ({ALLOC})")


ACTIVITY = f"DCGM_FI_PROF_GR_ENGINE_ACTIVE{J}"
ALLOCATED_DEVICES = f"group by ({DEVICE}) ({ALLOC})"
PODS_PER_DEVICE = f"count by ({DEVICE}) (group by ({DEVICE}, namespace, pod) ({ALLOC}))"
POWER_SHARE = (
    f"(max by (instance, UUID, {HOST}, gpu) (DCGM_FI_DEV_POWER_USAGE{J}) / on (instance, UUID) "
    f"count by (instance, UUID) (group by (instance, UUID, namespace, pod) "
    f"(gpu_exporter_pod_gpu_allocation{J}))) "
    f"* on (instance, UUID) group_right ({HOST}, gpu) "
    f"group by (instance, UUID, namespace, pod) ({ALLOC})"
)

OVERVIEW = Section("Allocation", (
    Panel("Pods holding GPUs", STAT, (Query(f"count(group by (namespace, pod) ({ALLOC}))"),),
          "none", "Pods the kubelet reports as holding a GPU or MIG device.", width=6, height=4),
    Panel("Allocated devices", STAT, (Query(f"count({ALLOCATED_DEVICES})"),), "none",
          "GPUs and MIG devices allocated to the selected pods.", width=6, height=4),
    Panel("Shared devices", STAT, (Query(f"count({PODS_PER_DEVICE} > 1) or vector(0)"),),
          "none", "Devices allocated to more than one pod (time-slicing / MPS).",
          width=6, height=4),
    Panel("Idle but allocated", STAT, (Query(
        f"count(max by ({DEVICE}) ({ACTIVITY}) < {IDLE_BELOW} and on ({DEVICE}) "
        f"{ALLOCATED_DEVICES}) or vector(0)"),), "none",
          f"Allocated devices whose engine was active under {IDLE_BELOW:.0%} of the time.",
          width=6, height=4),
    Panel("Allocations", TABLE, (Query(ALLOC, instant=True),), "none",
          "Every (device, pod, container) the kubelet reports; replica > 0 marks a shared "
          "GPU's replica.", width=24),
))

USAGE = Section("Usage per workload", (
    Panel("Engine activity per container", TS, (Query(per_container(ACTIVITY), POD_LEGEND),),
          "percentunit", "Graphics-engine activity of the devices each container holds "
          "(a shared device shows the same value for every pod).", min=0, max=1),
    Panel("GPU utilisation per container", TS, (Query(
        per_container(f"DCGM_FI_DEV_GPU_UTIL{J}"), POD_LEGEND),), "percent",
          "NVML utilisation of the whole GPUs each container holds.", min=0, max=100),
    Panel("Framebuffer per pod", TS, (Query(
        f"sum by (namespace, pod) ({per_container(f'DCGM_FI_DEV_FB_USED{J}')})",
        "{{namespace}}/{{pod}}"),), "mbytes",
          "Framebuffer in use on the devices each pod holds (a shared device is counted "
          "for every pod on it)."),
    Panel("Power per pod (shared GPUs split evenly)", TS, (Query(
        f"sum by (namespace, pod) ({POWER_SHARE})", "{{namespace}}/{{pod}}"),), "watt",
          "GPU power divided by the number of pods on each GPU, then summed per pod."),
    Panel("Allocated devices by activity (idle first)", TABLE, (Query(
        f"sort({per_container(ACTIVITY)})", instant=True),), "percentunit",
          "Candidates for reclaiming: allocated devices doing little.", width=12),
    Panel("Pods per device", TABLE, (Query(PODS_PER_DEVICE, instant=True),), "none",
          "How many pods share each allocated device.", width=12),
))

KUBELET = Section("Attribution health", (
    Panel("Kubelet pod-resources reachable", TS, (Query(
        f"gpu_exporter_kubelet_up{J}", "{{instance}}"),), "bool",
          "0 means pod labels are missing or stale on that node.", width=24, min=0, max=1),
))

WORKLOADS = Dashboard(
    uid="gpu-exporter-k8s-workloads",
    filename="gpu-kubernetes-workloads.json",
    title="GPU Kubernetes workloads",
    description="GPUs per namespace, pod and container; shared GPUs; idle but allocated GPUs.",
    tags=("gpu-exporter", "gpu", "nvidia", "kubernetes"),
    variables=(JOB_VAR, NAMESPACE_VAR, POD_VAR),
    sections=(OVERVIEW, USAGE, KUBELET),
)

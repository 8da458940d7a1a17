"""(d) Kubernetes workloads: GPUs per namespace / pod / container.

The exporter labels a device's own series with its pod only when one container holds it
exclusively. A shared device (time-slicing replicas, a MIG GPU instance split between pods)
keeps unlabelled series, and every holder gets a `gpu_exporter_pod_gpu_allocation` row
instead. Per-workload queries therefore take the labelled series as they are and join the
unlabelled ones onto the allocation rows. Engine activity is GPM's where a GPU has it and
NVML utilisation's before Hopper (`exporter.promql.measures`).
"""

from __future__ import annotations

from exporter.artifacts.dashboards.spec import (
    HOST,
    HOST_LEGEND,
    JOB,
    JOB_VAR,
    NO_ACTIVITY,
    Dashboard,
    Kind,
    Panel,
    Query,
    Section,
    Variable,
    sel,
)
from exporter.promql.measures import GR_ENGINE, Measure, read

J = sel(JOB)
DEVICE = "instance, UUID, GPU_I_ID"
HOLDER = f"{DEVICE}, namespace, pod, container"
IDLE_BELOW = 0.05
POD_LEGEND = (f"{{{{namespace}}}}/{{{{pod}}}}/{{{{container}}}} {HOST_LEGEND} gpu {{{{gpu}}}} "
              "{{GPU_I_ID}}")
TS, STAT, TABLE = Kind.TIMESERIES, Kind.STAT, Kind.TABLE
SELECTED = ('namespace=~"$namespace"', 'pod=~"$pod"')
LABELLED, UNLABELLED = 'pod!=""', 'pod=""'

ALLOC = f"gpu_exporter_pod_gpu_allocation{sel(JOB, *SELECTED)}"

NAMESPACE_VAR = Variable("namespace", "Namespace",
                         f'label_values({{__name__=~"DCGM_F.+|gpu_exporter_pod_gpu_allocation", '
                         f'{JOB}, namespace!=""}}, namespace)')
POD_VAR = Variable("pod", "Pod",
                   f'label_values({{__name__=~"DCGM_F.+|gpu_exporter_pod_gpu_allocation", '
                   f'{JOB}, namespace=~"$namespace", pod!=""}}, pod)')


def holders(*matchers: str) -> str:
    """Return one series per (device, pod, container) holding it, exclusive or shared."""
    return (f'group by ({HOLDER}) ({{__name__=~"DCGM_F.+", {", ".join(matchers)}, {LABELLED}}})'
            f" or group by ({HOLDER}) (gpu_exporter_pod_gpu_allocation{sel(*matchers)})")


def per_container(field: str | Measure, *matchers: str) -> str:
    """Return a per-device field (or GPM measure) on every (pod, container) holding the device."""
    keep = f"{DEVICE}, {HOST}, gpu"
    exclusive = (f"max by ({keep}, namespace, pod, container) "
                 f"({read(field, sel(*matchers, LABELLED))})")
    shared = (f"max by ({keep}) ({read(field, sel(JOB, UNLABELLED))}) "
              f"* on ({DEVICE}) group_right ({HOST}, gpu) "
              f"group by ({HOLDER}) (gpu_exporter_pod_gpu_allocation{sel(*matchers)})")
    return f"{exclusive} or {shared}"


MINE = (JOB, *SELECTED)
ACTIVITY = per_container(GR_ENGINE, *MINE)
POWER_SHARE = (
    f"(max by (instance, UUID, {HOST}, gpu) (DCGM_FI_DEV_POWER_USAGE{J}) / on (instance, UUID) "
    f"count by (instance, UUID) (group by (instance, UUID, namespace, pod) ({holders(JOB)}))) "
    f"* on (instance, UUID) group_right ({HOST}, gpu) "
    f"group by (instance, UUID, namespace, pod) ({holders(*MINE)})"
)
PODS_PER_SHARED_DEVICE = (f"count by ({DEVICE}) (group by ({DEVICE}, namespace, pod) "
                          f"({ALLOC}))")
NO_SHARED = "No device is shared between the selected pods (time-slicing, split MIG instances)"

OVERVIEW = Section("Allocation", (
    Panel("Pods holding GPUs", STAT, (Query(
        f"count(group by (namespace, pod) ({holders(*MINE)}))"),), "none",
          "Pods holding a GPU or MIG device.", width=6, height=4),
    Panel("Allocated devices", STAT, (Query(
        f"count(group by ({DEVICE}) ({holders(*MINE)}))"),), "none",
          "GPUs and MIG devices held by the selected pods.", width=6, height=4),
    Panel("Shared devices", STAT, (Query(
        f"count({PODS_PER_SHARED_DEVICE} > 1) or vector(0)"),), "none",
          "Devices held by more than one pod (time-slicing, MIG instances split between pods).",
          width=6, height=4),
    Panel("Idle but allocated", STAT, (Query(
        f"count(group by ({DEVICE}) (({ACTIVITY}) < {IDLE_BELOW})) or vector(0)"),), "none",
          f"Held devices whose engine was active under {IDLE_BELOW:.0%} of the time.",
          width=6, height=4),
    Panel("Devices and their holders", TABLE, (Query(holders(*MINE), instant=True),), "none",
          "Every (device, pod, container): exclusive holders from the device series' pod "
          "labels, shared holders from the allocation rows.", width=12),
    Panel("Shared device rows", TABLE, (Query(ALLOC, instant=True),), "none",
          "gpu_exporter_pod_gpu_allocation: one row per holder of a shared device; replica "
          "is the time-slicing replica the pod got.", width=12, no_value=NO_SHARED),
))

USAGE = Section("Usage per workload", (
    Panel("Engine activity per container", TS, (Query(ACTIVITY, POD_LEGEND),),
          "percentunit", "Graphics-engine activity of the devices each container holds "
          "(a shared device shows the same value for every holder): GPM on Hopper and "
          "newer, NVML utilisation / 100 on older GPUs.", min=0, max=1,
          no_value=NO_ACTIVITY),
    Panel("GPU utilisation per container", TS, (Query(
        per_container("DCGM_FI_DEV_GPU_UTIL", *MINE), POD_LEGEND),), "percent",
          "NVML utilisation of the whole GPUs each container holds.", min=0, max=100),
    Panel("Framebuffer per pod", TS, (Query(
        f"sum by (namespace, pod) ({per_container('DCGM_FI_DEV_FB_USED', *MINE)})",
        "{{namespace}}/{{pod}}"),), "mbytes",
          "Framebuffer in use on the devices each pod holds (a shared device is counted "
          "for every holder)."),
    Panel("Power per pod (shared GPUs split evenly)", TS, (Query(
        f"sum by (namespace, pod) ({POWER_SHARE})", "{{namespace}}/{{pod}}"),), "watt",
          "Each GPU's power divided by the number of pods on it, summed per pod."),
    Panel("Held devices by activity (idle first)", TABLE, (Query(
        f"sort({ACTIVITY})", instant=True),), "percentunit",
          "Candidates for reclaiming: held devices doing little.", width=12,
          no_value=NO_ACTIVITY),
    Panel("Pods per shared device", TABLE, (Query(PODS_PER_SHARED_DEVICE, instant=True),),
          "none", "How many pods share each shared device.", width=12, no_value=NO_SHARED),
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

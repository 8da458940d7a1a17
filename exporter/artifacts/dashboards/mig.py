"""(c) MIG: per instance and per profile.

NVML reports no utilisation for MIG instances, so activity comes from the GPM profiling
fields alone: on GPUs before Hopper (A100, A30), which have no GPM, MIG instances report no
activity at all, and the activity panels say so. Clocks, power and temperature stay on the
parent GPU's series. On nodes without MIG every panel says that there is none.
"""

from __future__ import annotations

from exporter.artifacts.dashboards.spec import (
    GPU_LEGEND,
    HOST_VAR,
    HOSTS,
    INSTANCE_LEGEND,
    JOB,
    JOB_VAR,
    Dashboard,
    Kind,
    Panel,
    Query,
    Section,
    Variable,
    sel,
)

M = sel(JOB, HOSTS, 'GPU_I_PROFILE=~"$profile"', 'GPU_I_ID!=""')
G = sel(JOB, HOSTS)
TS, STAT, TABLE = Kind.TIMESERIES, Kind.STAT, Kind.TABLE
PROFILE_LEGEND = "{{GPU_I_PROFILE}}"
NO_MIG = "No MIG GPU instances on the selected nodes"
NO_MIG_ACTIVITY = ("No MIG GPU instances here, or only on GPUs before Hopper: NVML reports no "
                   "activity for those")

PROFILE_VAR = Variable(
    "profile", "MIG profile",
    f'label_values({{__name__=~"DCGM_F.+", {JOB}, {HOSTS}, GPU_I_PROFILE!=""}}, GPU_I_PROFILE)',
)

LAYOUT = Section("Layout", (
    Panel("MIG devices", STAT, (Query(f'sum(gpu_exporter_devices{{{JOB}, kind="mig"}})'),),
          "none", "MIG devices (compute instances) the exporters see.", width=6, height=6,
          no_value=NO_MIG),
    Panel("GPU instances by profile", TABLE, (Query(
        f"count by (GPU_I_PROFILE) (DCGM_FI_DEV_FB_USED{M})", instant=True),), "none",
          "How many GPU instances of each profile exist.", width=6, height=6, no_value=NO_MIG),
    Panel("GPU instances", TABLE, (Query(
        f"DCGM_FI_DEV_FB_USED{M} / (DCGM_FI_DEV_FB_USED{M} + DCGM_FI_DEV_FB_FREE{M})",
        instant=True),), "percentunit",
          "Every GPU instance with its framebuffer use (Value column).", width=12, height=6,
          no_value=NO_MIG),
))

PER_INSTANCE = Section("Per instance", (
    Panel("Graphics engine active", TS, (Query(f"DCGM_FI_PROF_GR_ENGINE_ACTIVE{M}",
                                               INSTANCE_LEGEND),),
          "percentunit", "The MIG equivalent of GPU utilisation (and the KEDA MIG trigger); "
          "GPM, so Hopper and newer.", min=0, max=1, no_value=NO_MIG_ACTIVITY),
    Panel("SM active", TS, (Query(f"DCGM_FI_PROF_SM_ACTIVE{M}", INSTANCE_LEGEND),),
          "percentunit", "Share of cycles with at least one warp on an SM (GPM: Hopper and "
          "newer).", min=0, max=1, no_value=NO_MIG_ACTIVITY),
    Panel("Tensor pipe active", TS, (Query(f"DCGM_FI_PROF_PIPE_TENSOR_ACTIVE{M}",
                                           INSTANCE_LEGEND),),
          "percentunit", "Share of cycles the tensor pipe was active (GPM: Hopper and "
          "newer).", min=0, max=1, no_value=NO_MIG_ACTIVITY),
    Panel("Memory interface active", TS, (Query(f"DCGM_FI_PROF_DRAM_ACTIVE{M}",
                                                INSTANCE_LEGEND),),
          "percentunit", "Share of cycles the instance's HBM slice was busy (GPM: Hopper and "
          "newer).", min=0, max=1, no_value=NO_MIG_ACTIVITY),
    Panel("Framebuffer used share", TS, (Query(
        f"DCGM_FI_DEV_FB_USED{M} / (DCGM_FI_DEV_FB_USED{M} + DCGM_FI_DEV_FB_FREE{M})",
        INSTANCE_LEGEND),), "percentunit", "Used share of each GPU instance's framebuffer.",
          min=0, max=1, no_value=NO_MIG),
    Panel("Framebuffer used", TS, (Query(f"DCGM_FI_DEV_FB_USED{M}", INSTANCE_LEGEND),),
          "mbytes", "Framebuffer in use per GPU instance.", no_value=NO_MIG),
))

PER_PROFILE = Section("Per profile", (
    Panel("Mean engine activity by profile", TS, (Query(
        f"avg by (GPU_I_PROFILE) (DCGM_FI_PROF_GR_ENGINE_ACTIVE{M})", PROFILE_LEGEND),),
          "percentunit", "Are the small or the large slices the busy ones? (GPM: Hopper and "
          "newer)", min=0, max=1, no_value=NO_MIG_ACTIVITY),
    Panel("Framebuffer used by profile", TS, (Query(
        f"sum by (GPU_I_PROFILE) (DCGM_FI_DEV_FB_USED{M}) / (sum by (GPU_I_PROFILE) "
        f"(DCGM_FI_DEV_FB_USED{M}) + sum by (GPU_I_PROFILE) (DCGM_FI_DEV_FB_FREE{M}))",
        PROFILE_LEGEND),), "percentunit", "Framebuffer use summed over instances of a profile.",
          min=0, max=1, no_value=NO_MIG),
))

PARENTS = Section("Parent GPUs", (
    Panel("Power of GPUs in MIG mode", TS, (Query(
        f"DCGM_FI_DEV_POWER_USAGE{G} and on (instance, UUID) DCGM_FI_DEV_FB_USED{M}",
        GPU_LEGEND),), "watt", "Power is a whole-GPU value, shared by all its instances.",
          no_value=NO_MIG),
    Panel("Temperature of GPUs in MIG mode", TS, (Query(
        f"DCGM_FI_DEV_GPU_TEMP{G} and on (instance, UUID) DCGM_FI_DEV_FB_USED{M}",
        GPU_LEGEND),), "celsius", "Core temperature of the parent GPUs.", no_value=NO_MIG),
    Panel("GPM support", TABLE, (Query(
        f"gpu_exporter_gpm_supported{sel(JOB)}", instant=True),), "bool",
          "1 where GPM answers (Hopper and newer); without it the MIG activity panels stay "
          "empty, and `reason` says why: unsupported (a GPU before Hopper), or "
          "no_permission (the driver restricts profiling to administrators).", width=24,
          height=6),
))

MIG = Dashboard(
    uid="gpu-exporter-mig",
    filename="gpu-mig.json",
    title="GPU MIG instances",
    description="MIG GPU instances per instance and per profile, on the profiling fields.",
    tags=("gpu-exporter", "gpu", "nvidia", "mig"),
    variables=(JOB_VAR, HOST_VAR, PROFILE_VAR),
    sections=(LAYOUT, PER_INSTANCE, PER_PROFILE, PARENTS),
)

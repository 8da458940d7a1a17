"""(a) Fleet overview: what GPUs there are, how busy and healthy they are, and the exporter."""

from __future__ import annotations

from exporter.artifacts.dashboards.spec import (
    GPU_LEGEND,
    HOPPER_ONLY,
    HOST,
    HOST_LEGEND,
    HOST_VAR,
    HOSTS,
    INSTANCE_LEGEND,
    JOB,
    JOB_VAR,
    NO_ACTIVITY,
    NO_XID,
    Dashboard,
    Kind,
    Panel,
    Query,
    Section,
    sel,
)
from exporter.promql.measures import GR_ENGINE

S = sel(JOB, HOSTS)
JS = sel(JOB)
TS, STAT, TABLE = Kind.TIMESERIES, Kind.STAT, Kind.TABLE


def _bit(bit: int) -> str:
    """Return the GPUs whose clock-event-reasons bitmask has `bit` set (0 when none)."""
    return (f"count(floor(DCGM_FI_DEV_CLOCKS_EVENT_REASONS{S} / {bit}) % 2 == 1) "
            f"or vector(0)")


INVENTORY = Section("Inventory", (
    Panel("GPUs", STAT, (Query(f'sum(gpu_exporter_devices{{{JOB}, kind="gpu"}})'),),
          "none", "Physical GPUs the exporters currently see.", width=4, height=4),
    Panel("MIG devices", STAT, (Query(f'sum(gpu_exporter_devices{{{JOB}, kind="mig"}})'),),
          "none", "MIG devices (compute instances) the exporters currently see.",
          width=4, height=4),
    Panel("Nodes", STAT, (Query(f"count(count by ({HOST}) (DCGM_FI_DEV_POWER_USAGE{S}))"),),
          "none", "Nodes reporting GPU metrics.", width=4, height=4),
    Panel("Fleet power draw", STAT, (Query(f"sum(DCGM_FI_DEV_POWER_USAGE{S})"),), "watt",
          "Sum of the power draw of every selected GPU.", width=4, height=4),
    Panel("Fleet framebuffer used", STAT, (Query(
        f"sum(DCGM_FI_DEV_FB_USED{S}) / (sum(DCGM_FI_DEV_FB_USED{S}) + "
        f"sum(DCGM_FI_DEV_FB_FREE{S}))"),), "percentunit",
          "Framebuffer in use across the selection (MIG instances counted once each).",
          width=4, height=4, min=0, max=1),
    Panel("Exporters up", STAT, (Query(f"sum(up{JS})"),), "none",
          "Scrape targets of the selected jobs that answered their last scrape.",
          width=4, height=4),
    Panel("GPUs by model and node", TABLE, (Query(
        f"count by ({HOST}, modelName) (DCGM_FI_DEV_POWER_USAGE{S})", instant=True),),
          "none", "How many GPUs of each model every node has.", width=12),
    Panel("Driver versions", TABLE, (Query(
        f"count by ({HOST}, DCGM_FI_DRIVER_VERSION) (DCGM_FI_DEV_POWER_USAGE{S})",
        instant=True),), "none", "NVIDIA driver version per node.", width=12),
))

UTILISATION = Section("Utilisation", (
    Panel("GPU utilisation (whole GPUs)", TS, (Query(f"DCGM_FI_DEV_GPU_UTIL{S}", GPU_LEGEND),),
          "percent", "NVML utilisation; not reported on GPUs in MIG mode.", min=0, max=100),
    Panel("Graphics engine active", TS, (Query(GR_ENGINE.select(S), INSTANCE_LEGEND),),
          "percentunit", "Share of time the graphics/compute engine was busy, per GPU or "
          "MIG instance: from GPM on Hopper and newer, from NVML utilisation / 100 on older "
          "GPUs (whose MIG instances report none).", min=0, max=1, no_value=NO_ACTIVITY),
    Panel("Mean engine activity by node", TS, (Query(
        f"avg by ({HOST}) ({GR_ENGINE.select(S)})", HOST_LEGEND),),
          "percentunit", "Average graphics engine activity of every GPU/MIG instance on a "
          "node (GPM, or NVML utilisation before Hopper).", min=0, max=1,
          no_value=NO_ACTIVITY),
    Panel("Tensor pipe active", TS, (Query(f"DCGM_FI_PROF_PIPE_TENSOR_ACTIVE{S}",
                                           INSTANCE_LEGEND),),
          "percentunit", "Share of cycles the tensor pipe was active (GPM: Hopper and "
          "newer).", min=0, max=1, no_value=HOPPER_ONLY),
))

MEMORY = Section("Framebuffer", (
    Panel("Framebuffer used", TS, (Query(
        f"DCGM_FI_DEV_FB_USED{S} / (DCGM_FI_DEV_FB_USED{S} + DCGM_FI_DEV_FB_FREE{S})",
        INSTANCE_LEGEND),), "percentunit",
          "Used share of usable framebuffer per GPU or MIG instance; near 1 means the next "
          "allocation may fail with out-of-memory.", min=0, max=1),
    Panel("Framebuffer used (MiB)", TS, (Query(f"DCGM_FI_DEV_FB_USED{S}", INSTANCE_LEGEND),),
          "mbytes", "Framebuffer in use per GPU or MIG instance."),
))

POWER = Section("Power and energy", (
    Panel("Power draw", TS, (Query(f"DCGM_FI_DEV_POWER_USAGE{S}", GPU_LEGEND),), "watt",
          "Power draw per GPU."),
    Panel("Power draw / limit", TS, (Query(
        f"DCGM_FI_DEV_POWER_USAGE{S} / DCGM_FI_DEV_POWER_MGMT_LIMIT{S}", GPU_LEGEND),),
          "percentunit", "Power draw relative to the enforced power management limit.",
          min=0, max=1),
    Panel("Energy use by node", TS, (Query(
        f"sum by ({HOST}) (rate(DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{S}[$__rate_interval]))"
        " / 1000", HOST_LEGEND),), "watt",
          "Average power over the rate window, from the energy counter (mJ)."),
    Panel("Energy in time range", STAT, (Query(
        f"sum(increase(DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{S}[$__range])) / 3.6e9"),),
          "kwatth", "Energy the selected GPUs consumed over the dashboard's time range.",
          width=12),
))

HEALTH = Section("Health", (
    Panel("XID errors", TS, (Query(
        f"sum by ({HOST}, gpu, xid) (increase(gpu_exporter_xid_errors_total{S}"
        "[$__rate_interval]))", f"{GPU_LEGEND} xid {{{{xid}}}}"),), "short",
          "XID events per code. 79 = fell off the bus, 94 = contained ECC, 48/63/64/92/95 = "
          "memory errors, 13/31/43 = application faults.", no_value=NO_XID),
    Panel("Uncorrectable ECC errors (volatile)", TS, (Query(
        f"increase(DCGM_FI_DEV_ECC_DBE_VOL_TOTAL{S}[$__rate_interval])", GPU_LEGEND),),
          "short", "Double-bit ECC errors since the last driver load."),
    Panel("Correctable ECC errors (volatile)", TS, (Query(
        f"increase(DCGM_FI_DEV_ECC_SBE_VOL_TOTAL{S}[$__rate_interval])", GPU_LEGEND),),
          "short", "Single-bit ECC errors; a steady climb precedes row remapping."),
    Panel("Remapped rows", TS, (
        Query(f"DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS{S}", f"{GPU_LEGEND} uncorrectable"),
        Query(f"DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS{S}", f"{GPU_LEGEND} correctable"),
    ), "short", "Rows remapped in HBM; a failure means the GPU needs service."),
    Panel("GPUs with row-remap failure", STAT, (Query(
        f"count(DCGM_FI_DEV_ROW_REMAP_FAILURE{S} == 1) or vector(0)"),), "none",
          "GPUs whose row remapping failed: drain and send for repair.", width=6, height=8),
    Panel("Throttled GPUs by reason", TS, (
        Query(_bit(0x8), "HW slowdown"),
        Query(_bit(0x20), "SW thermal slowdown"),
        Query(_bit(0x40), "HW thermal slowdown"),
        Query(_bit(0x80), "HW power brake"),
    ), "none", "Number of GPUs with each clock event reason active.", width=18),
    Panel("PCIe replays", TS, (Query(
        f"rate(DCGM_FI_DEV_PCIE_REPLAY_COUNTER{S}[$__rate_interval])", GPU_LEGEND),),
          "ops", "PCIe link-level retries per second; sustained growth points at a bad riser, "
          "slot or cable."),
    Panel("Temperature", TS, (
        Query(f"DCGM_FI_DEV_GPU_TEMP{S}", f"{GPU_LEGEND} core"),
        Query(f"DCGM_FI_DEV_MEMORY_TEMP{S}", f"{GPU_LEGEND} memory"),
    ), "celsius", "GPU core and HBM temperature."),
))

EXPORTER = Section("Exporter", (
    Panel("Exporter versions", TABLE, (Query(
        f"count by (instance, version) (gpu_exporter_build_info{JS})", instant=True),),
          "none", "Build of every exporter instance.", width=8),
    Panel("NVML up", TS, (Query(f"gpu_exporter_nvml_up{JS}", "{{instance}}"),), "bool",
          "1 when the last poll reached NVML.", width=8, min=0, max=1),
    Panel("Seconds since last successful poll", TS, (Query(
        f"time() - gpu_exporter_last_poll_success_timestamp_seconds{JS}", "{{instance}}"),),
          "s", "Age of the data each exporter serves.", width=8),
    Panel("Poll duration", TS, (Query(f"gpu_exporter_poll_duration_seconds{JS}",
                                      "{{instance}}"),),
          "s", "Time one NVML poll took.", width=8),
    Panel("Poll and NVML errors", TS, (
        Query(f"sum by (instance, reason) (rate(gpu_exporter_poll_errors_total{JS}"
              f"[$__rate_interval])) or sum by (instance) (0 * gpu_exporter_nvml_up{JS})",
              "{{instance}} poll {{reason}}"),
        Query(f"sum by (instance, function) (rate(gpu_exporter_nvml_errors_total{JS}"
              f"[$__rate_interval])) or sum by (instance) (0 * gpu_exporter_nvml_up{JS})",
              "{{instance}} {{function}}"),
    ), "ops", "Failed polls and failed NVML calls per second (0 when none).", width=8),
    Panel("Scrapes", TS, (Query(
        f"rate(gpu_exporter_scrapes_total{JS}[$__rate_interval])", "{{instance}}"),),
          "reqps", "Scrapes answered per second.", width=8),
))

FLEET = Dashboard(
    uid="gpu-exporter-fleet",
    filename="gpu-fleet-overview.json",
    title="GPU fleet overview",
    description="Every GPU the gpu-exporter (or dcgm-exporter) fleet reports: inventory, "
                "utilisation, framebuffer, power, health and exporter health.",
    tags=("gpu-exporter", "gpu", "nvidia"),
    variables=(JOB_VAR, HOST_VAR),
    sections=(INVENTORY, UTILISATION, MEMORY, POWER, HEALTH, EXPORTER),
)

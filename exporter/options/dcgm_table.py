"""dcgm-exporter's own options, so that its command lines and the GPU Operator's environment
work unchanged: those implemented here, then those accepted with no meaning here.

Where one of ours means the same (`-a`, `-c`, `-x`, `--debug`, ...) its spelling sits on our
option in `serve_table.py` instead. Implemented ones read a GPU_EXPORTER_* variable before
dcgm-exporter's. The others (`ignored=`) read only dcgm-exporter's variable: setting one logs
one start-up warning that says why it does nothing, and never stops the exporter.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from exporter.options.option import Alias, Option, declared_options
from exporter.options.serve_table import K8S_GROUP, SERVE, SERVE_AND_DOCTOR
from exporter.options.values import (
    Choice,
    ConfigMapName,
    ConfigMapRef,
    DeviceSelection,
    Duration,
    FilePath,
    GoDuration,
    Hostengine,
    Integer,
    RegexList,
    Switch,
    Text,
    Value,
)

GpuIdType = Literal["uid", "device-name"]
GPU_ID_TYPES: tuple[GpuIdType, ...] = ("uid", "device-name")

IGNORED_GROUP = "dcgm-exporter options without effect here"
IGNORED_GROUP_DESCRIPTION = ("accepted so that dcgm-exporter's command lines keep working; "
                             "each one set logs a warning at start-up saying why it does "
                             "nothing")

USE_OLD_NAMESPACE: Option[bool] = Option(
    "use_old_namespace", Switch(), False, commands=SERVE,
    flags=("-o", "--use-old-namespace"),
    env=("GPU_EXPORTER_USE_OLD_NAMESPACE", "DCGM_EXPORTER_USE_OLD_NAMESPACE"),
    help="dcgm-exporter 1.x label names: `uuid` for `UUID`, and `container_name`, "
         "`pod_name`, `pod_namespace` for `container`, `pod`, `namespace`",
    fills="exposition.use_old_namespace")
REPLACE_BLANKS_IN_MODEL_NAME: Option[bool] = Option(
    "replace_blanks_in_model_name", Switch(), False, commands=SERVE,
    flags=("-rbmn", "--replace-blanks-in-model-name"),
    env=("GPU_EXPORTER_REPLACE_BLANKS_IN_MODEL_NAME",
         "DCGM_EXPORTER_REPLACE_BLANKS_IN_MODEL_NAME"),
    help="`modelName` with dashes for blanks, `NVIDIA-H200-NVL`, as device-plugin node labels "
         "spell it",
    fills="exposition.replace_blanks_in_model_name")
CLOCK_EVENTS_COUNT_WINDOW: Option[float] = Option(
    "clock_events_count_window", Duration("s"), 300.0, commands=SERVE,
    flags=("--clock-events-count-window",), env=("GPU_EXPORTER_CLOCK_EVENTS_COUNT_WINDOW",),
    default_text="`5m`",
    help="window of `DCGM_EXP_CLOCK_EVENTS_COUNT` (polls per clock event reason); a bare "
         "number is seconds",
    aliases=(Alias(Duration("ms"), "dcgm-exporter's spelling, a bare number is milliseconds",
                   flags=("--clock-events-count-window-size",),
                   env=("DCGM_EXPORTER_CLOCK_EVENTS_COUNT_WINDOW_SIZE",)),),
    fills="devices.clock_events_count_window_s")
HPC_JOB_MAPPING_DIR: Option[Path | None] = Option(
    "hpc_job_mapping_dir", FilePath(), None, commands=SERVE,
    flags=("--hpc-job-mapping-dir",),
    env=("GPU_EXPORTER_HPC_JOB_MAPPING_DIR", "DCGM_HPC_JOB_MAPPING_DIR"), metavar="DIR",
    help="directory of files named `<gpu>` or `<gpu>.<gpu instance>` listing a job id per "
         "line: each such device's series are repeated per job with an `hpc_job` label",
    fills="exposition.hpc_job_mapping_dir")

CONTAINER_LABELS: Option[bool] = Option(
    "container_labels", Switch(), False, commands=SERVE,
    flags=("--container-labels",),
    env=("GPU_EXPORTER_CONTAINER_LABELS", "DCGM_EXPORTER_CONTAINER_LABELS"),
    help="outside Kubernetes, a `container` label from a Docker-compatible runtime API "
         "(needs `--container-runtime-socket`; with `-k` it is ignored, with a warning)")
CONTAINER_RUNTIME_SOCKET: Option[Path | None] = Option(
    "container_runtime_socket", FilePath(), None, commands=SERVE,
    flags=("--container-runtime-socket",),
    env=("GPU_EXPORTER_CONTAINER_RUNTIME_SOCKET", "DCGM_CONTAINER_RUNTIME_SOCKET"),
    metavar="PATH", help="the Unix socket of that runtime API",
    fills="serve.container_runtime_socket")
GPU_ID_TYPE: Option[GpuIdType] = Option(
    "kubernetes_gpu_id_type", Choice(GPU_ID_TYPES), "uid", commands=SERVE_AND_DOCTOR,
    group=K8S_GROUP, flags=("--kubernetes-gpu-id-type",),
    env=("GPU_EXPORTER_KUBERNETES_GPU_ID_TYPE", "DCGM_EXPORTER_KUBERNETES_GPU_ID_TYPE"),
    help="how kubelet device ids name GPUs: `uid` (UUIDs) or `device-name` (`nvidia0`, "
         "GKE's device plugin)",
    fills="kubernetes.gpu_id_type")
ENABLE_POD_LABELS: Option[bool] = Option(
    "kubernetes_enable_pod_labels", Switch(), False, commands=SERVE_AND_DOCTOR,
    group=K8S_GROUP, flags=("--kubernetes-enable-pod-labels",),
    env=("GPU_EXPORTER_KUBERNETES_ENABLE_POD_LABELS",
         "DCGM_EXPORTER_KUBERNETES_ENABLE_POD_LABELS"),
    help="copy the pod's labels onto its series, keys with `_` for other characters "
         "(needs API access)",
    fills="kubernetes.enable_pod_labels")
ENABLE_POD_UID: Option[bool] = Option(
    "kubernetes_enable_pod_uid", Switch(), False, commands=SERVE_AND_DOCTOR,
    group=K8S_GROUP, flags=("--kubernetes-enable-pod-uid",),
    env=("GPU_EXPORTER_KUBERNETES_ENABLE_POD_UID", "DCGM_EXPORTER_KUBERNETES_ENABLE_POD_UID"),
    help="add a `pod_uid` label (needs API access)",
    fills="kubernetes.enable_pod_uid")
POD_LABEL_ALLOWLIST: Option[tuple[str, ...]] = Option(
    "kubernetes_pod_label_allowlist", RegexList(), (), commands=SERVE_AND_DOCTOR,
    group=K8S_GROUP, flags=("--kubernetes-pod-label-allowlist-regex",),
    env=("GPU_EXPORTER_KUBERNETES_POD_LABEL_ALLOWLIST_REGEX",
         "DCGM_EXPORTER_KUBERNETES_POD_LABEL_ALLOWLIST_REGEX"),
    default_text="every label",
    help="with `--kubernetes-enable-pod-labels`: only label keys matching one of these "
         "comma-separated regexes",
    fills="kubernetes.pod_label_allowlist")
VIRTUAL_GPUS: Option[bool] = Option(
    "kubernetes_virtual_gpus", Switch(), False, commands=SERVE_AND_DOCTOR, group=K8S_GROUP,
    flags=("--kubernetes-virtual-gpus",),
    env=("GPU_EXPORTER_KUBERNETES_VIRTUAL_GPUS", "KUBERNETES_VIRTUAL_GPUS"),
    help="shared GPUs (time-slicing, MPS): one copy of each series per sharing pod, with a "
         "`vgpu` label; `FB_USED` and `GPU_UTIL` from that pod's processes (needs `hostPID` "
         "and API access)",
    fills="kubernetes.virtual_gpus")
DRA: Option[bool] = Option(
    "kubernetes_enable_dra", Switch(), False, commands=SERVE_AND_DOCTOR, group=K8S_GROUP,
    flags=("--kubernetes-enable-dra",),
    env=("GPU_EXPORTER_KUBERNETES_ENABLE_DRA", "KUBERNETES_ENABLE_DRA"),
    help="attribute GPUs allocated through Dynamic Resource Allocation (driver "
         "`gpu.nvidia.com`; needs API access)",
    fills="kubernetes.dra")
CONFIGMAP_DATA: Option[ConfigMapName | None] = Option(
    "configmap_data", ConfigMapRef(), None, commands=SERVE_AND_DOCTOR, group=K8S_GROUP,
    flags=("-m", "--configmap-data"),
    env=("GPU_EXPORTER_CONFIGMAP_DATA", "DCGM_EXPORTER_CONFIGMAP_DATA"),
    default_text="`none`",
    help="read the collectors CSV from key `metrics` of this ConfigMap, falling back to the "
         "collectors file (needs API access)",
    fills="kubernetes.configmap")

MAX_KEEP_SAMPLES = 2**31 - 1
"""DCGM keeps a watch's sample count in an int32."""

_NO_DUMPS = "this exporter writes no debug dumps"
_NO_DCGM_LOG = "there is no DCGM library to log; `--log-level` sets this exporter's logging"
_REENUMERATED = ("GPUs that come or go are found by re-enumeration (every minute, and at "
                 "once after a GPU is lost)")


def _ignored_switch(name: str, flag: str, env: str, help_: str, reason: str) -> Option[bool]:
    """Return a compatibility-only switch of serve, which has no effect here for `reason`."""
    return Option(name, Switch(), False, help_, SERVE, group=IGNORED_GROUP, flags=(flag,),
                  env=(env,), ignored=reason)


def _ignored_text(name: str, flags: tuple[str, ...], env: str, help_: str, reason: str,
                  metavar: str, value: Value[str] | None = None) -> Option[str | None]:
    """Return a compatibility-only option of serve that takes text, which has no effect here
    for `reason`; `value` checks the text as dcgm-exporter checks it (None: any text)."""
    return Option(name, value or Text(), None, help_, SERVE, group=IGNORED_GROUP, flags=flags,
                  env=(env,), metavar=metavar, ignored=reason)


REMOTE_HOSTENGINE_INFO = _ignored_text(
    "remote_hostengine_info", ("-r", "--remote-hostengine-info"),
    "DCGM_REMOTE_HOSTENGINE_INFO", "address of an external DCGM `nv-hostengine`: "
    "`HOST:PORT`, `tcp://HOST:PORT`, `unix:///PATH` or `vsock://CID:PORT`",
    "no DCGM hostengine is used; NVML is read directly", "ADDRESS", Hostengine())
SWITCH_DEVICES = _ignored_text(
    "switch_devices", ("-s", "--switch-devices"), "DCGM_EXPORTER_OTHER_DEVICES_STR",
    "NVSwitches and NVLinks to export (`--devices`' syntax)", "NVSwitch entities and their "
    "links are not exported, only GPUs (per-link fields on each GPU's own NVLinks) and MIG "
    "instances", "SELECTION", DeviceSelection())
CPU_DEVICES = _ignored_text(
    "cpu_devices", ("-p", "--cpu-devices"), "DCGM_EXPORTER_CPU_DEVICES_STR",
    "CPUs and CPU cores to export (`--devices`' syntax)", "CPU entities are not exported, "
    "only GPUs and MIG instances", "SELECTION", DeviceSelection())
WEB_SYSTEMD_SOCKET = _ignored_switch(
    "web_systemd_socket", "--web-systemd-socket", "DCGM_EXPORTER_SYSTEMD_SOCKET",
    "systemd socket activation", "systemd socket activation is not supported; the exporter "
    "listens on `--web.listen-address`")
ENABLE_PPROF = _ignored_switch(
    "enable_pprof", "--enable-pprof", "DCGM_EXPORTER_ENABLE_PPROF", "serve `/debug/pprof`",
    "there is no Go runtime to profile")
FAKE_GPUS = _ignored_switch(
    "fake_gpus", "--fake-gpus", "DCGM_EXPORTER_USE_FAKE_GPUS", "accept DCGM's fake GPUs",
    "there is no DCGM here; `--backend sim` simulates a node")
ENABLE_DCGM_LOG = _ignored_switch(
    "enable_dcgm_log", "--enable-dcgm-log", "DCGM_EXPORTER_ENABLE_DCGM_LOG",
    "DCGM's own log on stdout", _NO_DCGM_LOG)
DCGM_LOG_LEVELS = ("NONE", "FATAL", "ERROR", "WARN", "INFO", "DEBUG", "VERB")
"""dcgm-exporter's DCGMDbgLvlValues: it refuses any other level at start-up."""
DCGM_LOG_LEVEL = _ignored_text(
    "dcgm_log_level", ("--dcgm-log-level",), "DCGM_EXPORTER_DCGM_LOG_LEVEL",
    "level of DCGM's own log", _NO_DCGM_LOG, "LEVEL", Choice(DCGM_LOG_LEVELS))
DUMP_ENABLED = _ignored_switch(
    "dump_enabled", "--dump-enabled", "DCGM_EXPORTER_DUMP_ENABLED",
    "debug dumps of each scrape to files", _NO_DUMPS)
DUMP_DIRECTORY = _ignored_text(
    "dump_directory", ("--dump-directory",), "DCGM_EXPORTER_DUMP_DIRECTORY",
    "where debug dumps go", _NO_DUMPS, "DIR")
DUMP_RETENTION = _ignored_text(
    "dump_retention", ("--dump-retention",), "DCGM_EXPORTER_DUMP_RETENTION",
    "hours debug dumps are kept", _NO_DUMPS, "HOURS")
DUMP_COMPRESSION = _ignored_switch(
    "dump_compression", "--dump-compression", "DCGM_EXPORTER_DUMP_COMPRESSION",
    "gzip debug dumps", _NO_DUMPS)
DISABLE_STARTUP_VALIDATE = _ignored_switch(
    "disable_startup_validate", "--disable-startup-validate", "DISABLE_STARTUP_VALIDATE",
    "skip the DCGM prerequisite checks", "there are no DCGM prerequisites; a missing driver "
    "is retried, not fatal (`gpu-exporter doctor` checks the node)")
ENABLE_GPU_BIND_UNBIND_WATCH = _ignored_switch(
    "enable_gpu_bind_unbind_watch", "--enable-gpu-bind-unbind-watch",
    "DCGM_EXPORTER_ENABLE_GPU_BIND_UNBIND_WATCH", "watch GPU bind and unbind events",
    _REENUMERATED)
GPU_BIND_UNBIND_POLL_INTERVAL = _ignored_text(
    "gpu_bind_unbind_poll_interval", ("--gpu-bind-unbind-poll-interval",),
    "DCGM_EXPORTER_GPU_BIND_UNBIND_POLL_INTERVAL", "poll interval of that watch",
    _REENUMERATED, "DURATION")

_NO_WATCHES = ("NVML is read directly at each poll; there are no DCGM field watches "
                "whose samples to keep")
WATCH_MAX_KEEP_AGE: Option[float] = Option(
    "watch_max_keep_age", GoDuration(), 600.0, commands=SERVE, group=IGNORED_GROUP,
    flags=("--watch-max-keep-age",), env=("DCGM_EXPORTER_WATCH_MAX_KEEP_AGE",),
    default_text="`10m0s`", ignored=_NO_WATCHES,
    help="how long DCGM keeps a watched field's samples, a Go duration (`0s`: no age limit, "
         "if there is a sample limit)")
WATCH_MAX_KEEP_SAMPLES: Option[int] = Option(
    "watch_max_keep_samples", Integer(minimum=0, maximum=MAX_KEEP_SAMPLES), 0,
    commands=SERVE, group=IGNORED_GROUP, flags=("--watch-max-keep-samples",),
    env=("DCGM_EXPORTER_WATCH_MAX_KEEP_SAMPLES",), ignored=_NO_WATCHES,
    help="how many samples of a watched field DCGM keeps (`0`: no count limit, if there is "
         "an age limit)")

DCGM_OPTIONS: tuple[Option[object], ...] = declared_options(globals())
GROUP_DESCRIPTIONS = {IGNORED_GROUP: IGNORED_GROUP_DESCRIPTION}

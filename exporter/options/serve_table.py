"""The options of `serve` (and those `doctor` shares with it, so it checks what serve would do).

Each also reads the GPU_EXPORTER_* variable shown and, where dcgm-exporter has one, its
variable after ours, so a GPU Operator ClusterPolicy written for dcgm-exporter keeps working.
Order here is the order of --help and of the flag table in docs/configuration.md.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from exporter.devices.filter import ALL_DEVICES, DeviceFilter
from exporter.k8s.config import DEFAULT_POD_RESOURCES_SOCKET, Scope
from exporter.k8s.inference_labels import PodLabelSelection
from exporter.nodefaults.config import (
    DEFAULT_CONDITION_TYPE,
    DEFAULT_NODE_SELECTOR,
    DEFAULT_TAINT_KEY,
    DEFAULT_TAINT_MAX_SHARE,
)
from exporter.options.option import Alias, Command, Option, declared_options
from exporter.options.values import (
    Choice,
    Devices,
    Duration,
    FilePath,
    Integer,
    LenientGoDuration,
    Listen,
    ListenAddress,
    PodLabels,
    Repeated,
    Separated,
    Share,
    Switch,
    SwitchTo,
    Text,
)

BackendName = Literal["auto", "nvml", "sim"]
LogFormat = Literal["text", "json"]
LogLevel = Literal["debug", "info", "warning", "error"]
HostnameLabel = Literal["hostname", "Hostname"]

BACKENDS: tuple[BackendName, ...] = ("auto", "nvml", "sim")
LOG_FORMATS: tuple[LogFormat, ...] = ("text", "json")
LOG_LEVELS: tuple[LogLevel, ...] = ("debug", "info", "warning", "error")
HOSTNAME_LABELS: tuple[HostnameLabel, ...] = ("hostname", "Hostname")
SCOPES: tuple[Scope, ...] = ("node", "pod")

DEBUG_SWITCH: SwitchTo[LogLevel] = SwitchTo("debug", "info")
"""dcgm-exporter's `--debug`: true is level debug, false the default level."""

SERVE: frozenset[Command] = frozenset({"serve"})
SERVE_AND_DOCTOR: frozenset[Command] = frozenset({"serve", "doctor"})
SERVE_AND_GENERATE: frozenset[Command] = frozenset({"serve", "generate"})
DOCTOR: frozenset[Command] = frozenset({"doctor"})

SIM_GROUP = "simulated node (--backend sim)"
K8S_GROUP = "Kubernetes"
FAULTS_GROUP = "GPU faults on the node (API server writes, all off by default)"

BACKEND: Option[BackendName] = Option(
    "backend", Choice(BACKENDS), "auto", commands=SERVE_AND_DOCTOR,
    flags=("--backend",), env=("GPU_EXPORTER_BACKEND",),
    help="device backend: `auto` = `nvml`; with no NVIDIA driver it exits and says to use "
         "`sim`",
    fills="serve.backend")
SIM_PROFILE: Option[str] = Option(
    "sim_profile", Text(), "h200-mig", commands=SERVE_AND_DOCTOR, group=SIM_GROUP,
    flags=("--sim.profile",), env=("GPU_EXPORTER_SIM_PROFILE",), metavar="PROFILE",
    help="simulated node: `h100-8`, `h200-mig`, `a100-4`, `a100-timesliced`, `l4-1`",
    fills="sim.profile")
SIM_MIG_CONFIG: Option[str | None] = Option(
    "sim_mig_config", Text(), None, commands=SERVE, group=SIM_GROUP,
    flags=("--sim.mig-config",), env=("GPU_EXPORTER_SIM_MIG_CONFIG",), metavar="FILE[:NAME]",
    help="start the simulated GPUs with config NAME of this mig-parted file applied (the "
         "only one when NAME is left out), as the MIG Manager would",
    fills="sim.mig_config")
SIM_SEED: Option[int] = Option(
    "sim_seed", Integer(), 0, commands=SERVE_AND_DOCTOR, group=SIM_GROUP,
    flags=("--sim.seed",), env=("GPU_EXPORTER_SIM_SEED",),
    help="simulated values are deterministic per seed",
    fills="sim.seed")
SIM_FAULTS: Option[tuple[str, ...]] = Option(
    "sim_faults", Repeated(Text()), (), commands=SERVE_AND_DOCTOR, group=SIM_GROUP,
    flags=("--sim.fault",), env=("GPU_EXPORTER_SIM_FAULTS",), metavar="SPEC",
    help="scripted fault, repeatable, e.g. `xid,code=79,gpu=0,at=30s` (see Simulated faults)",
    fills="sim.faults")
SIM_BOOT_ID: Option[str | None] = Option(
    "sim_boot_id", Text(), None, commands=SERVE, group=SIM_GROUP,
    flags=("--sim.boot-id",), env=("GPU_EXPORTER_SIM_BOOT_ID",), metavar="ID",
    default_text="the host's",
    help="the simulated node's boot id, which held faults record (a fault a reboot clears "
         "ends when it differs)",
    fills="sim.boot_id")
SIM_KUBELET: Option[bool] = Option(
    "sim_kubelet", Switch(), False, commands=SERVE, group=SIM_GROUP,
    flags=("--sim.kubelet",), env=("GPU_EXPORTER_SIM_KUBELET",),
    help="also serve simulated pod allocations on a pod-resources socket (implies `-k`)",
    fills="sim.kubelet")
CONFIG_FILE: Option[Path | None] = Option(
    "config_file", FilePath(), None, commands=SERVE,
    flags=("--config-file",), env=("GPU_EXPORTER_CONFIG_FILE", "DCGM_EXPORTER_CONFIG_FILE"),
    help="dcgm-exporter's YAML config file, versions 1 and 2 (see `docs/config-file.md`), "
         "read once at start-up; a flag or variable that is set beats the file",
    fills="serve.config_file")
COLLECTORS: Option[Path | None] = Option(
    "collectors", FilePath(), None, commands=SERVE_AND_GENERATE,
    flags=("-f", "--collectors"), env=("GPU_EXPORTER_COLLECTORS", "DCGM_EXPORTER_COLLECTORS"),
    default_text="built-in `collectors.csv`",
    help="fields to export, a CSV in dcgm-exporter's format (dcgm-exporter's default is "
         "`/etc/dcgm-exporter/default-counters.csv`)")
COLLECT_INTERVAL: Option[float] = Option(
    "collect_interval", Duration("ms"), 15.0, commands=SERVE,
    flags=("-c", "--collect-interval"),
    env=("GPU_EXPORTER_COLLECT_INTERVAL", "DCGM_EXPORTER_INTERVAL"), default_text="`15s`",
    help="time between polls, e.g. `15s`, `500ms`; a bare number is milliseconds "
         "(dcgm-exporter's default is `30000`)",
    fills="sampler.interval_s")
LISTEN_ADDRESS: Option[ListenAddress] = Option(
    "listen_address", Listen(), (None, 9400), commands=SERVE,
    flags=("-a", "--web.listen-address", "--address"),
    env=("GPU_EXPORTER_LISTEN", "DCGM_EXPORTER_LISTEN"),
    default_text="`:9400`", help="`HOST:PORT` or `:PORT` to serve on")
WEB_ENABLE_OPENMETRICS: Option[bool] = Option(
    "web_enable_openmetrics", Switch(), False, commands=SERVE,
    flags=("--web.enable-openmetrics",), env=("GPU_EXPORTER_WEB_ENABLE_OPENMETRICS",),
    help="offer OpenMetrics to scrapers that prefer it (Prometheus does); off: text 0.0.4 "
         "always, as dcgm-exporter, so Prometheus records DCGM counters as counters",
    fills="web.openmetrics")
WEB_CONFIG_FILE: Option[Path | None] = Option(
    "web_config_file", FilePath(), None, commands=SERVE_AND_DOCTOR,
    flags=("--web.config.file", "--web-config-file"),
    env=("GPU_EXPORTER_WEB_CONFIG_FILE", "DCGM_EXPORTER_WEB_CONFIG_FILE"),
    help="TLS, client certificates and basic auth: a YAML file in the Prometheus "
         "exporter-toolkit's web config format (see Securing the endpoint)",
    fills="web.config_file")
WEB_READ_TIMEOUT: Option[float | None] = Option(
    "web_read_timeout", LenientGoDuration(), 10.0, commands=SERVE,
    flags=("--web-read-timeout",),
    env=("GPU_EXPORTER_WEB_READ_TIMEOUT", "DCGM_EXPORTER_WEB_READ_TIMEOUT"),
    default_text="`10s`",
    help="longest time to read a request, a Go duration; one that does not parse or is not "
         "above zero logs a warning and stands for the default")
WEB_WRITE_TIMEOUT: Option[float | None] = Option(
    "web_write_timeout", LenientGoDuration(), 30.0, commands=SERVE,
    flags=("--web-write-timeout",),
    env=("GPU_EXPORTER_WEB_WRITE_TIMEOUT", "DCGM_EXPORTER_WEB_WRITE_TIMEOUT"),
    default_text="`30s`",
    help="longest time to write a response, and to finish at shutdown, a Go duration; one "
         "that does not parse or is not above zero logs a warning and stands for the default")
MAX_CONCURRENT_SCRAPES: Option[int] = Option(
    "max_concurrent_scrapes", Integer(minimum=1), 16, commands=SERVE,
    flags=("--max-concurrent-scrapes",),
    env=("GPU_EXPORTER_MAX_CONCURRENT_SCRAPES", "DCGM_EXPORTER_MAX_CONCURRENT_SCRAPES"),
    help="scrapes served at once; more get HTTP 503 (at least 1)",
    fills="web.max_concurrent_scrapes")
ENABLE_EXPORTER_METRICS: Option[bool] = Option(
    "enable_exporter_metrics", Switch(), False, commands=SERVE,
    flags=("--enable-exporter-metrics",),
    env=("GPU_EXPORTER_ENABLE_EXPORTER_METRICS", "DCGM_EXPORTER_ENABLE_EXPORTER_METRICS"),
    help="also serve metrics about the exporter's own process and HTTP handler",
    fills="web.exporter_metrics")
HEALTH_REQUIRE_GPUS: Option[bool] = Option(
    "health_require_gpus", Switch(), False, commands=SERVE,
    flags=("--health-require-gpus",),
    env=("GPU_EXPORTER_HEALTH_REQUIRE_GPUS", "DCGM_EXPORTER_HEALTH_REQUIRE_GPUS"),
    help="`/health` answers 503 while no GPU is being exported",
    fills="web.health_require_gpus")
DEVICES: Option[DeviceFilter] = Option(
    "devices", Devices(), ALL_DEVICES, commands=SERVE,
    flags=("-d", "--devices"), env=("GPU_EXPORTER_DEVICES", "DCGM_EXPORTER_DEVICES_STR"),
    default_text="`f`",
    help="devices to export: `f` all, `g` GPUs only, `i` MIG instances only, `g:0,1`, "
         "`i:0-2`, or both joined by `+`: `g+i`, `g:0-3+i:0-2` (a GPU range also limits "
         "whose instances are exported)",
    fills="devices.selection")
HOSTNAME_LABEL: Option[HostnameLabel] = Option(
    "hostname_label", Choice(HOSTNAME_LABELS), "hostname", commands=SERVE,
    flags=("--hostname-label",), env=("GPU_EXPORTER_HOSTNAME_LABEL",),
    help="name of the host label: `hostname` as dcgm-exporter 4.8.3 and later write it, "
         "`Hostname` as 4.8.2 and earlier did")
NO_HOSTNAME: Option[bool] = Option(
    "no_hostname", Switch(), False, commands=SERVE,
    flags=("-n", "--no-hostname"), env=("GPU_EXPORTER_NO_HOSTNAME", "DCGM_EXPORTER_NO_HOSTNAME"),
    help="omit the host label (its value is otherwise `NODE_NAME`, else the host name)")
NODE_NAME: Option[str | None] = Option(
    "node_name", Text(), None, commands=SERVE_AND_DOCTOR, env=("NODE_NAME",),
    default_text="the host name",
    help="this node: the host label's value, and whose pods `--kubernetes.pod-labels` watches "
         "(downward API `spec.nodeName`)")
XID_COUNT_WINDOW: Option[float] = Option(
    "xid_count_window", Duration("s"), 300.0, commands=SERVE,
    flags=("--xid-count-window",), env=("GPU_EXPORTER_XID_COUNT_WINDOW",),
    default_text="`5m`",
    help="window of `DCGM_EXP_XID_ERRORS_COUNT`; a bare number is seconds",
    aliases=(Alias(Duration("ms"), "dcgm-exporter's spelling, a bare number is milliseconds",
                   flags=("-x", "--xid-count-window-size"),
                   env=("DCGM_EXPORTER_XID_COUNT_WINDOW_SIZE",)),),
    fills="devices.xid_count_window_s")
NO_PROF_COUNTERPARTS: Option[bool] = Option(
    "no_prof_counterparts", Switch(), False, commands=SERVE,
    flags=("--no-prof-counterparts",), env=("GPU_EXPORTER_NO_PROF_COUNTERPARTS",),
    help="serve no `DCGM_FI_PROF_*` series on GPUs without GPM (before Hopper); by default "
         "those NVML measures too (engine and memory activity, PCIe and NVLink bytes per "
         "second) are served from NVML")
LOG_FORMAT: Option[LogFormat] = Option(
    "log_format", Choice(LOG_FORMATS), "text", commands=SERVE,
    flags=("--log-format",), env=("GPU_EXPORTER_LOG_FORMAT", "DCGM_EXPORTER_LOG_FORMAT"),
    help="`json`: one object per line for log pipelines",
    fills="serve.log_format")
LOG_LEVEL: Option[LogLevel] = Option(
    "log_level", Choice(LOG_LEVELS, fold_case=True), "info", commands=SERVE,
    flags=("--log-level",), env=("GPU_EXPORTER_LOG_LEVEL",),
    help="least severe level logged",
    aliases=(Alias(DEBUG_SWITCH,
                   "dcgm-exporter's spelling of `--log-level debug`",
                   flags=("--debug",), env=("DCGM_EXPORTER_DEBUG",)),),
    fills="serve.log_level")
KUBERNETES: Option[bool] = Option(
    "kubernetes", Switch(), False, commands=SERVE, group=K8S_GROUP,
    flags=("-k", "--kubernetes"), env=("GPU_EXPORTER_KUBERNETES", "DCGM_EXPORTER_KUBERNETES"),
    help="pod labels from the kubelet pod-resources API")
POD_RESOURCES_SOCKET: Option[str] = Option(
    "pod_resources_socket", Text(), DEFAULT_POD_RESOURCES_SOCKET, commands=SERVE_AND_DOCTOR,
    group=K8S_GROUP, metavar="PATH",
    flags=("--kubernetes.pod-resources-socket", "--pod-resources-kubelet-socket"),
    env=("GPU_EXPORTER_POD_RESOURCES_SOCKET", "DCGM_POD_RESOURCES_KUBELET_SOCKET"),
    help="the kubelet's pod-resources socket (mount its directory, not the socket)",
    fills="kubernetes.pod_resources_socket")
RESOURCE_NAMES: Option[tuple[str, ...]] = Option(
    "resource_names", Separated(","), (), commands=SERVE_AND_DOCTOR, group=K8S_GROUP,
    flags=("--kubernetes.resource-names", "--nvidia-resource-names"),
    env=("GPU_EXPORTER_RESOURCE_NAMES", "NVIDIA_RESOURCE_NAMES"), metavar="NAMES",
    help="extra resource names to accept, comma-separated (`nvidia.com/gpu`, "
         "`nvidia.com/gpu.shared` and every `nvidia.com/mig-*` always are, the device "
         "plugin v0.20's suffixed profiles such as `nvidia.com/mig-1g.18gb+me` included)",
    fills="kubernetes.resource_names")
POD_LABELS: Option[PodLabelSelection | None] = Option(
    "pod_labels", PodLabels(), None, commands=SERVE_AND_DOCTOR, group=K8S_GROUP,
    flags=("--kubernetes.pod-labels",), env=("GPU_EXPORTER_POD_LABELS",), metavar="REGEX|PRESET",
    help="copy the pod labels whose keys match onto series as `label_<key>`, with `pod_uid`; "
         "or a preset, comma-separated: `dynamo`, `llm-d`, `kai`, `inference` (all three), "
         "copied under dcgm-exporter's names (`llm_d_ai_role`); needs API access")
PROCESS_ATTRIBUTION: Option[bool] = Option(
    "process_attribution", Switch(), False, commands=SERVE, group=K8S_GROUP,
    flags=("--kubernetes.process-attribution",), env=("GPU_EXPORTER_PROCESS_ATTRIBUTION",),
    help="per-container framebuffer and SM use on shared GPUs (needs `hostPID` and API "
         "access)",
    fills="kubernetes.process_attribution")
LABEL_LIMIT: Option[int] = Option(
    "label_limit", Integer(minimum=0), 0, commands=SERVE, group=K8S_GROUP,
    flags=("--label-limit",), env=("GPU_EXPORTER_LABEL_LIMIT",), default_text="`0` (none)",
    help="at most N labels per series, its name counted (Mimir's and Grafana Cloud's limit is "
         "30; leave room for the labels the scraper adds, such as `job` and `instance`): "
         "copied pod labels beyond it are left off, the last by name first, and counted in "
         "`gpu_exporter_label_limit_trimmed_series`; the exporter's own labels always stay",
    fills="exposition.label_limit")
SCOPE: Option[Scope] = Option(
    "scope", Choice(SCOPES), "node", commands=SERVE_AND_DOCTOR, group=K8S_GROUP,
    flags=("--scope",), env=("GPU_EXPORTER_SCOPE",),
    help="`node`: every device on the node; `pod`: per-tenant sidecar, only this pod's "
         "devices (implies `-k`; needs `POD_NAME`, `POD_NAMESPACE`)",
    fills="kubernetes.scope")
POD_NAME: Option[str | None] = Option(
    "pod_name", Text(), None, commands=SERVE_AND_DOCTOR, env=("POD_NAME",),
    help="this pod, for `--scope pod` (downward API `metadata.name`)",
    fills="kubernetes.pod_name")
POD_NAMESPACE: Option[str | None] = Option(
    "pod_namespace", Text(), None, commands=SERVE_AND_DOCTOR, env=("POD_NAMESPACE",),
    help="this pod's namespace, for `--scope pod` (downward API `metadata.namespace`)",
    fills="kubernetes.pod_namespace")

FAULTS_NODE_CONDITION: Option[bool] = Option(
    "faults_node_condition", Switch(), False, commands=SERVE_AND_DOCTOR, group=FAULTS_GROUP,
    flags=("--faults.node-condition",), env=("GPU_EXPORTER_FAULTS_NODE_CONDITION",),
    help="write a node condition (`--faults.condition-type`) on this node (`NODE_NAME`): "
         "False while a fatal GPU fault is held, its message naming each fault; read back "
         "at start, so held faults survive a restart (needs get and patch on `nodes/status`)",
    fills="faults.node_condition")
FAULTS_CONDITION_TYPE: Option[str] = Option(
    "faults_condition_type", Text(), DEFAULT_CONDITION_TYPE, commands=SERVE_AND_DOCTOR,
    group=FAULTS_GROUP, flags=("--faults.condition-type",),
    env=("GPU_EXPORTER_FAULTS_CONDITION_TYPE",), metavar="TYPE",
    help="the node condition's type, True while no fatal fault is held; "
         "`AcceleratedHardwareReady` is the one EKS node auto-repair acts on",
    fills="faults.condition_type")
FAULTS_EVENTS: Option[bool] = Option(
    "faults_events", Switch(), False, commands=SERVE_AND_DOCTOR, group=FAULTS_GROUP,
    flags=("--faults.events",), env=("GPU_EXPORTER_FAULTS_EVENTS",),
    help="an Event on the Node for each GPU fault first seen, and on each Pod holding the "
         "GPU when the action is RESTART_APP; repeats counted as the kubelet does (needs "
         "create and patch on `events`)",
    fills="faults.events")
FAULTS_TAINT: Option[bool] = Option(
    "faults_taint", Switch(), False, commands=SERVE_AND_DOCTOR, group=FAULTS_GROUP,
    flags=("--faults.taint",), env=("GPU_EXPORTER_FAULTS_TAINT",),
    help="taint this node NoSchedule (`--faults.taint-key`) while a fault that needs a GPU "
         "reset or a reboot is held, and remove it when that clears (needs get, patch and "
         "list on `nodes`)",
    fills="faults.taint")
FAULTS_TAINT_KEY: Option[str] = Option(
    "faults_taint_key", Text(), DEFAULT_TAINT_KEY, commands=SERVE_AND_DOCTOR,
    group=FAULTS_GROUP, flags=("--faults.taint-key",), env=("GPU_EXPORTER_FAULTS_TAINT_KEY",),
    metavar="KEY", help="the taint's key (a label key: `[prefix/]name`)",
    fills="faults.taint_key")
FAULTS_TAINT_MAX_SHARE: Option[float] = Option(
    "faults_taint_max_share", Share(), DEFAULT_TAINT_MAX_SHARE, commands=SERVE_AND_DOCTOR,
    group=FAULTS_GROUP, flags=("--faults.taint-max-share",),
    env=("GPU_EXPORTER_FAULTS_TAINT_MAX_SHARE",),
    help="circuit breaker: the taint is never added once this share of the GPU nodes "
         "(`--faults.node-selector`) carries it; held back, logged and counted, the "
         "condition still written",
    fills="faults.taint_max_share")
FAULTS_NODE_SELECTOR: Option[str] = Option(
    "faults_node_selector", Text(), DEFAULT_NODE_SELECTOR, commands=SERVE_AND_DOCTOR,
    group=FAULTS_GROUP, flags=("--faults.node-selector",),
    env=("GPU_EXPORTER_FAULTS_NODE_SELECTOR",), metavar="SELECTOR",
    help="label selector of the GPU nodes the circuit breaker counts",
    fills="faults.node_selector")
FAULTS_DRY_RUN: Option[bool] = Option(
    "faults_dry_run", Switch(), False, commands=SERVE_AND_DOCTOR, group=FAULTS_GROUP,
    flags=("--faults.dry-run",), env=("GPU_EXPORTER_FAULTS_DRY_RUN",),
    help="log each condition, Event and taint write the options above would make, one line "
         "each, and make none (the reads still happen: get on `nodes/status` and `nodes`, "
         "list on `nodes` for the breaker); see docs/faults.md",
    fills="faults.dry_run")

KUBECONFIG: Option[str | None] = Option(
    "kubeconfig", Text(), None, commands=DOCTOR, flags=("--kubeconfig",), metavar="FILE",
    default_text="in-cluster, else `KUBECONFIG`",
    help="for the API server check outside a pod")
KUBELET_TIMEOUT: Option[float] = Option(
    "kubelet_timeout", Duration("s"), 5.0, commands=DOCTOR, flags=("--kubelet-timeout",),
    default_text="`5s`", help="deadline of each kubelet call; a bare number is seconds")
SKIP_KUBERNETES: Option[bool] = Option(
    "skip_kubernetes", Switch(), False, commands=DOCTOR, flags=("--skip-kubernetes",),
    help="check only NVML and the GPUs")

SERVE_OPTIONS: tuple[Option[object], ...] = declared_options(globals())
"""Every option declared above, in the order declared: the order of --help and the flag
tables. Declaring an option here is what lists it."""

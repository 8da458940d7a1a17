"""Turn serve's flags and environment into one frozen ServeConfig, which holds one settings
object per layer.

The options themselves (flags, variables, parsers, defaults, precedence) are declared once in
`exporter.options`, each naming the settings field it fills (`Option.fills`); `filled` copies
every such value into its object, so an option that fills a field needs no code here. This
module adds only what spans several options: `--sim.kubelet` and `--scope pod` turn
Kubernetes attribution on, pod scope needs POD_NAME and POD_NAMESPACE, and the host label's
value falls back to the host name. dcgm-exporter's pod labels, pod UID, DRA
and ConfigMap options turn nothing else on, like `--kubernetes.pod-labels`.

dcgm-exporter's YAML config file (`--config-file`, `exporter.options.config_file`) sits
between the defaults and the flags: a value comes from a flag or variable that was set, else
from the file, else from the default, as in dcgm-exporter 4.8.3 and later.
"""

from __future__ import annotations

import os
import re
import socket
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from exporter.devices.config import DeviceSettings
from exporter.exposition.config import ExpositionSettings
from exporter.fields.csv import Collectors, CollectorsError, collectors_from_rows, require_servable
from exporter.k8s.config import KubernetesConfig
from exporter.k8s.inference_labels import PodLabelSelection
from exporter.nodefaults.config import NodeFaultsConfig
from exporter.options import ConfigError, Option, Resolution, parse_command_line, parse_duration
from exporter.options import dcgm_table as dcgm
from exporter.options import serve_table as opt
from exporter.options.config_file import ConfigFile, WatchGroup, read_config_file
from exporter.options.go_duration import go_seconds
from exporter.options.serve_table import BackendName, LogFormat, LogLevel
from exporter.options.values import lenient_warning
from exporter.sampling.config import SamplerSettings
from exporter.sampling.snapshot import HostLabel
from exporter.web.config import WebSettings
from exporter.yamlfiles import YamlError

__all__ = ["SETTINGS", "ConfigError", "ServeConfig", "SimSettings", "faults_config", "filled",
           "kubernetes_config", "parse_duration", "parse_serve_args", "serve_config",
           "sim_settings"]


@dataclass(frozen=True, slots=True)
class SimSettings:
    """The simulated node's settings (`--backend sim`), filled from the options whose
    `fills` names `sim.<field>`; exporter/simulated/wiring.py builds the node from them."""

    profile: str = "h200-mig"
    mig_config: str | None = None
    """`FILE[:NAME]` of a mig-parted config the simulated node starts with applied."""
    seed: int = 0
    faults: tuple[str, ...] = ()
    boot_id: str | None = None
    kubelet: bool = False
    """Serve simulated pod allocations on a pod-resources socket (simulated node only)."""


@dataclass(frozen=True, slots=True)
class ServeConfig:
    """Everything `serve` runs with: one settings object per layer, and what serve itself
    reads. Fields are filled from the options whose `fills` names `serve.<field>`."""

    devices: DeviceSettings = field(default_factory=DeviceSettings)
    sampler: SamplerSettings = field(default_factory=SamplerSettings)
    exposition: ExpositionSettings = field(default_factory=ExpositionSettings)
    web: WebSettings = field(default_factory=WebSettings)
    kubernetes: KubernetesConfig = field(default_factory=KubernetesConfig)
    faults: NodeFaultsConfig = field(default_factory=NodeFaultsConfig)
    """What the node fault writer writes on the API server (nothing by default)."""
    sim: SimSettings = field(default_factory=SimSettings)
    backend: BackendName = "auto"
    """Which NVML to read: "auto" (which is "nvml"), "nvml", or "sim" for the built-in
    simulated node."""
    config_file: Path | None = None
    """dcgm-exporter's YAML config file, already applied to the settings."""
    inline_collectors: Collectors | None = None
    """The config file's `metrics.fields`, checked as CSV rows; served instead of a file."""
    watch_groups: tuple[WatchGroup, ...] = ()
    """The config file's watch groups: they set nothing here, but serve checks them against
    the collectors at start-up, as dcgm-exporter does."""
    container_labels: bool = False
    """A `container` label from a container runtime's API (only outside Kubernetes: with
    Kubernetes on, this is False and a start-up warning says so)."""
    container_runtime_socket: Path | None = None
    """That runtime API's Unix socket; set whenever container_labels is True."""
    watch_max_keep_age_s: float = 600.0
    watch_max_keep_samples: int = 0
    """dcgm-exporter's DCGM watch retention: checked as it checks them, used for nothing."""
    log_format: LogFormat = "text"
    log_level: LogLevel = "info"
    startup_warnings: tuple[str, ...] = ()
    """One line per compatibility-only option that was set; logged once at start-up."""

    @property
    def collectors(self) -> Path | None:
        """Return the collectors CSV, or None for the built-in default set (or
        `inline_collectors`): the file the sampler re-reads on SIGHUP."""
        return self.sampler.collectors_path


SETTINGS: dict[str, type] = {
    "serve": ServeConfig,
    "devices": DeviceSettings,
    "sampler": SamplerSettings,
    "exposition": ExpositionSettings,
    "web": WebSettings,
    "kubernetes": KubernetesConfig,
    "faults": NodeFaultsConfig,
    "sim": SimSettings,
}
"""The settings objects an option's `fills` can name, by the name it uses."""

S = TypeVar("S")


def filled(target: str, make: Callable[..., S], r: Resolution,
           from_file: Mapping[str, object] | None = None, **computed: object) -> S:
    """Return `make(...)` given the value of every option of `r` whose `fills` names
    `<target>.<field>`, and `computed` for the fields code here combines from several.

    `from_file`: the config file's values by option name; one is used where no flag or
    variable set the option (default < config file < flag or variable)."""
    values: dict[str, object] = {}
    for setting in r.settings.values():
        owner, _, name = (setting.option.fills or "").partition(".")
        if owner != target:
            continue
        values[name] = _layered(r, setting.option, (from_file or {}).get(setting.option.name))
    return make(**values, **computed)


def sim_settings(r: Resolution) -> SimSettings:
    """Return the simulated node's settings (serve and doctor share them; doctor's
    resolution lacks the serve-only ones, which keep their defaults)."""
    return filled("sim", SimSettings, r)


def kubernetes_config(r: Resolution, *, enabled: bool) -> KubernetesConfig:
    """Return the Kubernetes settings that serve and doctor share (doctor resolves only these
    options), with attribution on or off as `enabled` says."""
    pod_labels = r[opt.POD_LABELS] or PodLabelSelection()
    return filled("kubernetes", KubernetesConfig, r, enabled=enabled,
                  node_name=r[opt.NODE_NAME], pod_labels=pod_labels.regex,
                  pod_label_presets=pod_labels.presets)


_QUALIFIED_NAME = re.compile(
    r"(?:[a-z0-9]([-a-z0-9]*[a-z0-9])?(?:\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?")
_CONDITION_TYPE = re.compile(r"[A-Za-z][A-Za-z0-9_.-]{0,127}")


def faults_config(r: Resolution) -> NodeFaultsConfig:
    """Return the node fault writer's settings, which serve and doctor share; a taint key or
    condition type the API server would refuse, or a fault option on without NODE_NAME, is a
    ConfigError."""
    config = filled("faults", NodeFaultsConfig, r, node_name=r[opt.NODE_NAME])
    if not _QUALIFIED_NAME.fullmatch(config.taint_key):
        raise ConfigError(f"--faults.taint-key {config.taint_key!r}: expected a label key, "
                          "[prefix/]name (e.g. gpu-exporter/gpu-fault)")
    if not _CONDITION_TYPE.fullmatch(config.condition_type):
        raise ConfigError(f"--faults.condition-type {config.condition_type!r}: expected a "
                          "word of letters and digits (e.g. GPUHardwareReady)")
    if config.enabled and not config.node_name:
        raise ConfigError("--faults.node-condition/--faults.events/--faults.taint need "
                          "$NODE_NAME (set it from the downward API: fieldRef spec.nodeName)")
    return config


def _timeout(r: Resolution, option: Option[float | None], warnings: list[str]) -> float:
    """Return the seconds of the web timeout `option`: its value, or its default where the
    text given did not parse, which also adds a start-up warning to `warnings`."""
    setting = r.setting(option)
    default = option.default
    assert default is not None  # the table gives every timeout a default
    if setting.value is not None:
        return setting.value
    assert setting.source is not None  # only a given value can fail to parse
    warnings.append(lenient_warning(setting.source, setting.text, default))
    return default


def check_watch_retention(age_s: float, samples: int, where: str) -> None:
    """Refuse, with a ConfigError naming `where`, a DCGM watch retention that sets no limit at
    all, as dcgm-exporter's WatchRetention.Validate does; the range of each limit is checked
    where it is read."""
    if age_s == 0 and samples == 0:
        raise ConfigError(f"{where}: max keep age and max keep samples cannot both be 0 (one "
                          "of them must limit what a DCGM watch keeps)")


def _container_labels(r: Resolution, *, kubernetes: bool, warnings: list[str]) -> bool:
    """Return whether serve adds container runtime labels, checked as dcgm-exporter checks
    `--container-labels`: with Kubernetes mode on it is ignored, with a warning; otherwise it
    needs a runtime socket (ConfigError without one)."""
    if not r[dcgm.CONTAINER_LABELS]:
        return False
    if kubernetes:
        warnings.append(f"{r.setting(dcgm.CONTAINER_LABELS).source}: container runtime labels "
                        "are ignored when Kubernetes mode (-k) is on")
        return False
    if r[dcgm.CONTAINER_RUNTIME_SOCKET] is None:
        raise ConfigError("--container-labels requires --container-runtime-socket or "
                          "$DCGM_CONTAINER_RUNTIME_SOCKET")
    return True


T = TypeVar("T")


def _layered(r: Resolution, option: Option[T], from_file: T | None) -> T:
    """Return the option's value from a flag or variable that was set, else the config file's
    value `from_file`, else the option's default."""
    if from_file is None or r.setting(option).source is not None:
        return r[option]
    return from_file


def _config_file(r: Resolution) -> ConfigFile | None:
    """Return the config file that `--config-file` names, read and checked, or None without
    one; ConfigError names the file's mistake."""
    path = r[opt.CONFIG_FILE]
    if path is None:
        return None
    try:
        return read_config_file(path)
    except YamlError as exc:
        raise ConfigError(f"--config-file: {exc}") from None


def _inline_collectors(r: Resolution, file: ConfigFile | None) -> Collectors | None:
    """Return the config file's inline collectors rows, checked as a collectors CSV is, unless
    `-f` or `-m` was set (either beats the file); None where the file has no rows."""
    if file is None or file.inline_rows is None:
        return None
    if r.setting(opt.COLLECTORS).source or r.setting(dcgm.CONFIGMAP_DATA).source:
        return None
    try:
        return require_servable(collectors_from_rows(file.inline_rows, str(file.path)))
    except CollectorsError as exc:
        raise ConfigError(f"--config-file: {exc}") from None


def _watch_retention(r: Resolution, file: ConfigFile | None) -> tuple[float, int]:
    """Return the DCGM watch retention (max keep age, max keep samples), layered in
    dcgm-exporter's order: the default, then the file's, then a flag or variable that was
    set. The result, and each watch group's override laid over it, must keep some limit."""
    retention = file.retention if file is not None else None
    age = _layered(r, dcgm.WATCH_MAX_KEEP_AGE, retention.max_age_s if retention else None)
    samples = _layered(r, dcgm.WATCH_MAX_KEEP_SAMPLES, retention.max_samples if retention else None)
    check_watch_retention(age, samples, "--watch-max-keep-age/--watch-max-keep-samples"
                          if file is None else
                          f"--watch-max-keep-age/--watch-max-keep-samples with {file.path}")
    for group in file.watch_groups if file is not None else ():
        check_watch_retention(*group.retention.over(age, samples),
                              f"--config-file: {group.where}: watch group {group.name!r}")
    return age, samples


def _check_bind_unbind(r: Resolution, file: ConfigFile | None, warnings: list[str]) -> None:
    """Check the bind/unbind watch's poll interval as dcgm-exporter does, though the watch
    means nothing here: with the watch on, an interval given must be above zero (ConfigError).
    An interval that does not parse stands for the default, 1s, and adds a warning."""
    enabled = _layered(r, dcgm.ENABLE_GPU_BIND_UNBIND_WATCH,
                       file.bind_unbind_watch if file else None)
    setting = r.setting(dcgm.GPU_BIND_UNBIND_POLL_INTERVAL)
    if setting.source is None or not setting.value:
        return  # the default, or the file's (checked above zero where it is read)
    try:
        seconds = go_seconds(setting.value.strip())
    except ValueError:
        warnings.append(lenient_warning(setting.source, setting.text, 1.0))
        return
    if enabled and seconds <= 0:
        raise ConfigError(f"{setting.source}: {setting.value!r} must be greater than 0 with "
                          "--enable-gpu-bind-unbind-watch")


def serve_config(r: Resolution) -> ServeConfig:
    """Return serve's settings: each option's value where its `fills` says, the config
    file's under a flag or variable that was set, and what spans several options."""
    k8s_enabled = r[opt.KUBERNETES] or r[opt.SIM_KUBELET]
    if r[opt.SCOPE] == "pod":
        if not (r[opt.POD_NAME] and r[opt.POD_NAMESPACE]):
            raise ConfigError(
                "--scope pod needs $POD_NAME and $POD_NAMESPACE (set them from the downward "
                "API: fieldRef metadata.name / metadata.namespace)")
        k8s_enabled = True
    warnings = r.warnings()
    file = _config_file(r)
    if file is not None:
        warnings.extend(file.warnings)
    watch_age, watch_samples = _watch_retention(r, file)
    _check_bind_unbind(r, file, warnings)
    inline = _inline_collectors(r, file)
    collectors = None if inline is not None else _layered(
        r, opt.COLLECTORS, file.collectors_file if file else None)
    from_file: dict[str, object] = {} if file is None else {
        opt.COLLECT_INTERVAL.name: file.collect_interval_s,
        opt.MAX_CONCURRENT_SCRAPES.name: file.max_concurrent_scrapes,
        opt.ENABLE_EXPORTER_METRICS.name: file.enable_exporter_metrics,
    }
    host, port = r[opt.LISTEN_ADDRESS]
    web = filled("web", WebSettings, r, from_file, listen_host=host, listen_port=port,
                 read_timeout_s=_timeout(r, opt.WEB_READ_TIMEOUT, warnings),
                 write_timeout_s=_timeout(r, opt.WEB_WRITE_TIMEOUT, warnings))
    host_label = HostLabel(None if r[opt.NO_HOSTNAME] else r[opt.HOSTNAME_LABEL],
                           r[opt.NODE_NAME] or socket.gethostname())
    sampler = filled("sampler", SamplerSettings, r, from_file, host=host_label,
                     collectors_path=collectors)
    # The exposition renders the bodies the web layer may serve, and no others.
    exposition = filled("exposition", ExpositionSettings, r, openmetrics=web.openmetrics,
                        appendable=web.exporter_metrics)
    return filled(
        "serve", ServeConfig, r,
        devices=filled("devices", DeviceSettings, r,
                       prof_counterparts=not r[opt.NO_PROF_COUNTERPARTS]),
        sampler=sampler,
        exposition=exposition,
        web=web,
        kubernetes=kubernetes_config(r, enabled=k8s_enabled),
        faults=faults_config(r),
        sim=sim_settings(r),
        inline_collectors=inline,
        watch_groups=file.watch_groups if file is not None else (),
        container_labels=_container_labels(r, kubernetes=k8s_enabled, warnings=warnings),
        watch_max_keep_age_s=watch_age,
        watch_max_keep_samples=watch_samples,
        startup_warnings=tuple(warnings),
    )


def parse_serve_args(argv: Sequence[str], env: Mapping[str, str] | None = None) -> ServeConfig:
    """Return serve's settings from its command line `argv` and the environment `env` (the
    process's when None); ConfigError names the first bad value."""
    return serve_config(parse_command_line("serve", argv, os.environ if env is None else env))

"""Flags and environment -> one frozen ServeConfig.

Precedence: command-line flag, then the GPU_EXPORTER_* variable, then dcgm-exporter's variable
(so a GPU Operator ClusterPolicy written for dcgm-exporter keeps working), then the default.
"""

from __future__ import annotations

import argparse
import os
import re
import socket
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from exporter import durations
from exporter.devices.filter import ALL_DEVICES, DeviceFilter, parse_device_filter
from exporter.k8s.config import DEFAULT_POD_RESOURCES_SOCKET, KubernetesConfig


class ConfigError(ValueError):
    """A bad flag or environment value; the message names it and what is expected."""


@dataclass(frozen=True, slots=True)
class ServeConfig:
    backend: str = "auto"
    """"auto" (= nvml), "nvml", or "sim" for the built-in simulated node."""
    sim_profile: str = "h200-mig"
    sim_seed: int = 0
    sim_faults: tuple[str, ...] = ()
    sim_kubelet: bool = False
    """Serve simulated pod allocations on a pod-resources socket (simulated node only)."""
    collectors: Path | None = None
    """The collectors CSV; None: the built-in default set."""
    collect_interval_s: float = 15.0
    listen_host: str | None = None
    """None: every interface."""
    listen_port: int = 9400
    devices: DeviceFilter = ALL_DEVICES
    hostname_label: str | None = "Hostname"
    hostname: str = ""
    xid_count_window_s: float = 300.0
    log_format: str = "text"
    log_level: str = "info"
    kubernetes: KubernetesConfig = field(default_factory=KubernetesConfig)


def parse_duration(text: str, where: str, bare_unit: str = "ms") -> float:
    """"15s", "500ms", "5m"; a bare number is in `bare_unit` (dcgm's -c is milliseconds)."""
    try:
        seconds = durations.parse_duration(text, bare_unit)
    except ValueError:
        raise ConfigError(f"{where}: {text!r} is not a duration (expected e.g. 15s, 500ms, "
                          "5m)") from None
    if seconds <= 0:
        raise ConfigError(f"{where}: {text!r} must be greater than zero")
    return seconds


def parse_listen(text: str, where: str) -> tuple[str | None, int]:
    host, sep, port = text.rpartition(":")
    if not sep:
        raise ConfigError(f"{where}: {text!r} is not HOST:PORT or :PORT")
    try:
        number = int(port)
    except ValueError:
        raise ConfigError(f"{where}: port {port!r} is not a number") from None
    if not 0 <= number <= 65535:
        raise ConfigError(f"{where}: port {number} is out of range")
    return (host.strip("[]") or None), number


_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def _bool(text: str, where: str) -> bool:
    value = text.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ConfigError(f"{where}: {text!r} is not a boolean (expected true or false)")


def add_serve_arguments(p: argparse.ArgumentParser) -> None:
    a = p.add_argument
    a("--backend", choices=("auto", "nvml", "sim"),
      help="device backend; auto = nvml [GPU_EXPORTER_BACKEND]")
    a("--sim.profile", dest="sim_profile",
      help="simulated node profile [GPU_EXPORTER_SIM_PROFILE] (default h200-mig)")
    a("--sim.seed", dest="sim_seed", type=int, help="simulation seed [GPU_EXPORTER_SIM_SEED]")
    a("--sim.fault", dest="sim_faults", action="append",
      help="scripted fault, repeatable, e.g. xid,code=79,gpu=0,at=30s "
           "[GPU_EXPORTER_SIM_FAULTS, ';'-separated]")
    a("--sim.kubelet", dest="sim_kubelet", action="store_const", const=True,
      help="serve simulated pod allocations on a pod-resources socket (implies -k)")
    a("-f", "--collectors", help="collectors CSV in dcgm-exporter's format "
      "[GPU_EXPORTER_COLLECTORS, DCGM_EXPORTER_COLLECTORS] (default: built-in set)")
    a("-c", "--collect-interval", dest="collect_interval",
      help="time between polls, e.g. 15s or 500ms; a bare number is milliseconds "
           "[GPU_EXPORTER_COLLECT_INTERVAL, DCGM_EXPORTER_INTERVAL] (default 15s)")
    a("-a", "--web.listen-address", dest="listen",
      help="HOST:PORT to serve on [GPU_EXPORTER_LISTEN, DCGM_EXPORTER_LISTEN] (default :9400)")
    a("-d", "--devices", help="devices to export: f, g, i, g:0,1, i:0,1 "
      "[GPU_EXPORTER_DEVICES, DCGM_EXPORTER_DEVICES_STR] (default f)")
    a("--hostname-label", choices=("Hostname", "hostname"),
      help="name of the host label [GPU_EXPORTER_HOSTNAME_LABEL] (default Hostname)")
    a("--no-hostname", dest="no_hostname", action="store_const", const=True,
      help="omit the host label [GPU_EXPORTER_NO_HOSTNAME, DCGM_EXPORTER_NO_HOSTNAME]")
    a("--xid-count-window", dest="xid_window",
      help="window of DCGM_EXP_XID_ERRORS_COUNT [GPU_EXPORTER_XID_COUNT_WINDOW] (default 5m)")
    a("--log-format", choices=("text", "json"), help="[GPU_EXPORTER_LOG_FORMAT]")
    a("--log-level", choices=("debug", "info", "warning", "error"),
      help="[GPU_EXPORTER_LOG_LEVEL]")
    a("-k", "--kubernetes", action="store_const", const=True,
      help="attribute devices to pods via the kubelet [GPU_EXPORTER_KUBERNETES, "
           "DCGM_EXPORTER_KUBERNETES]")
    a("--kubernetes.pod-resources-socket", dest="pod_resources_socket",
      help="kubelet pod-resources socket [GPU_EXPORTER_POD_RESOURCES_SOCKET, "
           f"DCGM_POD_RESOURCES_KUBELET_SOCKET] (default {DEFAULT_POD_RESOURCES_SOCKET})")
    a("--kubernetes.resource-names", dest="resource_names",
      help="extra resource names, comma-separated [GPU_EXPORTER_RESOURCE_NAMES, "
           "NVIDIA_RESOURCE_NAMES]")
    a("--kubernetes.process-attribution", dest="process_attribution", action="store_const",
      const=True, help="per-container usage on shared GPUs (needs hostPID)")
    a("--kubernetes.pod-labels", dest="pod_labels",
      help="regex of pod label keys to copy onto series (needs API access) "
           "[GPU_EXPORTER_POD_LABELS]")
    a("--scope", choices=("node", "pod"),
      help="node: all devices; pod: only this pod's (POD_NAME, POD_NAMESPACE) "
           "[GPU_EXPORTER_SCOPE]")


class _Resolver:
    def __init__(self, args: argparse.Namespace, env: Mapping[str, str]) -> None:
        self.args = args
        self.env = env

    def get(self, attr: str, flag: str, *env_names: str) -> tuple[str | None, str]:
        """The raw value and where it came from (for error messages)."""
        value = getattr(self.args, attr, None)
        if value is not None:
            return value, flag
        for name in env_names:
            if self.env.get(name, "") != "":
                return self.env[name], f"${name}"
        return None, flag


def resolve(args: argparse.Namespace, env: Mapping[str, str] | None = None) -> ServeConfig:
    env = os.environ if env is None else env
    r = _Resolver(args, env)
    d = ServeConfig()

    backend, _ = r.get("backend", "--backend", "GPU_EXPORTER_BACKEND")
    if backend is not None and backend not in ("auto", "nvml", "sim"):
        raise ConfigError(f"$GPU_EXPORTER_BACKEND: {backend!r}; expected auto, nvml or sim")
    profile, _ = r.get("sim_profile", "--sim.profile", "GPU_EXPORTER_SIM_PROFILE")
    seed_raw, where = r.get("sim_seed", "--sim.seed", "GPU_EXPORTER_SIM_SEED")
    try:
        seed = int(seed_raw) if seed_raw is not None else d.sim_seed
    except ValueError:
        raise ConfigError(f"{where}: {seed_raw!r} is not an integer") from None
    faults: tuple[str, ...] = tuple(args.sim_faults or ())
    if not faults and env.get("GPU_EXPORTER_SIM_FAULTS"):
        faults = tuple(f for f in env["GPU_EXPORTER_SIM_FAULTS"].split(";") if f.strip())

    def flag_bool(attr: str, flag: str, *names: str) -> bool:
        raw, where = r.get(attr, flag, *names)
        if raw is None:
            return False
        return raw if isinstance(raw, bool) else _bool(raw, where)

    sim_kubelet = flag_bool("sim_kubelet", "--sim.kubelet", "GPU_EXPORTER_SIM_KUBELET")
    collectors, _ = r.get("collectors", "--collectors", "GPU_EXPORTER_COLLECTORS",
                          "DCGM_EXPORTER_COLLECTORS")
    interval_raw, where = r.get("collect_interval", "--collect-interval",
                                "GPU_EXPORTER_COLLECT_INTERVAL", "DCGM_EXPORTER_INTERVAL")
    interval = parse_duration(interval_raw, where) if interval_raw else d.collect_interval_s
    listen_raw, where = r.get("listen", "--web.listen-address", "GPU_EXPORTER_LISTEN",
                              "DCGM_EXPORTER_LISTEN")
    host, port = parse_listen(listen_raw, where) if listen_raw else (None, d.listen_port)
    devices_raw, where = r.get("devices", "--devices", "GPU_EXPORTER_DEVICES",
                               "DCGM_EXPORTER_DEVICES_STR")
    try:
        devices = parse_device_filter(devices_raw, where) if devices_raw else ALL_DEVICES
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    label, where = r.get("hostname_label", "--hostname-label", "GPU_EXPORTER_HOSTNAME_LABEL")
    if label is not None and label not in ("Hostname", "hostname"):
        raise ConfigError(f"{where}: {label!r}; expected Hostname or hostname")
    no_host = flag_bool("no_hostname", "--no-hostname", "GPU_EXPORTER_NO_HOSTNAME",
                        "DCGM_EXPORTER_NO_HOSTNAME")
    window_raw, where = r.get("xid_window", "--xid-count-window", "GPU_EXPORTER_XID_COUNT_WINDOW")
    window = parse_duration(window_raw, where, "s") if window_raw else d.xid_count_window_s
    log_format, where = r.get("log_format", "--log-format", "GPU_EXPORTER_LOG_FORMAT")
    if log_format is not None and log_format not in ("text", "json"):
        raise ConfigError(f"{where}: {log_format!r}; expected text or json")
    log_level, where = r.get("log_level", "--log-level", "GPU_EXPORTER_LOG_LEVEL")
    if log_level is not None and log_level.lower() not in ("debug", "info", "warning", "error"):
        raise ConfigError(f"{where}: {log_level!r}; expected debug, info, warning or error")

    k8s_enabled = flag_bool("kubernetes", "--kubernetes", "GPU_EXPORTER_KUBERNETES",
                            "DCGM_EXPORTER_KUBERNETES") or sim_kubelet
    socket_path, _ = r.get("pod_resources_socket", "--kubernetes.pod-resources-socket",
                           "GPU_EXPORTER_POD_RESOURCES_SOCKET", "DCGM_POD_RESOURCES_KUBELET_SOCKET")
    names_raw, _ = r.get("resource_names", "--kubernetes.resource-names",
                         "GPU_EXPORTER_RESOURCE_NAMES", "NVIDIA_RESOURCE_NAMES")
    pod_labels, where = r.get("pod_labels", "--kubernetes.pod-labels", "GPU_EXPORTER_POD_LABELS")
    if pod_labels is not None:
        try:
            re.compile(pod_labels)
        except re.error as exc:
            raise ConfigError(f"{where}: {pod_labels!r} is not a valid regex: {exc}") from None
    scope, where = r.get("scope", "--scope", "GPU_EXPORTER_SCOPE")
    scope = scope or "node"
    if scope not in ("node", "pod"):
        raise ConfigError(f"{where}: {scope!r}; expected node or pod")
    pod_name, pod_namespace = env.get("POD_NAME") or None, env.get("POD_NAMESPACE") or None
    if scope == "pod":
        if not (pod_name and pod_namespace):
            raise ConfigError(
                "--scope pod needs $POD_NAME and $POD_NAMESPACE (set them from the downward "
                "API: fieldRef metadata.name / metadata.namespace)")
        k8s_enabled = True
    kubernetes = KubernetesConfig(
        enabled=k8s_enabled,
        pod_resources_socket=socket_path or DEFAULT_POD_RESOURCES_SOCKET,
        resource_names=tuple(n.strip() for n in (names_raw or "").split(",") if n.strip()),
        scope=scope,
        pod_name=pod_name,
        pod_namespace=pod_namespace,
        node_name=env.get("NODE_NAME") or None,
        pod_labels=pod_labels,
        process_attribution=flag_bool("process_attribution",
                                      "--kubernetes.process-attribution",
                                      "GPU_EXPORTER_PROCESS_ATTRIBUTION"),
    )
    return ServeConfig(
        backend=backend or d.backend,
        sim_profile=profile or d.sim_profile,
        sim_seed=seed,
        sim_faults=faults,
        sim_kubelet=sim_kubelet,
        collectors=Path(collectors) if collectors else None,
        collect_interval_s=interval,
        listen_host=host,
        listen_port=port,
        devices=devices,
        hostname_label=None if no_host else (label or "Hostname"),
        hostname=env.get("NODE_NAME") or socket.gethostname(),
        xid_count_window_s=window,
        log_format=log_format or d.log_format,
        log_level=(log_level or d.log_level).lower(),
        kubernetes=kubernetes,
    )


def parse_serve_args(argv: Sequence[str], env: Mapping[str, str] | None = None) -> ServeConfig:
    parser = argparse.ArgumentParser(prog="gpu-exporter serve")
    add_serve_arguments(parser)
    return resolve(parser.parse_args(list(argv)), env)

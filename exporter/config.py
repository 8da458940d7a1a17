"""Flags and environment -> one frozen ServeConfig.

The options themselves (flags, variables, parsers, defaults, precedence) are declared once in
`exporter.options`; this module adds what spans several of them: `--sim.kubelet` and
`--scope pod` turn Kubernetes attribution on, pod scope needs POD_NAME and POD_NAMESPACE, and
the host label's value falls back to the host name.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from exporter.devices.filter import ALL_DEVICES, DeviceFilter
from exporter.k8s.config import KubernetesConfig
from exporter.options import ConfigError, Resolution, parse_command_line, parse_duration
from exporter.options import serve_table as opt
from exporter.options.serve_table import BackendName, HostnameLabel, LogFormat, LogLevel

__all__ = ["ConfigError", "ServeConfig", "kubernetes_config", "parse_duration",
           "parse_serve_args", "serve_config"]


@dataclass(frozen=True, slots=True)
class ServeConfig:
    backend: BackendName = "auto"
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
    hostname_label: HostnameLabel | None = "Hostname"
    hostname: str = ""
    xid_count_window_s: float = 300.0
    clock_events_count_window_s: float = 300.0
    log_format: LogFormat = "text"
    log_level: LogLevel = "info"
    kubernetes: KubernetesConfig = field(default_factory=KubernetesConfig)
    startup_warnings: tuple[str, ...] = ()
    """One line per compatibility-only option that was set; logged once at start-up."""


def kubernetes_config(r: Resolution, *, enabled: bool) -> KubernetesConfig:
    """The Kubernetes settings serve and doctor share (doctor resolves only these options)."""
    return KubernetesConfig(
        enabled=enabled,
        pod_resources_socket=r[opt.POD_RESOURCES_SOCKET],
        resource_names=r[opt.RESOURCE_NAMES],
        scope=r[opt.SCOPE],
        pod_name=r[opt.POD_NAME],
        pod_namespace=r[opt.POD_NAMESPACE],
        node_name=r[opt.NODE_NAME],
        pod_labels=r[opt.POD_LABELS],
        process_attribution=r.get(opt.PROCESS_ATTRIBUTION, False),
    )


def serve_config(r: Resolution) -> ServeConfig:
    k8s_enabled = r[opt.KUBERNETES] or r[opt.SIM_KUBELET]
    if r[opt.SCOPE] == "pod":
        if not (r[opt.POD_NAME] and r[opt.POD_NAMESPACE]):
            raise ConfigError(
                "--scope pod needs $POD_NAME and $POD_NAMESPACE (set them from the downward "
                "API: fieldRef metadata.name / metadata.namespace)")
        k8s_enabled = True
    host, port = r[opt.LISTEN_ADDRESS]
    return ServeConfig(
        backend=r[opt.BACKEND],
        sim_profile=r[opt.SIM_PROFILE],
        sim_seed=r[opt.SIM_SEED],
        sim_faults=r[opt.SIM_FAULTS],
        sim_kubelet=r[opt.SIM_KUBELET],
        collectors=r[opt.COLLECTORS],
        collect_interval_s=r[opt.COLLECT_INTERVAL],
        listen_host=host,
        listen_port=port,
        devices=r[opt.DEVICES],
        hostname_label=None if r[opt.NO_HOSTNAME] else r[opt.HOSTNAME_LABEL],
        hostname=r[opt.NODE_NAME] or socket.gethostname(),
        xid_count_window_s=r[opt.XID_COUNT_WINDOW],
        clock_events_count_window_s=r[opt.CLOCK_EVENTS_COUNT_WINDOW],
        log_format=r[opt.LOG_FORMAT],
        log_level=r[opt.LOG_LEVEL],
        kubernetes=kubernetes_config(r, enabled=k8s_enabled),
        startup_warnings=tuple(r.warnings()),
    )


def parse_serve_args(argv: Sequence[str], env: Mapping[str, str] | None = None) -> ServeConfig:
    return serve_config(parse_command_line("serve", argv, os.environ if env is None else env))

from __future__ import annotations

import socket
from typing import get_args

import pytest

from exporter.config import ConfigError, parse_duration, parse_serve_args
from exporter.k8s.config import Scope
from exporter.options import Option
from exporter.options import serve_table as opt
from exporter.options.serve_table import BackendName, HostnameLabel, LogFormat, LogLevel


def test_defaults() -> None:
    cfg = parse_serve_args([], env={})
    assert cfg.backend == "auto"
    assert cfg.sampler.interval_s == 15.0
    assert (cfg.web.listen_host, cfg.web.listen_port) == (None, 9400)
    assert cfg.sampler.host.name == "hostname"
    assert cfg.devices.xid_count_window_s == 300.0
    assert not cfg.kubernetes.enabled


@pytest.mark.parametrize(("text", "seconds"), [("15s", 15.0), ("500ms", 0.5), ("2m", 120.0),
                                               ("30000", 30.0), ("1.5s", 1.5)])
def test_durations(text: str, seconds: float) -> None:
    assert parse_duration(text, "-c") == seconds


def test_dcgm_environment_is_honoured() -> None:
    cfg = parse_serve_args([], env={
        "DCGM_EXPORTER_INTERVAL": "30000",
        "DCGM_EXPORTER_LISTEN": ":9500",
        "DCGM_EXPORTER_KUBERNETES": "true",
        "DCGM_POD_RESOURCES_KUBELET_SOCKET": "/run/k0s/kubelet.sock",
        "NVIDIA_RESOURCE_NAMES": "example.com/gpu, other.io/gpu",
        "DCGM_EXPORTER_COLLECTORS": "/etc/dcgm-exporter/default-counters.csv",
        "DCGM_EXPORTER_DEVICES_STR": "g:0,1",
        "DCGM_EXPORTER_NO_HOSTNAME": "1",
        "NODE_NAME": "node-a",
    })
    assert cfg.sampler.interval_s == 30.0
    assert cfg.web.listen_port == 9500
    assert cfg.kubernetes.enabled
    assert cfg.kubernetes.pod_resources_socket == "/run/k0s/kubelet.sock"
    assert cfg.kubernetes.resource_names == ("example.com/gpu", "other.io/gpu")
    assert str(cfg.collectors) == "/etc/dcgm-exporter/default-counters.csv"
    assert cfg.devices.selection.gpu_ids == frozenset({0, 1})
    assert not cfg.devices.selection.instances
    assert cfg.sampler.host.name is None
    assert cfg.sampler.host.value == "node-a"


def test_flags_beat_our_env_which_beats_dcgm_env() -> None:
    env = {"GPU_EXPORTER_COLLECT_INTERVAL": "5s", "DCGM_EXPORTER_INTERVAL": "30000"}
    assert parse_serve_args([], env=env).sampler.interval_s == 5.0
    assert parse_serve_args(["-c", "250ms"], env=env).sampler.interval_s == 0.25
    assert parse_serve_args(["--collect-interval", "1000"], env=env).sampler.interval_s == 1.0


@pytest.mark.parametrize(("argv", "env", "message"), [
    (["-c", "fast"], {}, "--collect-interval: 'fast' is not a duration"),
    ([], {"DCGM_EXPORTER_INTERVAL": "0"}, r"\$DCGM_EXPORTER_INTERVAL: '0' must be greater"),
    (["-a", "9400"], {}, "--web.listen-address: '9400' is not HOST:PORT"),
    (["-a", ":http"], {}, "port 'http' is not a number"),
    (["-d", "x"], {}, "--devices: 'x' is not a device selection"),
    (["-d", "g:a"], {}, "--devices: 'a' is not a device index"),
    ([], {"DCGM_EXPORTER_KUBERNETES": "maybe"}, r"\$DCGM_EXPORTER_KUBERNETES: 'maybe' is not a "
                                                "boolean"),
    (["--scope", "pod"], {}, "--scope pod needs \\$POD_NAME and \\$POD_NAMESPACE"),
    (["--kubernetes.pod-labels", "("], {}, "--kubernetes.pod-labels: '\\(' is not a valid regex"),
    ([], {"GPU_EXPORTER_BACKEND": "cuda"}, "GPU_EXPORTER_BACKEND: 'cuda'"),
])
def test_bad_values_name_their_source(argv: list[str], env: dict[str, str],
                                      message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_serve_args(argv, env=env)


def test_pod_scope_enables_kubernetes() -> None:
    cfg = parse_serve_args(["--scope", "pod"], env={"POD_NAME": "p", "POD_NAMESPACE": "ns"})
    assert cfg.kubernetes.enabled
    assert cfg.kubernetes.scope == "pod"
    assert (cfg.kubernetes.pod_name, cfg.kubernetes.pod_namespace) == ("p", "ns")


def test_listen_address_forms() -> None:
    assert parse_serve_args(["-a", "127.0.0.1:1234"], env={}).web.listen_host == "127.0.0.1"
    assert parse_serve_args(["-a", "[::1]:1234"], env={}).web.listen_host == "::1"


def test_sim_kubelet_implies_kubernetes() -> None:
    assert parse_serve_args(["--sim.kubelet"], env={}).kubernetes.enabled
    assert parse_serve_args([], env={"GPU_EXPORTER_SIM_KUBELET": "yes"}).kubernetes.enabled


def test_the_host_label_is_hostname_unless_4_8_2s_is_asked_for() -> None:
    """dcgm-exporter 4.8.3 and later write `hostname`; `Hostname` keeps 4.8.2's name."""
    assert parse_serve_args([], env={}).sampler.host.name == "hostname"
    assert parse_serve_args(["--hostname-label", "Hostname"],
                            env={}).sampler.host.name == "Hostname"
    assert parse_serve_args(["-hostname-label=Hostname"], env={}).sampler.host.name == "Hostname"
    from_env = {"GPU_EXPORTER_HOSTNAME_LABEL": "Hostname"}
    assert parse_serve_args([], env=from_env).sampler.host.name == "Hostname"
    assert parse_serve_args(["--hostname-label", "hostname"],
                            env=from_env).sampler.host.name == "hostname"
    assert parse_serve_args(["-n", "--hostname-label", "Hostname"],
                            env={}).sampler.host.name is None


def test_node_name_is_the_host_label_value() -> None:
    assert parse_serve_args([], env={"NODE_NAME": "gpu-7"}).sampler.host.value == "gpu-7"
    assert parse_serve_args([], env={"NODE_NAME": ""}).sampler.host.value == socket.gethostname()


def test_log_level_from_the_environment_in_any_case() -> None:
    assert parse_serve_args([], env={"GPU_EXPORTER_LOG_LEVEL": "DEBUG"}).log_level == "debug"


def test_an_empty_flag_value_stands_for_the_default() -> None:
    cfg = parse_serve_args(["-c", "", "-a", ""], env={"GPU_EXPORTER_COLLECT_INTERVAL": "5s"})
    assert (cfg.sampler.interval_s, cfg.web.listen_port) == (15.0, 9400)


def test_faults_and_resource_names_split() -> None:
    cfg = parse_serve_args(["--sim.fault", "idle,gpu=3,at=0s", "--sim.fault", "thermal,gpu=0,at=5s",
                            "--kubernetes.resource-names", "a.io/gpu,,b.io/gpu "], env={})
    assert cfg.sim.faults == ("idle,gpu=3,at=0s", "thermal,gpu=0,at=5s")
    assert cfg.kubernetes.resource_names == ("a.io/gpu", "b.io/gpu")
    env = {"GPU_EXPORTER_SIM_FAULTS": "idle,gpu=3,at=0s; ;lost,gpu=1,at=20s"}
    assert parse_serve_args([], env=env).sim.faults == ("idle,gpu=3,at=0s", "lost,gpu=1,at=20s")


@pytest.mark.parametrize(("literal", "choice"), [
    (BackendName, opt.BACKEND), (LogFormat, opt.LOG_FORMAT), (LogLevel, opt.LOG_LEVEL),
    (HostnameLabel, opt.HOSTNAME_LABEL), (Scope, opt.SCOPE),
])
def test_closed_sets_are_the_literal_types(literal: object, choice: Option[str]) -> None:
    assert choice.value.choices() == get_args(literal)

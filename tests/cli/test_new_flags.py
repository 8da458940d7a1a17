"""The flags dcgm-exporter 4.8.3 and 4.8.4 added (and `--health-require-gpus`): each is
taken, from its flag and from both its variables, with upstream's default and checks."""

from __future__ import annotations

from operator import attrgetter
from pathlib import Path

import pytest

from exporter.config import ConfigError, parse_serve_args
from exporter.options.go_duration import go_text, parse_go_duration


def test_defaults_are_upstreams() -> None:
    cfg = parse_serve_args([], env={})
    assert cfg.config_file is None
    assert (cfg.web.read_timeout_s, cfg.web.write_timeout_s) == (10.0, 30.0)
    assert cfg.web.max_concurrent_scrapes == 16
    assert not cfg.web.exporter_metrics
    assert not cfg.web.health_require_gpus
    assert not cfg.container_labels
    assert cfg.container_runtime_socket is None
    assert (cfg.watch_max_keep_age_s, cfg.watch_max_keep_samples) == (600.0, 0)
    assert cfg.startup_warnings == ()


@pytest.mark.parametrize(("flag", "variables", "text", "attribute", "value"), [
    ("--web-read-timeout", ("GPU_EXPORTER_WEB_READ_TIMEOUT", "DCGM_EXPORTER_WEB_READ_TIMEOUT"),
     "1m30s", "web.read_timeout_s", 90.0),
    ("--web-write-timeout",
     ("GPU_EXPORTER_WEB_WRITE_TIMEOUT", "DCGM_EXPORTER_WEB_WRITE_TIMEOUT"),
     "250ms", "web.write_timeout_s", 0.25),
    ("--max-concurrent-scrapes",
     ("GPU_EXPORTER_MAX_CONCURRENT_SCRAPES", "DCGM_EXPORTER_MAX_CONCURRENT_SCRAPES"),
     "3", "web.max_concurrent_scrapes", 3),
    ("--container-runtime-socket",
     ("GPU_EXPORTER_CONTAINER_RUNTIME_SOCKET", "DCGM_CONTAINER_RUNTIME_SOCKET"),
     "/run/docker.sock", "container_runtime_socket", Path("/run/docker.sock")),
])
def test_valued_flags_and_their_variables(flag: str, variables: tuple[str, ...], text: str,
                                          attribute: str, value: object) -> None:
    assert attrgetter(attribute)(parse_serve_args([flag, text], env={})) == value
    for variable in variables:
        assert attrgetter(attribute)(parse_serve_args([], env={variable: text})) == value


@pytest.mark.parametrize(("flag", "variables", "attribute"), [
    ("--enable-exporter-metrics",
     ("GPU_EXPORTER_ENABLE_EXPORTER_METRICS", "DCGM_EXPORTER_ENABLE_EXPORTER_METRICS"),
     "web.exporter_metrics"),
    ("--health-require-gpus",
     ("GPU_EXPORTER_HEALTH_REQUIRE_GPUS", "DCGM_EXPORTER_HEALTH_REQUIRE_GPUS"),
     "web.health_require_gpus"),
])
def test_switches_and_their_variables(flag: str, variables: tuple[str, ...],
                                      attribute: str) -> None:
    assert attrgetter(attribute)(parse_serve_args([flag], env={})) is True
    assert attrgetter(attribute)(parse_serve_args([f"{flag}=false"], env={})) is False
    for variable in variables:
        assert attrgetter(attribute)(parse_serve_args([], env={variable: "true"})) is True


@pytest.mark.parametrize("text", ["10", "soon", "-5s", "0s", "0", "1d"])
def test_a_timeout_that_is_not_a_positive_go_duration_warns_and_is_the_default(
        text: str) -> None:
    cfg = parse_serve_args([f"--web-read-timeout={text}"], env={})
    assert cfg.web.read_timeout_s == 10.0
    assert cfg.startup_warnings == (
        f"--web-read-timeout={text}: not a Go duration above zero (such as 10s or 1m30s); "
        "using the default 10s",)
    cfg = parse_serve_args([], env={"DCGM_EXPORTER_WEB_WRITE_TIMEOUT": text})
    assert cfg.web.write_timeout_s == 30.0
    assert cfg.startup_warnings[0].startswith(f"$DCGM_EXPORTER_WEB_WRITE_TIMEOUT={text}: ")


@pytest.mark.parametrize("text", ["0", "-1", "many"])
def test_max_concurrent_scrapes_must_be_positive(text: str) -> None:
    with pytest.raises(ConfigError, match="--max-concurrent-scrapes: "):
        parse_serve_args([f"--max-concurrent-scrapes={text}"], env={})
    with pytest.raises(ConfigError, match=r"\$DCGM_EXPORTER_MAX_CONCURRENT_SCRAPES: "):
        parse_serve_args([], env={"DCGM_EXPORTER_MAX_CONCURRENT_SCRAPES": text})


def test_container_labels_need_a_socket_outside_kubernetes() -> None:
    with pytest.raises(ConfigError, match="--container-labels requires "
                                          "--container-runtime-socket or "
                                          r"\$DCGM_CONTAINER_RUNTIME_SOCKET"):
        parse_serve_args(["--container-labels"], env={})
    cfg = parse_serve_args([], env={"DCGM_EXPORTER_CONTAINER_LABELS": "true",
                                    "DCGM_CONTAINER_RUNTIME_SOCKET": "/run/containerd.sock"})
    assert cfg.container_labels
    assert cfg.container_runtime_socket == Path("/run/containerd.sock")
    assert cfg.startup_warnings == ()


def test_container_labels_are_ignored_with_a_warning_in_kubernetes_mode() -> None:
    cfg = parse_serve_args(["-k", "--container-labels"], env={})
    assert not cfg.container_labels
    assert cfg.startup_warnings == (
        "--container-labels: container runtime labels are ignored when Kubernetes mode (-k) "
        "is on",)


def test_watch_retention_is_checked_and_warned_as_meaningless_here() -> None:
    cfg = parse_serve_args(["--watch-max-keep-age", "5m", "--watch-max-keep-samples", "100"],
                           env={})
    assert (cfg.watch_max_keep_age_s, cfg.watch_max_keep_samples) == (300.0, 100)
    assert [w.split(":")[0] for w in cfg.startup_warnings] == [
        "--watch-max-keep-age=5m", "--watch-max-keep-samples=100"]
    assert "no DCGM field watches" in cfg.startup_warnings[0]
    cfg = parse_serve_args([], env={"DCGM_EXPORTER_WATCH_MAX_KEEP_AGE": "0s",
                                    "DCGM_EXPORTER_WATCH_MAX_KEEP_SAMPLES": "2147483647"})
    assert (cfg.watch_max_keep_age_s, cfg.watch_max_keep_samples) == (0.0, 2147483647)


@pytest.mark.parametrize(("argv", "message"), [
    (["--watch-max-keep-age", "0s"], "cannot both be 0"),
    (["--watch-max-keep-age=-1s"], "--watch-max-keep-age: '-1s' must not be negative"),
    (["--watch-max-keep-age", "600"], '--watch-max-keep-age: missing unit in duration "600"'),
    (["--watch-max-keep-age", "1d"], 'unknown unit "d"'),
    (["--watch-max-keep-samples=-1"], "--watch-max-keep-samples: '-1' is below 0"),
    (["--watch-max-keep-samples", "2147483648"], "is above 2147483647"),
])
def test_watch_retention_refusals(argv: list[str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_serve_args(argv, env={})


@pytest.mark.parametrize(("text", "nanoseconds"), [
    ("10m0s", 600_000_000_000), ("1.5h", 5_400_000_000_000), ("300ms", 300_000_000),
    ("1us", 1_000), ("1µs", 1_000), ("2ns", 2), ("-1s", -1_000_000_000), ("0", 0),
    ("+5s", 5_000_000_000), ("1h2m3s4ms", 3_723_004_000_000), (".5s", 500_000_000),
])
def test_go_durations(text: str, nanoseconds: int) -> None:
    assert parse_go_duration(text) == nanoseconds


@pytest.mark.parametrize(("text", "message"), [
    ("", "invalid duration"), ("30000", "missing unit"), ("5x", 'unknown unit "x"'),
    ("s", "invalid duration"), ("1s ", "invalid duration"), (".s", "invalid duration"),
])
def test_go_duration_refusals(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_go_duration(text)


@pytest.mark.parametrize(("seconds", "text"), [(600.0, "10m0s"), (10.0, "10s"), (0.5, "500ms"),
                                               (3600.0, "1h0m0s"), (1.5, "1.5s")])
def test_go_text_prints_as_go_does(seconds: float, text: str) -> None:
    assert go_text(seconds) == text


def test_the_bind_unbind_watch_needs_a_poll_interval_above_zero() -> None:
    with pytest.raises(ConfigError, match="--gpu-bind-unbind-poll-interval: '0s' must be "
                                          "greater than 0 with --enable-gpu-bind-unbind-watch"):
        parse_serve_args(["--enable-gpu-bind-unbind-watch",
                          "--gpu-bind-unbind-poll-interval", "0s"], env={})
    # Off, the interval is not checked; one that does not parse is the default, with a word.
    assert len(parse_serve_args(["--gpu-bind-unbind-poll-interval", "0s"],
                                env={}).startup_warnings) == 1
    cfg = parse_serve_args([], env={"DCGM_EXPORTER_ENABLE_GPU_BIND_UNBIND_WATCH": "true",
                                    "DCGM_EXPORTER_GPU_BIND_UNBIND_POLL_INTERVAL": "soon"})
    assert cfg.startup_warnings[-1] == (
        "$DCGM_EXPORTER_GPU_BIND_UNBIND_POLL_INTERVAL=soon: not a Go duration above zero "
        "(such as 10s or 1m30s); using the default 1s")


def test_the_bind_unbind_watch_turned_on_by_the_config_file_is_checked_too(
        tmp_path: Path) -> None:
    config = tmp_path / "c.yaml"
    config.write_text("version: 1\nsources:\n  dcgm:\n    detectBindUnbind:\n"
                      "      enabled: true\n")
    with pytest.raises(ConfigError, match="must be greater than 0"):
        parse_serve_args(["--config-file", str(config),
                          "--gpu-bind-unbind-poll-interval=-1s"], env={})
    assert parse_serve_args(["--config-file", str(config)], env={}).startup_warnings == (
        f"{config}:4: sources.dcgm.detectBindUnbind: accepted for compatibility; ignored "
        "because GPUs that come or go are found by re-enumeration (every minute, and at "
        "once after a GPU is lost)",)


@pytest.mark.parametrize("level", ["NONE", "FATAL", "ERROR", "WARN", "INFO", "DEBUG", "VERB"])
def test_dcgm_log_levels_dcgm_exporter_takes(level: str) -> None:
    cfg = parse_serve_args([], env={"DCGM_EXPORTER_DCGM_LOG_LEVEL": level})
    assert len(cfg.startup_warnings) == 1


def test_a_dcgm_log_level_dcgm_exporter_refuses_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"\$DCGM_EXPORTER_DCGM_LOG_LEVEL: 'debug'; expected "
                                          "NONE, FATAL, ERROR, WARN, INFO, DEBUG or VERB"):
        parse_serve_args([], env={"DCGM_EXPORTER_DCGM_LOG_LEVEL": "debug"})


@pytest.mark.parametrize(("text", "value"), [("t", True), ("T", True), ("TRUE", True),
                                             ("True", True), ("1", True), ("f", False),
                                             ("F", False), ("FALSE", False), ("0", False)])
def test_switches_take_gos_bool_spellings(text: str, value: bool) -> None:
    # urfave/cli reads a bool flag's variable with strconv.ParseBool.
    cfg = parse_serve_args([], env={"DCGM_EXPORTER_ENABLE_EXPORTER_METRICS": text})
    assert cfg.web.exporter_metrics is value

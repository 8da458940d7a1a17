"""Every flag, alias and variable of dcgm-exporter, read from its own app.go (the 4.8.4 copy
in tests/fixtures, see upstream_app.py), is taken by the option table and resolves to a serve
configuration, set to upstream's own default where it has one; a real process starts with
dcgm-exporter's command line and with the GPU Operator's environment alone. A newer app.go
dropped into the fixtures shows the delta as failures naming each new flag."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from exporter.config import ServeConfig, parse_serve_args, serve_config
from exporter.options import Option, Setting, for_command, parse_command_line
from exporter.options.values import Value
from tests.cli.upstream_app import Upstream, cli_constants, upstream_flags
from tests.conftest import ROOT, ExporterProcess, free_port
from tests.support.option_values import expected_of

UPSTREAM = upstream_flags()
SERVE = for_command("serve")
IGNORED_UPSTREAM = {
    "--remote-hostengine-info", "--switch-devices", "--cpu-devices", "--web-systemd-socket",
    "--enable-pprof", "--fake-gpus", "--enable-dcgm-log", "--dcgm-log-level", "--dump-enabled",
    "--dump-directory", "--dump-retention", "--dump-compression", "--disable-startup-validate",
    "--enable-gpu-bind-unbind-watch", "--gpu-bind-unbind-poll-interval",
    "--watch-max-keep-age", "--watch-max-keep-samples",
}
"""dcgm-exporter options accepted without effect here (each with a start-up warning saying
why); every other upstream option acts."""

CONFIG_FILE = Path(tempfile.mkdtemp(prefix="dcgm-flags-")) / "config.yaml"
CONFIG_FILE.write_text("version: 2\n", encoding="utf-8")
VALID = {
    "--config-file": str(CONFIG_FILE),  # a file that is read: one that exists
    # Defaults app.go names by a constant of another package (appconfig/types.go, DCGM):
    "--collectors": "/etc/dcgm-exporter/default-counters.csv",
    "--web-read-timeout": "10s", "--web-write-timeout": "30s",
    "--max-concurrent-scrapes": "16", "--watch-max-keep-age": "10m0s",
    "--watch-max-keep-samples": "0", "--configmap-data": "none",
    "--kubernetes-gpu-id-type": "uid", "--dcgm-log-level": "NONE",
    "--xid-count-window-size": "300000", "--clock-events-count-window-size": "300000",
}
"""Texts for flags whose default app.go does not spell out, or where any value of our type
would not do."""
NEEDS = {"--container-labels": (["--container-runtime-socket", "/run/docker.sock"],
                                {"DCGM_CONTAINER_RUNTIME_SOCKET": "/run/docker.sock"})}
"""What a flag needs beside it to be valid (dcgm-exporter's own checks)."""


def test_app_go_is_read_whole() -> None:
    assert len(UPSTREAM) == 47  # as many flag structs as app.go declares
    assert {u.flags[0][2:] for u in UPSTREAM} == cli_constants()  # one per CLI* constant
    spellings = {s for u in UPSTREAM for s in u.flags}
    assert {"-f", "-a", "-c", "-k", "-m", "-r", "-d", "-n", "-o", "-p", "-s", "-x",
            "-rbmn"} <= spellings
    assert all(len(u.env) == 1 for u in UPSTREAM)
    assert len({u.env for u in UPSTREAM}) == len(UPSTREAM)


def option_of(spelling: str) -> Option[object]:
    matches = [o for o in SERVE if spelling in o.all_flags]
    assert len(matches) == 1, f"{spelling}: taken by {[o.name for o in matches]}"
    return matches[0]


def reader_of(option: Option[object], spelling: str) -> tuple[Value[object], str | None]:
    """The value type that parses `spelling` (a flag or variable) and the flag reports name."""
    if spelling in option.flags or spelling in option.env:
        return option.value, option.flag
    alias = next(a for a in option.aliases if spelling in (*a.flags, *a.env))
    return alias.value, alias.flag


def valid_text(value: Value[object], upstream: Upstream) -> str:
    """Upstream's default where it states one, else a value of our type."""
    if value.action == "switch":
        return "true"
    if upstream.flags[0] in VALID:
        return VALID[upstream.flags[0]]
    return upstream.default or value.samples()[0]


def resolved(argv: list[str], env: dict[str, str], option: Option[object]
             ) -> tuple[ServeConfig, Setting[object]]:
    resolution = parse_command_line("serve", argv, env)
    return serve_config(resolution), resolution.setting(option)


@pytest.mark.parametrize("upstream", UPSTREAM, ids=[u.flags[0] for u in UPSTREAM])
def test_each_spelling_of_the_flag_is_taken_by_one_option(upstream: Upstream) -> None:
    option = option_of(upstream.flags[0])
    needs, _ = NEEDS.get(upstream.flags[0], ([], {}))
    for spelling in upstream.flags:
        assert option_of(spelling) is option, f"{spelling} and {upstream.flags[0]} differ"
        value, reported = reader_of(option, spelling)
        text = valid_text(value, upstream)
        argv = [spelling] if value.action == "switch" else [spelling, text]
        _, setting = resolved([*argv, *needs], {}, option)
        assert setting.source == reported
        assert setting.value == expected_of(type(value).__name__, text, spelling), text


@pytest.mark.parametrize("upstream", UPSTREAM, ids=[u.env[0] for u in UPSTREAM])
def test_each_variable_is_read_by_the_flag_option(upstream: Upstream) -> None:
    option = option_of(upstream.flags[0])
    (variable,) = upstream.env
    assert variable in option.all_env
    value, _ = reader_of(option, variable)
    texts = {valid_text(value, upstream)}
    if value.action == "switch":
        texts.add(upstream.default or "false")
    _, needs = NEEDS.get(upstream.flags[0], ([], {}))
    for text in sorted(texts):
        _, setting = resolved([], {variable: text, **needs}, option)
        assert (setting.source, setting.value) == (
            f"${variable}", expected_of(type(value).__name__, text, variable))


def test_only_the_listed_flags_are_ignored_and_they_only_warn() -> None:
    ignored = {u.flags[0] for u in UPSTREAM if option_of(u.flags[0]).ignored is not None}
    assert ignored == IGNORED_UPSTREAM
    cfg = serve_config(parse_command_line("serve", [], every_variable()))
    # And one more: container labels are ignored in Kubernetes mode.
    assert len(cfg.startup_warnings) == len(IGNORED_UPSTREAM) + 1
    assert "container runtime labels are ignored" in cfg.startup_warnings[-1]


def every_variable() -> dict[str, str]:
    return {u.env[0]: valid_text(reader_of(option_of(u.flags[0]), u.env[0])[0], u)
            for u in UPSTREAM}


def test_every_upstream_variable_at_once_configures_serve() -> None:
    cfg = serve_config(parse_command_line("serve", [], every_variable()))
    assert cfg.sampler.interval_s == 30.0
    assert cfg.devices.xid_count_window_s == 300.0
    assert cfg.devices.clock_events_count_window_s == 300.0
    assert cfg.kubernetes.enabled
    assert cfg.kubernetes.gpu_id_type == "uid"
    assert cfg.kubernetes.virtual_gpus
    assert cfg.kubernetes.dra
    assert cfg.kubernetes.configmap is None  # upstream's default, "none"
    assert cfg.exposition.use_old_namespace
    assert cfg.exposition.replace_blanks_in_model_name
    assert cfg.log_level == "debug"
    assert cfg.sampler.host.name is None


def test_a_flag_of_neither_exporter_is_an_error_naming_it(
        capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stopped:
        parse_command_line("serve", ["-c", "5000", "--fail-on-init-error=false"], {})
    assert stopped.value.code == 2
    assert capsys.readouterr().err == (
        "gpu-exporter serve: flag provided but not defined: -fail-on-init-error\n")


# --- real processes ----------------------------------------------------------------------

SIM = {"GPU_EXPORTER_BACKEND": "sim", "GPU_EXPORTER_SIM_PROFILE": "l4-1"}


class BareExporter(ExporterProcess):
    """`python -m exporter` with no subcommand, as the GPU Operator runs the image."""

    def __init__(self, args: list[str], env: dict[str, str]) -> None:
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self._log = tempfile.TemporaryFile(mode="w+")  # noqa: SIM115 - closed in close()
        clean = {k: v for k, v in os.environ.items()
                 if not k.startswith(("GPU_EXPORTER_", "DCGM_"))}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "exporter", *args], cwd=ROOT,
            env={**clean, **env, "DCGM_EXPORTER_LISTEN": f"127.0.0.1:{self.port}"},
            stdout=self._log, stderr=subprocess.STDOUT, text=True)


@pytest.fixture
def bare() -> Iterator[list[BareExporter]]:
    started: list[BareExporter] = []
    yield started
    for proc in started:
        proc.close()


def test_dcgm_exporter_command_line_without_subcommand(bare: list[BareExporter],
                                                       tmp_path: Path) -> None:
    csv = tmp_path / "counters.csv"
    csv.write_text("DCGM_FI_DEV_GPU_TEMP, gauge, GPU temperature (in C).\n")
    proc = BareExporter(
        ["--kubernetes-gpu-id-type", "uid", "-f", str(csv), "-c", "5000", "-x", "60000",
         "-r", "nv-hostengine:5555", "-rbmn", "--enable-pprof"], SIM)
    bare.append(proc)
    proc.wait_ready()
    text = proc.metrics()
    assert 'DCGM_FI_DEV_GPU_TEMP{gpu="0",UUID="GPU-' in text
    assert 'modelName="NVIDIA-L4"' in text
    assert "gpu_exporter_collect_interval_seconds 5\n" in text
    log = proc.output()
    assert log.count("accepted for compatibility") == 2, log
    assert "--remote-hostengine-info=nv-hostengine:5555: accepted for compatibility" in log


def test_the_gpu_operator_environment_alone(bare: list[BareExporter],
                                            tmp_path: Path) -> None:
    operator_env = {
        **SIM,
        "DCGM_EXPORTER_KUBERNETES": "true",
        # The mounted directory, with no kubelet serving in it yet: retried, not fatal.
        "DCGM_POD_RESOURCES_KUBELET_SOCKET": str(tmp_path / "kubelet.sock"),
        "DCGM_EXPORTER_COLLECTORS": str(ROOT / "collectors.csv"),
        "NODE_NAME": "gpu-node-1",
        "DCGM_REMOTE_HOSTENGINE_INFO": "nvidia-dcgm:5555",
        "DCGM_EXPORTER_KUBERNETES_GPU_ID_TYPE": "device-name",
        "DCGM_EXPORTER_CONFIGMAP_DATA": "none",
    }
    proc = BareExporter([], operator_env)
    bare.append(proc)
    proc.wait_http()
    text = proc.metrics()
    assert 'hostname="gpu-node-1"' in text
    log = proc.output()
    assert log.count("DCGM_REMOTE_HOSTENGINE_INFO") == 1, log


def test_switches_written_with_a_value_as_dcgm_exporter_allows() -> None:
    on = {"DCGM_EXPORTER_KUBERNETES": "true"}
    assert not parse_serve_args(["--kubernetes=false"], env=on).kubernetes.enabled
    assert parse_serve_args(["-k=true"], env={}).kubernetes.enabled
    assert parse_serve_args(["-rbmn=1", "-c=5000"], env={}).exposition.replace_blanks_in_model_name
    assert parse_serve_args(["--debug=true"], env={}).log_level == "debug"
    assert parse_serve_args(["--debug", "--debug=false"], env={}).log_level == "info"
    assert parse_serve_args(["--dump-compression=false"], env={}).startup_warnings == (
        "--dump-compression=false: accepted for compatibility; ignored because this exporter "
        "writes no debug dumps",)


def test_a_switch_given_no_go_boolean_is_refused_as_go_does(
        capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stopped:
        parse_serve_args(["--kubernetes=maybe"], env={})
    assert stopped.value.code == 2
    assert capsys.readouterr().err == (
        'gpu-exporter serve: invalid boolean value "maybe" for -kubernetes: parse error\n')


def test_after_a_double_dash_nothing_is_a_switch(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        parse_serve_args(["--", "--kubernetes=true"], env={})
    assert capsys.readouterr().err == (
        "gpu-exporter serve: unexpected argument after the flags: --kubernetes=true\n")

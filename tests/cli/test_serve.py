"""The exporter as a user runs it: a real process on the simulated node, scraped over HTTP."""

from __future__ import annotations

import gzip
import os
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from exporter.sampling.worker import LOOP_SWITCH_INTERVAL_S
from tests.support.exporter_process import ExporterProcess, answers, free_port
from tests.support.paths import ROOT
from tests.support.wait import wait_until

SIM = ["--backend", "sim", "--sim.profile", "h200-mig", "-c", "200ms"]


def series(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample by (name, labels); fails on a duplicate label set like Prometheus."""
    seen: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            key = (sample.name, tuple(sorted(sample.labels.items())))
            assert key not in seen, f"duplicate series {key}"
            seen[key] = sample.value
    return seen


def metrics_with(proc: ExporterProcess, needle: str) -> str:
    """The first /metrics body that contains `needle` (e.g. GPM needs two polls)."""
    def attempt() -> str | None:
        text = proc.metrics()
        return text if needle in text else None
    result: str = wait_until(attempt)
    return result


def test_simulated_node_serves_dcgm_gpu_and_mig_series(exporter: type[ExporterProcess]) -> None:
    proc = exporter(SIM)
    proc.wait_ready()
    text = metrics_with(proc, "DCGM_FI_PROF_SM_ACTIVE{")
    samples = series(text)
    fb = {dict(labels).get("GPU_I_PROFILE"): v for (name, labels), v in samples.items()
          if name == "DCGM_FI_DEV_FB_USED"}
    # GPU 0 carries the real H200 capture's layout, GPU 1 7x 1g.18gb, GPUs 2-7 are whole.
    assert {"3g.71gb", "2g.35gb", "1g.18gb", None} <= set(fb)
    gpus = {dict(labels)["gpu"] for (name, labels) in samples if name == "DCGM_FI_DEV_GPU_TEMP"}
    assert gpus == {str(i) for i in range(8)}
    # Utilisation is not reported for MIG-enabled GPUs: omitted, not zero.
    util_gpus = {dict(labels)["gpu"] for (name, labels) in samples
                 if name == "DCGM_FI_DEV_GPU_UTIL"}
    assert util_gpus == {str(i) for i in range(2, 8)}
    mig_fb = [labels for (name, labels) in samples
              if name == "DCGM_FI_DEV_FB_USED" and dict(labels).get("gpu") == "1"]
    assert len(mig_fb) == 7
    # Physical-GPU values stay on the parent GPU's series.
    assert not [labels for (name, labels) in samples
                if name == "DCGM_FI_DEV_POWER_USAGE" and "GPU_I_ID" in dict(labels)]
    assert samples[("gpu_exporter_nvml_up", ())] == 1.0
    status, _, body = proc.get("/")
    assert status == 200
    assert b"3g.71gb" in body
    assert b"GPU-" in body


def test_promtool_accepts_the_exposition(exporter: type[ExporterProcess]) -> None:
    proc = exporter(SIM)
    proc.wait_ready()
    text = proc.metrics()
    result = subprocess.run(["promtool", "check", "metrics"], input=text, text=True,
                            capture_output=True, timeout=30)
    findings = [line for line in (result.stdout + result.stderr).splitlines() if line.strip()]
    # Known lint findings forced by dcgm compatibility: camelCase labels (modelName, UUID) and
    # dcgm counter names without "_total". Anything else is a real problem.
    dcgm_naming = ('should have "_total" suffix', "metric name should not include type")
    unexpected = [f for f in findings if "snake_case" not in f
                  and not (f.startswith("DCGM_") and any(d in f for d in dcgm_naming))]
    assert result.returncode in (0, 3), result.stderr
    assert unexpected == []


PREFERS_OPENMETRICS = {
    "Accept": "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5",
    "Accept-Encoding": "gzip"}


def test_text_format_by_default_as_dcgm_exporter(exporter: type[ExporterProcess]) -> None:
    proc = exporter(SIM)
    proc.wait_ready()
    status, headers, body = proc.get("/metrics", PREFERS_OPENMETRICS)
    assert status == 200
    assert headers["Content-Type"].startswith("text/plain; version=0.0.4")
    text = gzip.decompress(body)
    assert b"# TYPE DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION counter" in text
    assert b"# EOF" not in text


def test_content_negotiation_and_gzip(exporter: type[ExporterProcess]) -> None:
    proc = exporter(SIM, env={"GPU_EXPORTER_WEB_ENABLE_OPENMETRICS": "true"})
    proc.wait_ready()
    status, headers, body = proc.get("/metrics", PREFERS_OPENMETRICS)
    assert status == 200
    assert headers["Content-Type"].startswith("application/openmetrics-text")
    assert headers["Content-Encoding"] == "gzip"
    om = gzip.decompress(body).decode()
    assert om.endswith("# EOF\n")
    assert "# TYPE DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION unknown" in om
    status, headers, body = proc.get("/metrics")
    assert headers["Content-Type"].startswith("text/plain; version=0.0.4")
    assert "Content-Encoding" not in headers
    assert b"# TYPE DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION counter" in body


def test_nvml_unavailable_keeps_serving_then_recovers(exporter: type[ExporterProcess]) -> None:
    proc = exporter([*SIM, "--sim.fault", "nvml-down,at=0s,for=8s"])
    proc.wait_http()
    status, _, body = proc.get("/ready")
    assert status == 503
    assert b"DRIVER_NOT_LOADED" in body
    samples = series(proc.metrics())
    assert samples[("gpu_exporter_nvml_up", ())] == 0.0
    assert not [k for k in samples if k[0].startswith("DCGM_")]
    assert proc.get("/health")[0] == 200
    proc.wait_ready(timeout=30)
    samples = series(metrics_with(proc, "DCGM_FI_DEV_GPU_TEMP{"))
    assert samples[("gpu_exporter_nvml_up", ())] == 1.0
    assert samples[("gpu_exporter_nvml_errors_total",
                    (("code", "DRIVER_NOT_LOADED"), ("function", "nvmlInit")))] >= 1


def test_gpu_lost_mid_run_keeps_the_other_gpus(exporter: type[ExporterProcess]) -> None:
    proc = exporter([*SIM, "--sim.fault", "lost,gpu=3,at=6s,for=4s"])
    proc.wait_ready()

    def temp_gpus() -> set[str]:
        return {dict(labels)["gpu"] for (name, labels) in series(proc.metrics())
                if name == "DCGM_FI_DEV_GPU_TEMP"}

    assert "3" in temp_gpus()
    wait_until(lambda: "3" not in temp_gpus())
    samples = series(proc.metrics())
    assert temp_gpus() == {"0", "1", "2", "4", "5", "6", "7"}
    assert samples[("gpu_exporter_gpu_lost_total", ())] >= 1
    assert samples[("gpu_exporter_devices", (("kind", "gpu"),))] == 7
    assert proc.get("/ready")[0] == 200
    # The GPU answers again: it comes back without a restart.
    wait_until(lambda: "3" in temp_gpus(), timeout=30)


def _family_names(text: str) -> frozenset[str]:
    return frozenset(f.name for f in text_string_to_metric_families(text)
                     if f.name.startswith("DCGM_"))


def test_reload_under_scrape_load_never_serves_blank_or_mixed(
        exporter: type[ExporterProcess], tmp_path: Path) -> None:
    full = (ROOT / "collectors.csv").read_text()
    small = "DCGM_FI_DEV_GPU_TEMP, gauge, GPU temperature (in C).\n" \
            "DCGM_FI_DEV_POWER_USAGE, gauge, Power draw (in W).\n"
    csv = tmp_path / "collectors.csv"
    csv.write_text(full)
    proc = exporter(["--backend", "sim", "--sim.profile", "h100-8", "-c", "100ms", "-f", str(csv)])
    proc.wait_ready()
    wait_until(lambda: "DCGM_FI_PROF_SM_ACTIVE{" in proc.metrics())
    big_names = _family_names(proc.metrics())
    seen: list[frozenset[str]] = []
    errors: list[str] = []
    stop = threading.Event()

    def scrape() -> None:
        while not stop.is_set():
            status, _, body = proc.get("/metrics")
            text = body.decode()
            if status != 200 or not text.endswith("\n") or "DCGM_FI_DEV_GPU_TEMP{" not in text:
                errors.append(f"status {status}, {len(text)} bytes")
            seen.append(_family_names(text))

    threads = [threading.Thread(target=scrape) for _ in range(4)]
    for t in threads:
        t.start()
    try:
        wait_until(lambda: len(seen) >= 8, what="scrapes of the first configuration")
        tmp = tmp_path / "new.csv"
        tmp.write_text(small)
        os.replace(tmp, csv)
        proc.proc.send_signal(signal.SIGHUP)
        wait_until(lambda: _family_names(proc.metrics()) == {"DCGM_FI_DEV_GPU_TEMP",
                                                              "DCGM_FI_DEV_POWER_USAGE"})
        reloaded = len(seen)
        wait_until(lambda: len(seen) >= reloaded + 8, what="scrapes after the reload")
    finally:
        stop.set()
        for t in threads:
            t.join(10)
    assert errors == []
    small_names = frozenset({"DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_POWER_USAGE"})
    mixed = [sorted(s ^ big_names) for s in set(seen) - {big_names, small_names}]
    assert not mixed, f"a scrape saw a mix of two configurations: {mixed}"
    assert big_names in seen
    assert small_names in seen
    # A broken file is refused: the running configuration stays and the failure is counted.
    csv.write_text("DCGM_FI_DEV_GPU_TMP, gauge, typo\n")
    proc.proc.send_signal(signal.SIGHUP)
    wait_until(lambda: series(proc.metrics()).get(
        ("gpu_exporter_config_reloads_total", (("result", "failure"),)), 0) >= 1)
    assert _family_names(proc.metrics()) == small_names
    assert proc.proc.poll() is None


def test_reload_adding_a_field_keeps_every_profiling_series(
        exporter: type[ExporterProcess], tmp_path: Path) -> None:
    csv = tmp_path / "collectors.csv"
    csv.write_text((ROOT / "collectors.csv").read_text())
    proc = exporter(["--backend", "sim", "--sim.profile", "h100-8", "-c", "1s", "-f", str(csv)])
    proc.wait_ready()
    metrics_with(proc, "DCGM_FI_PROF_SM_ACTIVE{")
    csv.write_text(csv.read_text() + "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS, gauge, Reasons.\n")
    proc.proc.send_signal(signal.SIGHUP)
    # Every poll from the reload on, told apart by its success time: the reload's own
    # poll comes at once, the next a second later, so scraping in a loop sees each.
    polls: dict[float, int] = {}

    def five_polls_after_the_reload() -> bool:
        samples = series(proc.metrics())
        if any(name == "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS" for name, _ in samples):
            taken = samples[("gpu_exporter_last_poll_success_timestamp_seconds", ())]
            polls[taken] = sum(1 for name, _ in samples if name.startswith("DCGM_FI_PROF_"))
        return len(polls) >= 5

    wait_until(five_polls_after_the_reload, timeout=30, what="five polls after the reload")
    # h100-8: 12 profiling fields on 8 GPUs, in every poll.
    assert sorted(polls.values()) == [96] * len(polls), polls


def test_sigterm_stops_within_five_seconds(exporter: type[ExporterProcess]) -> None:
    proc = exporter(SIM)
    proc.wait_ready()
    proc.proc.send_signal(signal.SIGTERM)
    proc.proc.wait(5)
    assert proc.proc.returncode == 0


@pytest.mark.parametrize(("args", "message"), [
    (["--backend", "sim", "-f", "{csv}"], "{csv}: enables no field this exporter serves; "
                                          "{csv}:2: unknown field 'DCGM_FI_DEV_GPU_TMP' (did "
                                          "you mean DCGM_FI_DEV_GPU_TEMP?); skipped"),
    (["--backend", "sim", "--sim.profile", "h900"], "--sim.profile"),
    (["--backend", "sim", "--sim.fault", "xid,gpu=0"], "--sim.fault 'xid,gpu=0'"),
    (["-c", "soon"], "--collect-interval: 'soon' is not a duration"),
])
def test_bad_start_up_input_exits_with_a_named_error(tmp_path: Path, args: list[str],
                                                     message: str) -> None:
    csv = tmp_path / "bad.csv"
    csv.write_text("# header\nDCGM_FI_DEV_GPU_TMP, gauge, typo\n")
    argv = [a.replace("{csv}", str(csv)) for a in args]
    result = subprocess.run([sys.executable, "-m", "exporter", "serve", *argv], cwd=ROOT,
                            capture_output=True, text=True, timeout=30)
    assert result.returncode == 2
    assert message.replace("{csv}", str(csv)) in result.stderr


def test_no_nvml_library_explains_and_points_to_sim(tmp_path: Path) -> None:
    env = {**os.environ, "LD_LIBRARY_PATH": str(tmp_path)}
    probe = subprocess.run(
        [sys.executable, "-c", "import ctypes; ctypes.CDLL('libnvidia-ml.so.1')"],
        env=env, capture_output=True)
    if probe.returncode == 0:
        pytest.skip("this machine has an NVML library")
    result = subprocess.run([sys.executable, "-m", "exporter", "serve", "--backend", "auto"],
                            cwd=ROOT, env=env, capture_output=True, text=True, timeout=30)
    assert result.returncode == 1
    assert "libnvidia-ml.so.1" in result.stderr
    assert "--backend sim" in result.stderr


def _serve_then(tmp_path: Path, after: str) -> str:
    """The output of a child that runs `serve` on the simulated node until it is ready,
    is stopped by SIGTERM, and then runs `after` (with `rc`, serve's exit code)."""
    port = free_port()
    code = (
        "import sys\n"
        "from exporter.cli import main\n"
        f"rc = main(['serve', '--backend', 'sim', '-a', '127.0.0.1:{port}', '-c', '200ms'])\n"
        + after
    )
    log = tmp_path / "serve.log"
    with log.open("w") as out:
        child = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, stdout=out,
                                 stderr=subprocess.STDOUT, text=True)
        try:
            # Serving, with the first poll done: everything serve imports is loaded by now.
            wait_until(lambda: child.poll() is not None
                       or answers(f"http://127.0.0.1:{port}/ready"),
                       timeout=60, what="the exporter answering /ready")
            child.send_signal(signal.SIGTERM)
            child.wait(30)
        finally:
            if child.poll() is None:
                child.kill()
                child.wait()
    return log.read_text()


def test_serve_path_never_imports_heavy_libraries(tmp_path: Path) -> None:
    output = _serve_then(tmp_path, (
        "heavy = sorted({m.split('.')[0] for m in sys.modules} & "
        "{'pandas', 'matplotlib', 'grafanalib', 'kubernetes', 'yaml', 'numpy', 'grpc', "
        "'scipy'})\n"
        "print('HEAVY', heavy, rc)\n"))
    assert "HEAVY [] 0" in output, output


def test_serving_hands_the_interpreter_lock_back_to_the_loop_sooner(tmp_path: Path) -> None:
    """The poll and render threads give way to the event loop within the switch interval,
    shortened while serving (benchmarks/bench_serve.py measures the loop stalls)."""
    assert sys.getswitchinterval() > LOOP_SWITCH_INTERVAL_S  # this process: the default
    output = _serve_then(tmp_path, "print('SWITCH', sys.getswitchinterval(), rc)\n")
    found = re.search(r"^SWITCH (\S+) 0$", output, re.M)
    assert found, output
    # CPython keeps the interval in whole microseconds.
    assert float(found.group(1)) == pytest.approx(LOOP_SWITCH_INTERVAL_S, abs=1e-6)


def test_sighup_reloads_at_once_not_at_the_next_poll(
        exporter: type[ExporterProcess], tmp_path: Path) -> None:
    csv = tmp_path / "collectors.csv"
    csv.write_text("DCGM_FI_DEV_GPU_TEMP, gauge, GPU temperature (in C).\n")
    proc = exporter(["--backend", "sim", "--sim.profile", "l4-1", "-c", "10m", "-f", str(csv)])
    proc.wait_ready()
    assert _family_names(proc.metrics()) == {"DCGM_FI_DEV_GPU_TEMP"}
    csv.write_text("DCGM_FI_DEV_POWER_USAGE, gauge, Power draw (in W).\n")
    proc.proc.send_signal(signal.SIGHUP)
    # The next scheduled poll is ten minutes away; the reload must not wait for it.
    wait_until(lambda: _family_names(proc.metrics()) == {"DCGM_FI_DEV_POWER_USAGE"}, timeout=15)

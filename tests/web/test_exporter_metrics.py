"""`--enable-exporter-metrics`: the process's own families and promhttp's scrape counters,
after the DCGM families in the same body, with dcgm-exporter's test semantics (the first
scrape sees itself in flight and no finished scrape; the counters survive a reload); off, the
body is what the poll rendered, byte for byte, and prometheus-client is never loaded."""

from __future__ import annotations

import gzip
import re
import signal
import subprocess
import sys
from pathlib import Path

from prometheus_client.openmetrics.parser import (
    text_string_to_metric_families as parse_openmetrics,
)
from prometheus_client.parser import text_string_to_metric_families as parse_text

from exporter.exposition.render import render
from exporter.fields.csv import default_collectors_path
from exporter.series import Family, Sample
from tests.support.exporter_process import ExporterProcess, answers, free_port, http_get
from tests.support.paths import ROOT
from tests.support.promtool import promtool_problems
from tests.support.requirements import require_tool
from tests.support.wait import wait_until
from tests.web.conftest import Client, Response, ServedInThread

SIM = ["--backend", "sim", "--sim.profile", "l4-1", "-c", "200ms"]
OM_ACCEPT = {"Accept": "application/openmetrics-text; version=1.0.0"}
IN_FLIGHT = re.compile(r"^promhttp_metric_handler_requests_in_flight (\S+)$", re.M)
OK_TOTAL = re.compile(r'^promhttp_metric_handler_requests_total\{code="200"\} (\S+)$', re.M)
OWN_PREFIXES = ("process_", "python_", "promhttp_")


def _family_order(text: str) -> list[str]:
    return re.findall(r"^# TYPE (\S+) ", text, re.M)


def _counts(text: str) -> tuple[float, float]:
    in_flight, total = IN_FLIGHT.search(text), OK_TOTAL.search(text)
    assert in_flight is not None, text[-2000:]
    assert total is not None, text[-2000:]
    return float(in_flight.group(1)), float(total.group(1))


def test_the_first_scrape_sees_itself_in_flight_and_none_finished(
        exporter: type[ExporterProcess]) -> None:
    proc = exporter([*SIM, "--enable-exporter-metrics"])
    proc.wait_ready()  # /health and /ready: no scrape yet
    first = proc.metrics()
    assert _counts(first) == (1.0, 0.0)
    second = proc.metrics()
    assert _counts(second) == (1.0, 1.0)
    names = _family_order(first)
    own = [i for i, n in enumerate(names) if n.startswith(OWN_PREFIXES)]
    dcgm = [i for i, n in enumerate(names) if n.startswith("DCGM_")]
    assert dcgm
    assert own
    assert max(dcgm) < min(own)
    assert names[-2:] == ["promhttp_metric_handler_requests_in_flight",
                          "promhttp_metric_handler_requests_total"]
    for family in ("process_cpu_seconds_total", "process_resident_memory_bytes",
                   "process_open_fds", "process_start_time_seconds", "python_info",
                   "python_gc_collections_total", "python_gc_objects_collected_total"):
        assert family in names, family
    parsed = {f.name: f for f in parse_text(first)}
    assert parsed["process_resident_memory_bytes"].samples[0].value > 1e6
    assert parsed["process_open_fds"].samples[0].value >= 3


def test_the_counters_survive_a_reload(exporter: type[ExporterProcess]) -> None:
    # A collectors file given: SIGHUP reloads it.
    proc = exporter([*SIM, "--enable-exporter-metrics", "-f", str(default_collectors_path())])
    proc.wait_ready()
    for _ in range(3):
        proc.metrics()
    proc.proc.send_signal(signal.SIGHUP)
    reloaded = 'gpu_exporter_config_reloads_total{result="success"} 1'
    wait_until(lambda: reloaded in proc.metrics(), 10.0, what="the reload")
    text = proc.metrics()
    assert reloaded in text
    in_flight, finished = _counts(text)
    assert in_flight == 1.0
    assert finished >= 4.0  # the three, and every scrape while waiting for the reload


def _with_timestamps(openmetrics: str) -> str:
    """The body with a timestamp on each sample, as `promtool tsdb create-blocks-from
    openmetrics` requires; every other byte as served."""
    return "".join(f"{line}\n" if line.startswith("#") else f"{line} 1800000000\n"
                   for line in openmetrics.splitlines())


def test_both_formats_are_clean_for_promtool(exporter: type[ExporterProcess],
                                             tmp_path: Path) -> None:
    proc = exporter([*SIM, "--enable-exporter-metrics", "--web.enable-openmetrics"])
    proc.wait_ready()
    text = proc.metrics()
    assert promtool_problems(text) == []
    status, headers, body = proc.get("/metrics", OM_ACCEPT)
    assert status == 200
    assert headers["Content-Type"].startswith("application/openmetrics-text")
    om = body.decode()
    assert om.endswith("# EOF\n")
    assert om.count("# EOF") == 1
    names = {f.name for f in parse_openmetrics(om)}  # type: ignore[no-untyped-call]
    assert {"process_cpu_seconds", "promhttp_metric_handler_requests",
            "promhttp_metric_handler_requests_in_flight", "python_info"} <= names
    # Prometheus's own OpenMetrics parser, through promtool's backfill.
    source = tmp_path / "body.om"
    source.write_text(_with_timestamps(om))
    promtool = require_tool("promtool", "prometheus")
    result = subprocess.run([promtool, "tsdb", "create-blocks-from", "openmetrics",
                             str(source), str(tmp_path / "tsdb")],
                            capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    # Gzipped, both are one gzip member each, with the scrape's own families at the end.
    for accept, ends in (({}, "promhttp_metric_handler_requests_total{code=\"503\"} 0\n"),
                         (OM_ACCEPT, "# EOF\n")):
        status, headers, zipped = proc.get("/metrics", {**accept, "Accept-Encoding": "gzip"})
        assert status == 200
        assert headers["Content-Encoding"] == "gzip"
        plain = gzip.decompress(zipped).decode()
        assert plain.endswith(ends)
        assert _counts(plain)[0] == 1.0
        assert plain.startswith("# HELP DCGM_")


def test_off_the_poll_body_is_served_byte_for_byte(serve: type[ServedInThread]) -> None:
    served = serve(None)
    families = [Family("DCGM_FI_DEV_GPU_TEMP", "gauge", "temp", (Sample((("gpu", "0"),), 40.0),))]
    served.source.current = render(families)
    plain = Client(served.port).get("/metrics")
    zipped = Client(served.port).get("/metrics", headers={"Accept-Encoding": "gzip"})
    assert isinstance(plain, Response)
    assert isinstance(zipped, Response)
    assert plain.body == served.source.current.text
    assert zipped.body == served.source.current.text_gzip


def test_appendable_bodies_hold_the_same_bytes() -> None:
    families = [Family("DCGM_FI_DEV_GPU_TEMP", "gauge", "temp",
                       tuple(Sample((("gpu", str(i)),), 40.0 + i) for i in range(64)))]
    plain, appendable = render(families), render(families, appendable=True)
    assert appendable.text == plain.text
    assert appendable.openmetrics == plain.openmetrics
    assert gzip.decompress(appendable.text_gzip) == plain.text
    assert appendable.openmetrics is not None
    assert appendable.openmetrics_gzip is not None
    assert gzip.decompress(appendable.openmetrics_gzip) == appendable.openmetrics
    assert appendable.text_open is not None
    assert gzip.decompress(appendable.text_open.finish(b"tail\n")) == plain.text + b"tail\n"
    assert appendable.text_open.finish(b"a\n") != appendable.text_open.finish(b"b\n")


def test_off_no_family_of_its_own_and_prometheus_client_never_loaded(
        tmp_path: Path) -> None:
    found = _modules_after_serving(tmp_path, [])
    assert "prometheus_client" not in found.modules
    assert not any(n.startswith(OWN_PREFIXES) for n in found.families)
    on = _modules_after_serving(tmp_path, ["--enable-exporter-metrics"])
    assert "prometheus_client" in on.modules
    assert "promhttp_metric_handler_requests_total" in on.families


class _Served:
    def __init__(self, modules: set[str], families: list[str]) -> None:
        self.modules, self.families = modules, families


def _modules_after_serving(tmp_path: Path, flags: list[str]) -> _Served:
    """The top-level modules loaded by a `serve` child after one scrape, and the families
    of that scrape."""
    port = free_port()
    argv = ["serve", *SIM, "-a", f"127.0.0.1:{port}", *flags]
    code = ("import sys\nfrom exporter.cli import main\n"
            f"rc = main({argv!r})\n"
            "print('MODULES', ' '.join(sorted({m.split('.')[0] for m in sys.modules})))\n")
    log = tmp_path / f"serve{len(flags)}.log"
    with log.open("w") as out:
        child = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, stdout=out,
                                 stderr=subprocess.STDOUT, text=True)
        try:
            wait_until(lambda: child.poll() is not None
                       or answers(f"http://127.0.0.1:{port}/ready"), 60.0, what="serving")
            _, _, body = http_get(f"http://127.0.0.1:{port}/metrics")
            child.send_signal(signal.SIGTERM)
            child.wait(30)
        finally:
            if child.poll() is None:
                child.kill()
                child.wait()
    line = next(x for x in log.read_text().splitlines() if x.startswith("MODULES "))
    return _Served(set(line.split()[1:]), _family_order(body.decode()))

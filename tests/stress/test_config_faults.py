"""Fault matrix, configuration and host side: reloads that fail, a storm of SIGHUPs under
load, and a disk with no room, while the scraper keeps going."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from exporter.simulated.kubelet import SimKubeletHandle
from tests.stress.conftest import Matrix
from tests.stress.disk import full_directory, stop_traced, traced_pid, write_calls
from tests.stress.harness import StressRun, finish
from tests.stress.kubelets import pods
from tests.stress.nodes import (
    INTERVAL,
    SCRAPED_FORMATS,
    dcgm_names,
    during,
    gpus_with,
    start_sim,
)
from tests.stress.results import CASES
from tests.stress.scraper import Scrape
from tests.support.exporter_process import ExporterProcess
from tests.support.paths import ROOT
from tests.support.requirements import require_tool

POWER = "DCGM_FI_DEV_POWER_USAGE"
GPM_RATE = "DCGM_FI_PROF_GR_ENGINE_ACTIVE"
"""A GPM rate: served from the second poll on (a rate needs two samples), not the first."""
RELOADS = "gpu_exporter_config_reloads_total"
EIGHT = {str(i) for i in range(8)}


def replace_file(path: Path, text: str) -> None:
    """As a ConfigMap update lands: the new content appears whole, under a new mtime."""
    staged = path.with_suffix(".new")
    staged.write_text(text)
    os.replace(staged, path)


def collectors_copy(tmp_path: Path) -> Path:
    path = tmp_path / "collectors.csv"
    shutil.copyfile(ROOT / "collectors.csv", path)
    return path


def reloads(scrape: Scrape, result: str) -> float:
    return scrape.value(RELOADS, result=result) or 0.0


def whole_names(run: StressRun) -> set[str]:
    """The DCGM_FI_* names of the whole configuration, read once the GPM rates are served
    too: until the second poll a scrape lacks them, and a fixed count of scrapes after the
    first poll outlasts a poll interval of 300 ms but not one of 1 s."""
    served = run.wait_served(lambda s: gpus_with(s, POWER) == EIGHT
                             and gpus_with(s, GPM_RATE) == EIGHT,
                             "power and the GPM rates of all GPUs")
    return set(dcgm_names(served))


def name_changes(expected: set[str], names: set[str]) -> str:
    """Which names a scrape lacks and which it has beyond `expected` (four of each)."""
    return (f"missing {sorted(expected - names)[:4]}, "
            f"unexpected {sorted(names - expected)[:4]}")


def test_bad_csv_reload(tmp_path: Path, exporter: type[ExporterProcess],
                        matrix: Matrix) -> None:
    csv = collectors_copy(tmp_path)
    good = csv.read_text()
    run = start_sim(exporter, "-f", str(csv))
    served = whole_names(run)
    run.hold(20)
    run.mark("fault")
    # A type no release takes stops a reload; an unknown field no longer does (it is skipped).
    replace_file(csv, good + "DCGM_FI_DEV_MEMORY_TEMP, histogram, a type 4.8.3 refuses\n")
    run.exporter.proc.send_signal(signal.SIGHUP)
    run.wait_served(lambda s: reloads(s, "failure") >= 1, "the broken file refused",
                    since="fault")
    run.hold(20)
    # A writer that truncates first: the exporter may read the file while it is empty.
    csv.write_text("")
    run.wait_served(lambda s: reloads(s, "failure") >= 2, "the empty file refused",
                    since="fault")
    run.hold(20)
    run.mark("clear")
    replace_file(csv, "".join(line for line in good.splitlines(keepends=True)
                              if not line.startswith(POWER)))
    recovery = run.recovered(lambda s: not gpus_with(s, POWER) and reloads(s, "success") >= 1,
                             "the good file without DCGM_FI_DEV_POWER_USAGE")
    run.hold(15)

    def config_as_loaded(scrape: Scrape, marks: Mapping[str, float]) -> list[str]:
        names = set(dcgm_names(scrape))
        if during(scrape, marks, "fault", "clear") and names != served:
            return [f"the running configuration not kept: {name_changes(served, names)}"]
        if during(scrape, marks, "recovered", None) and names != served - {POWER}:
            return ["the new configuration not applied whole: "
                    f"{name_changes(served - {POWER}, names)}"]
        return []

    result = matrix.record("bad-csv", finish(
        run, CASES["bad-csv"][0], ready=[200], rules=[config_as_loaded], recovery_s=recovery))
    assert result.ok, result.explain()


@contextlib.contextmanager
def load_clients(port: int, clients: int) -> Iterator[dict[str, Any]]:
    """`clients` scraping flat out from another process; the dict gets their tally."""
    tally: dict[str, Any] = {}
    proc = subprocess.Popen([sys.executable, "-m", "tests.stress.load", str(port),
                             str(clients)], cwd=ROOT, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    try:
        yield tally
    finally:
        out, _ = proc.communicate("", timeout=60)
        tally.update(json.loads(out))


def test_sighup_ten_times_a_second_under_load(tmp_path: Path, exporter: type[ExporterProcess],
                                              matrix: Matrix) -> None:
    # /ready turns stale after three intervals without a poll. At the other cases' 300 ms, a
    # two-core machine busy with other tests can starve one poll that long (0.9 s); at 1 s
    # it takes 3 s, and reloads that held the poll back would still show.
    run = start_sim(exporter, "-f", str(collectors_copy(tmp_path)), interval="1s")
    served = whole_names(run)
    run.hold(15)
    run.mark("fault")
    pause = threading.Event()
    with load_clients(run.exporter.port, clients=4) as load:
        for _ in range(50):
            run.exporter.proc.send_signal(signal.SIGHUP)
            pause.wait(0.1)  # the storm's own rate: ten a second
            run.alive()
    run.mark("clear")
    last = run.wait_served(lambda s: reloads(s, "success") >= 10, "reloads done", since="clear")
    run.hold(15)

    def whole_configuration(scrape: Scrape, marks: Mapping[str, float]) -> list[str]:
        names = set(dcgm_names(scrape))
        if during(scrape, marks, "fault", None) and names != served:
            return [f"fields changed mid-reload: {name_changes(served, names)}"]
        return []

    result = matrix.record("sighup-storm", finish(
        run, CASES["sighup-storm"][0], ready=[200], rules=[whole_configuration],
        extra_problems=load["failures"][:5],
        note=f"{load['requests']} more requests from the 4 load clients, "
             f"{load['failed']} failed; {reloads(last, 'success'):.0f} reloads"))
    assert result.ok, result.explain()


def test_full_disk_nothing_written(tmp_path: Path, kubelet: SimKubeletHandle,
                                   socket_path: str, exporter: type[ExporterProcess],
                                   matrix: Matrix) -> None:
    strace = require_tool("strace", "strace")
    kubelet.servicer.set_pods(pods("web"))
    trace = tmp_path / "trace"
    with full_directory(tmp_path / "disk") as (disk, how):
        env = {"HOME": str(disk), "TMPDIR": str(disk), "PYTHONDONTWRITEBYTECODE": "1",
               "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get(
                   "PYTHONPATH", "")) if p)}
        launcher = (strace, "-f", "-qq", "--seccomp-bpf", "-o", str(trace),
                    "-e", "trace=%file,%desc", sys.executable, "-m", "exporter")
        proc = exporter(["--backend", "sim", "--sim.profile", "h100-8", "-c", INTERVAL,
                         "--no-hostname", *SCRAPED_FORMATS, "-f",
                         str(collectors_copy(tmp_path)), "-k",
                         "--kubernetes.pod-resources-socket", socket_path],
                        env, launcher=launcher, cwd=disk)
        try:
            run = StressRun(proc).start()
            run.wait_served(lambda s: gpus_with(s, POWER) == EIGHT, "power of all GPUs")
            run.hold(30)
            child = traced_pid(proc)
            assert child is not None
            os.kill(child, signal.SIGHUP)  # a reload reads the collectors file again
            run.wait_served(lambda s: reloads(s, "success") >= 1, "the reload")
            run.hold(30)
            result = finish(run, CASES["full-disk"][0], ready=[200])
        finally:
            stop_traced(proc)
        writes, calls = write_calls(trace)
    result.problems += [f"wrote: {w}" for w in writes[:10]]
    result.note = f"{how}; {calls} file system calls traced, {len(writes)} of them writes"
    matrix.record("full-disk", result)
    assert result.ok, result.explain()

"""dcgm-exporter's label and count options through a real exporter on the simulated node:
`-o`, `-rbmn`, `--hpc-job-mapping-dir` and DCGM_EXP_CLOCK_EVENTS_COUNT, scraped over HTTP."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import ExporterProcess
from tests.support.wait import wait_until

Series = dict[tuple[str, tuple[tuple[str, str], ...]], float]

CSV = """\
DCGM_FI_DEV_GPU_TEMP, gauge, GPU temperature (in C).
DCGM_EXP_CLOCK_EVENTS_COUNT, gauge, Count of clock events within the time window.
"""


def series(text: str) -> Series:
    seen: Series = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            key = (sample.name, tuple(sorted(sample.labels.items())))
            assert key not in seen, f"duplicate series {key}"
            seen[key] = sample.value
    return seen


def scrape_until(proc: ExporterProcess, condition: Callable[[Series], bool],
                 timeout: float = 20.0) -> Series:
    """The first scrape whose series meet `condition` (each poll re-reads the job files)."""
    def met() -> Series | None:
        found = series(proc.metrics())
        return found if condition(found) else None
    return wait_until(met, timeout, interval=0.1, what="a scrape meeting the condition")


def labels_of(found: Series, name: str) -> list[dict[str, str]]:
    return [dict(labels) for (metric, labels) in found if metric == name]


def test_old_names_plain_model_names_jobs_and_clock_events(
        exporter: type[ExporterProcess], tmp_path: Path) -> None:
    (tmp_path / "counters.csv").write_text(CSV)
    jobs = tmp_path / "jobs"
    jobs.mkdir()
    (jobs / "0").write_text("slurm-101\nslurm-102\n")
    proc = exporter(["--backend", "sim", "--sim.profile", "h100-8", "-c", "200ms",
                     "--sim.fault", "thermal,gpu=0,at=0s", "-f", str(tmp_path / "counters.csv"),
                     "-o", "-rbmn", "--hpc-job-mapping-dir", str(jobs),
                     "--clock-events-count-window-size", "60000"])
    proc.wait_ready()

    def thermal_counted(found: Series) -> bool:
        return any(d["clock_event"] == "hw_thermal" and d["gpu"] == "0"
                   for d in labels_of(found, "DCGM_EXP_CLOCK_EVENTS_COUNT"))

    found = scrape_until(proc, thermal_counted)
    temps = labels_of(found, "DCGM_FI_DEV_GPU_TEMP")
    assert {d["modelName"] for d in temps} == {"NVIDIA-H100-80GB-HBM3"}
    assert all("uuid" in d and "UUID" not in d for d in temps)
    assert sorted(d.get("hpc_job", "") for d in temps if d["gpu"] == "0") == \
        ["slurm-101", "slurm-102"]
    assert not [d for d in temps if d["gpu"] != "0" and "hpc_job" in d]
    counts = [d for d in labels_of(found, "DCGM_EXP_CLOCK_EVENTS_COUNT") if d["gpu"] == "0"]
    assert {d["window_size_in_ms"] for d in counts} == {"60000"}
    assert {(d["clock_event"], d["hpc_job"]) for d in counts} >= {
        ("hw_thermal", "slurm-101"), ("hw_thermal", "slurm-102"),
        ("hw_slowdown", "slurm-101")}

    # A job starts on GPU 3 and the one on GPU 0 ends: the next polls follow the files.
    (jobs / "3").write_text("slurm-200\n")
    (jobs / "0").unlink()
    found = scrape_until(proc, lambda s: any(
        d.get("hpc_job") == "slurm-200" for d in labels_of(s, "DCGM_FI_DEV_GPU_TEMP")))
    temps = labels_of(found, "DCGM_FI_DEV_GPU_TEMP")
    assert [d["gpu"] for d in temps if "hpc_job" in d] == ["3"]
    assert len(temps) == 8

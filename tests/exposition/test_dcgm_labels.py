"""dcgm-exporter's label variants in the exposition: 1.x names (`-o`), model names without
blanks (`-rbmn`), one series per HPC job, and the windowed clock event counts."""

from __future__ import annotations

from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from exporter.devices.model import ClockEventCount, Entity, Inventory, Readings, XidCount
from exporter.exposition.config import ExpositionSettings
from exporter.exposition.labels import DEFAULT_STYLE, LabelStyle, model_name
from exporter.exposition.publisher import Publisher
from exporter.exposition.render import device_families, render
from exporter.fields.csv import parse_collectors
from exporter.k8s.hpc_jobs import JobMap
from exporter.k8s.types import Attribution, PodRef
from exporter.sampling.snapshot import HostLabel, Snapshot
from exporter.sampling.stats import PollStats

CSV = """\
DCGM_FI_DEV_GPU_TEMP, gauge, GPU temperature (in C).
DCGM_FI_DEV_FB_USED, gauge, FB used.
DCGM_EXP_XID_ERRORS_COUNT, gauge, XID count.
DCGM_EXP_CLOCK_EVENTS_COUNT, counter, reported clock events
"""

GPU0 = Entity(0, "GPU-aaa", "00000000:83:00.0", "nvidia0", "NVIDIA H200 NVL")
GPU1 = Entity(1, "GPU-bbb", "00000000:84:00.0", "nvidia1", " NVIDIA  T400   4GB ")
MIG = Entity(1, "GPU-bbb", "00000000:84:00.0", "nvidia1", " NVIDIA  T400   4GB ", 2, "1g.5gb")


def snapshot(**kw: object) -> Snapshot:
    base = dict(
        inventory=Inventory((GPU0, GPU1), (MIG,), "590.48.01"),
        readings=Readings(
            values={(0, -1): {"DCGM_FI_DEV_GPU_TEMP": 28.0},
                    (1, -1): {"DCGM_FI_DEV_GPU_TEMP": 30.0},
                    (1, 2): {"DCGM_FI_DEV_FB_USED": 22.0}},
            xid_window=(XidCount((1, 2), 43, 2),), xid_window_s=300.0,
            clock_events=(ClockEventCount((0, -1), "sw_thermal", 4),
                          ClockEventCount((0, -1), "power_cap", 1)),
            clock_events_window_s=60.0),
        collectors=parse_collectors(CSV, "t.csv"),
        host=HostLabel("Hostname", "node-a"),
    )
    base.update(kw)
    return Snapshot(**base)  # type: ignore[arg-type]


def text_of(snap: Snapshot, style: LabelStyle = DEFAULT_STYLE, jobs: JobMap | None = None
            ) -> str:
    text = render(device_families(snap, style, jobs or {})).text.decode()
    seen = set()
    for family in text_string_to_metric_families(text):  # parses; no duplicate series
        for sample in family.samples:
            key = (sample.name, tuple(sorted(sample.labels.items())))
            assert key not in seen, key
            seen.add(key)
    return text


def test_default_style_is_dcgm_exporters_current_one() -> None:
    text = text_of(snapshot())
    assert 'UUID="GPU-aaa"' in text
    assert "uuid=" not in text
    assert 'modelName="NVIDIA H200 NVL"' in text


def test_old_namespace_renames_uuid_and_pod_labels() -> None:
    owner = PodRef("vllm-0", "llm", "server", (("pod_uid", "u-1"),))
    snap = snapshot(attribution=Attribution(owners={(0, -1): owner}))
    text = text_of(snap, LabelStyle(old_namespace=True))
    assert ('DCGM_FI_DEV_GPU_TEMP{gpu="0",uuid="GPU-aaa",pci_bus_id="00000000:83:00.0",'
            'device="nvidia0",modelName="NVIDIA H200 NVL",Hostname="node-a",'
            'container_name="server",pod_name="vllm-0",pod_namespace="llm",pod_uid="u-1"} 28\n'
            ) in text
    assert "UUID=" not in text
    for current in ("pod", "namespace", "container"):
        assert f',{current}="' not in text
    # the windowed counts carry the same device labels
    assert 'DCGM_EXP_XID_ERRORS_COUNT{gpu="1",uuid="GPU-bbb"' in text


def test_blanks_in_model_names_become_single_dashes() -> None:
    text = text_of(snapshot(), LabelStyle(model_name_without_blanks=True))
    assert 'modelName="NVIDIA-H200-NVL"' in text
    assert 'modelName="NVIDIA-T400-4GB",GPU_I_PROFILE="1g.5gb"' in text
    assert 'modelName="NVIDIA H200' not in text
    assert model_name("NVIDIA H200", LabelStyle()) == "NVIDIA H200"


def test_each_job_on_a_device_gets_its_own_series() -> None:
    jobs = {(0, -1): ("4711", "4712"), (1, 2): ("mig-job",)}
    text = text_of(snapshot(), jobs=jobs)
    gpu0 = [line for line in text.splitlines()
            if line.startswith('DCGM_FI_DEV_GPU_TEMP{gpu="0"')]
    assert [line.rsplit(",", 1)[1] for line in gpu0] == ['hpc_job="4711"} 28',
                                                         'hpc_job="4712"} 28']
    # GPU 1 itself has no file: one series, no hpc_job label; its MIG instance has one.
    assert 'DCGM_FI_DEV_GPU_TEMP{gpu="1",UUID="GPU-bbb",pci_bus_id="00000000:84:00.0",' \
           'device="nvidia1",modelName=" NVIDIA  T400   4GB ",Hostname="node-a"} 30\n' in text
    assert 'GPU_I_ID="2",Hostname="node-a",hpc_job="mig-job"} 22\n' in text
    assert 'hpc_job="mig-job",xid="43",window_size_in_ms="300000"} 2\n' in text
    assert text.count('clock_event="sw_thermal"') == 2  # once per job of GPU 0
    assert text.count("gpu_exporter_xid_errors_total{") == 0  # no totals in this snapshot


def test_clock_event_counts_per_reason_with_their_window() -> None:
    text = text_of(snapshot())
    assert "# TYPE DCGM_EXP_CLOCK_EVENTS_COUNT counter\n" in text
    assert ('DCGM_EXP_CLOCK_EVENTS_COUNT{gpu="0",UUID="GPU-aaa",pci_bus_id="00000000:83:00.0",'
            'device="nvidia0",modelName="NVIDIA H200 NVL",Hostname="node-a",'
            'clock_event="sw_thermal",window_size_in_ms="60000"} 4\n') in text
    assert 'clock_event="power_cap",window_size_in_ms="60000"} 1\n' in text
    assert 'DCGM_EXP_CLOCK_EVENTS_COUNT{gpu="1"' not in text  # nothing seen: no series


def test_a_gpu_without_a_clock_event_reading_has_one_zero_series_without_a_reason() -> None:
    readings = Readings(clock_events=(ClockEventCount((1, -1), None, 0),),
                        clock_events_window_s=60.0)
    text = text_of(snapshot(readings=readings))
    assert ('DCGM_EXP_CLOCK_EVENTS_COUNT{gpu="1",UUID="GPU-bbb",pci_bus_id="00000000:84:00.0",'
            'device="nvidia1",modelName=" NVIDIA  T400   4GB ",Hostname="node-a",'
            'window_size_in_ms="60000"} 0\n') in text
    assert "clock_event=" not in text


def test_clock_event_counts_are_left_out_when_the_csv_does_not_ask() -> None:
    csv = parse_collectors("DCGM_FI_DEV_GPU_TEMP, gauge, t\n", "t.csv")
    assert "DCGM_EXP_CLOCK_EVENTS_COUNT" not in text_of(snapshot(collectors=csv))


def test_the_publisher_reads_the_job_directory_and_applies_the_style(tmp_path: Path) -> None:
    (tmp_path / "0").write_text("job-a\n")
    publish = Publisher("sim", ExpositionSettings(use_old_namespace=True,
                                                  replace_blanks_in_model_name=True,
                                                  hpc_job_mapping_dir=tmp_path))
    text = publish(snapshot(), PollStats(collect_interval_s=1.0), []).text.decode()
    assert ('DCGM_FI_DEV_GPU_TEMP{gpu="0",uuid="GPU-aaa",pci_bus_id="00000000:83:00.0",'
            'device="nvidia0",modelName="NVIDIA-H200-NVL",Hostname="node-a",'
            'hpc_job="job-a"} 28\n') in text
    (tmp_path / "0").unlink()  # the job ended: read again at the next poll
    text = publish(snapshot(), PollStats(collect_interval_s=1.0), []).text.decode()
    assert "hpc_job" not in text

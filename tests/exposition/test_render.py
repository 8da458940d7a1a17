from __future__ import annotations

import gzip

from exporter.devices.model import Entity, Inventory, MigDevice, Readings, XidCount, XidTotal
from exporter.exposition.config import ExpositionSettings
from exporter.exposition.publisher import Publisher
from exporter.exposition.render import device_families, format_value, render
from exporter.fields.csv import parse_collectors
from exporter.k8s.types import Attribution, PodRef
from exporter.sampling.snapshot import HostLabel, Snapshot
from exporter.sampling.stats import PollStats

CSV = """\
DCGM_FI_DEV_GPU_TEMP, gauge, GPU temperature (in C).
DCGM_FI_DEV_POWER_USAGE, gauge, Power draw (in W).
DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION, counter, Energy.
DCGM_FI_DEV_FB_USED, gauge, FB used.
DCGM_EXP_XID_ERRORS_COUNT, gauge, XID count.
DCGM_FI_DRIVER_VERSION, label, Driver Version
"""

GPU0 = Entity(0, "GPU-aaa", "00000000:83:00.0", "nvidia0", "NVIDIA H200")
GPU1 = Entity(1, "GPU-bbb", "00000000:84:00.0", "nvidia1", 'Model "quoted"\\x')
MIG = Entity(0, "GPU-aaa", "00000000:83:00.0", "nvidia0", "NVIDIA H200", 2, "3g.71gb",
             (MigDevice("MIG-1", 2, 0, "NVIDIA H200 MIG 1c.3g.71gb"),
              MigDevice("MIG-2", 2, 1, "NVIDIA H200 MIG 2c.3g.71gb")))


def snapshot(**kw: object) -> Snapshot:
    base = dict(
        inventory=Inventory((GPU0, GPU1), (MIG,), "590.48.01"),
        readings=Readings(values={
            (0, -1): {"DCGM_FI_DEV_GPU_TEMP": 28.0, "DCGM_FI_DEV_POWER_USAGE": 78.28,
                      "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": 123456789.0},
            (1, -1): {"DCGM_FI_DEV_GPU_TEMP": 30.0, "DCGM_FI_DEV_FB_USED": 0.0},
            (0, 2): {"DCGM_FI_DEV_FB_USED": 22.0},
        }, xid_window=(XidCount((0, 2), 43, 2),), xid_totals=(XidTotal((0, 2), 43, 5, 1.5e9),),
            xid_window_s=300.0),
        collectors=parse_collectors(CSV, "t.csv"),
        host=HostLabel("Hostname", "node-a"),
    )
    base.update(kw)
    return Snapshot(**base)  # type: ignore[arg-type]


def test_dcgm_label_order_mig_labels_and_driver_label() -> None:
    text = render(device_families(snapshot())).text.decode()
    assert ('DCGM_FI_DEV_GPU_TEMP{gpu="0",UUID="GPU-aaa",pci_bus_id="00000000:83:00.0",'
            'device="nvidia0",modelName="NVIDIA H200",Hostname="node-a",'
            'DCGM_FI_DRIVER_VERSION="590.48.01"} 28\n') in text
    assert ('DCGM_FI_DEV_FB_USED{gpu="0",UUID="GPU-aaa",pci_bus_id="00000000:83:00.0",'
            'device="nvidia0",modelName="NVIDIA H200",GPU_I_PROFILE="3g.71gb",GPU_I_ID="2",'
            'Hostname="node-a",DCGM_FI_DRIVER_VERSION="590.48.01"} 22\n') in text
    # Two compute instances share the GPU instance: one series, not two with one label set.
    assert text.count('GPU_I_ID="2",Hostname="node-a",DCGM_FI_DRIVER_VERSION="590.48.01"} 22') == 1
    # A value that is missing is omitted, not zero.
    assert 'DCGM_FI_DEV_POWER_USAGE{gpu="1"' not in text
    assert "DCGM_FI_DEV_POWER_USAGE{" in text
    assert " 78.280000\n" in text
    assert "# TYPE DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION counter\n" in text
    assert "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{" in text
    assert "DCGM_FI_DRIVER_VERSION{" not in text  # label fields emit no series


def test_label_values_are_escaped() -> None:
    text = render(device_families(snapshot())).text.decode()
    assert 'modelName="Model \\"quoted\\"\\\\x"' in text


def test_host_label_variants() -> None:
    lower = render(device_families(snapshot(host=HostLabel("hostname", "n")))).text.decode()
    assert 'hostname="n"' in lower
    assert "Hostname=" not in lower
    none = render(device_families(snapshot(host=HostLabel(None, "n")))).text.decode()
    assert "ostname=" not in none


def test_pod_labels_follow_dcgm_order_for_exclusive_owner() -> None:
    owner = PodRef("vllm-0", "llm", "server", (("pod_uid", "u-1"),))
    text = render(device_families(snapshot(
        attribution=Attribution(owners={(1, -1): owner})))).text.decode()
    assert ('DCGM_FI_DEV_GPU_TEMP{gpu="1",UUID="GPU-bbb",pci_bus_id="00000000:84:00.0",'
            'device="nvidia1",modelName="Model \\"quoted\\"\\\\x",Hostname="node-a",'
            'DCGM_FI_DRIVER_VERSION="590.48.01",container="server",namespace="llm",'
            'pod="vllm-0",pod_uid="u-1"} 30\n') in text
    # GPU_TEMP, FB_USED and the 0 of DCGM_EXP_XID_ERRORS_COUNT (no XID in the window) of GPU 1
    assert text.count('pod="vllm-0"') == 3
    assert 'pod=""' not in text


def test_pod_scope_hides_other_entities_everywhere() -> None:
    snap = snapshot(attribution=Attribution(visible=frozenset({(0, 2)})))
    text = Publisher("sim")(snap, PollStats(collect_interval_s=1.0), []).text.decode()
    assert "GPU-bbb" not in text
    assert 'GPU_I_ID="2"' in text
    assert 'gpu_exporter_devices{kind="gpu"} 0' in text
    assert 'gpu_exporter_devices{kind="mig"} 1' in text


def test_xid_families() -> None:
    text = render(device_families(snapshot())).text.decode()
    assert 'xid="43",window_size_in_ms="300000"} 2\n' in text
    assert "# TYPE gpu_exporter_xid_errors_total counter" in text
    assert 'gpu_exporter_xid_errors_total{gpu="0"' in text


def test_openmetrics_keeps_dcgm_counter_names_and_ends_with_eof() -> None:
    rendered = render(device_families(snapshot()))
    assert rendered.openmetrics is not None
    assert rendered.openmetrics_gzip is not None
    om = rendered.openmetrics.decode()
    assert "# TYPE DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION unknown\n" in om
    assert "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{" in om
    assert "# TYPE gpu_exporter_xid_errors counter\n" in om
    assert "gpu_exporter_xid_errors_total{" in om
    assert om.endswith("# EOF\n")
    assert gzip.decompress(rendered.openmetrics_gzip) == rendered.openmetrics
    assert gzip.decompress(rendered.text_gzip) == rendered.text


def test_openmetrics_is_rendered_only_when_it_may_be_served() -> None:
    snap, stats = snapshot(), PollStats(collect_interval_s=1.0)
    both = Publisher("sim")(snap, stats, [])
    text_only = Publisher("sim", ExpositionSettings(openmetrics=False))(snap, stats, [])
    assert text_only.openmetrics is None
    assert text_only.openmetrics_gzip is None
    assert text_only.text == both.text
    assert gzip.decompress(text_only.text_gzip) == both.text
    assert both.openmetrics is not None


def test_value_formatting() -> None:
    assert format_value(3.0) == "3"
    assert format_value(0.125) == "0.125000"
    assert format_value(float("nan")) == "NaN"
    assert format_value(2.0**60) == f"{2.0**60:.6f}"

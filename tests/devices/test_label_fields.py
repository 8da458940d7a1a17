"""Label-type fields read through NVML: strings on every series of their GPU."""

from __future__ import annotations

from exporter.devices.nvml import NvmlBackend
from exporter.exposition.render import device_families, render
from exporter.fields.csv import parse_collectors
from exporter.sampling.snapshot import HostLabel, Snapshot
from exporter.simulated.node import SimNvml
from tests.support.clock import FakeClock

CSV = """\
DCGM_FI_DEV_FB_USED, gauge, framebuffer used
DCGM_FI_DRIVER_VERSION, label, driver
DCGM_FI_DEV_VBIOS_VERSION, label, VBIOS
DCGM_FI_DEV_POWER_INFOROM_VER, label, power inforom object (N/A on these boards)
DCGM_FI_DEV_SERIAL, label, serial
"""


def test_label_fields_label_every_series_of_their_gpu_sorted_by_name() -> None:
    clock = FakeClock(start=1_700_000_000.0)
    collectors = parse_collectors(CSV, "c.csv")
    backend = NvmlBackend(SimNvml("h200-mig", seed=7, clock=clock), collectors.specs,
                          clock=clock, wall_clock=clock)
    backend.start()
    try:
        readings = backend.poll()
        text = render(device_families(Snapshot(
            backend.inventory, readings, collectors, HostLabel("Hostname", "n")))).text.decode()
    finally:
        backend.close()
    series = [line for line in text.splitlines() if line.startswith("DCGM_FI_DEV_FB_USED{")]
    assert len(series) == 6 + 4 + 7  # GPUs 2-7 whole, GPU 0's 4 and GPU 1's 7 instances
    for line in series:
        # The capture's H200 figures; the power object reads N/A there: no label.
        assert (',Hostname="n",DCGM_FI_DEV_SERIAL="0000000000000",'
                'DCGM_FI_DEV_VBIOS_VERSION="96.00.A5.00.03",DCGM_FI_DRIVER_VERSION="590.48.01"'
                in line), line
        assert "POWER_INFOROM" not in line

"""NVLink entities on the simulated node: which links get series, and with which labels."""

from __future__ import annotations

import pynvml

from exporter.devices.nvml import NvmlBackend
from exporter.exposition.labels import DEFAULT_STYLE, LabelStyle
from exporter.exposition.render import device_families, render
from exporter.fields.csv import parse_collectors
from exporter.k8s.hpc_jobs import NO_JOBS, JobMap
from exporter.sampling.snapshot import HostLabel, Snapshot
from exporter.simulated.node import SimNvml, parse_fault
from exporter.simulated.node.core import Handle
from tests.support.clock import FakeClock

CSV = """\
DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_PER_LINK_TOTAL, counter, CRC flit errors of one link.
DCGM_FI_DEV_NVLINK_TX_THROUGHPUT_PER_LINK, counter, KiB sent over one link.
DCGM_FI_DEV_NVLINK_LINK_STATUS, gauge, link state.
DCGM_FI_PROF_NVLINK_TX_BYTES_PER_LINK, gauge, bytes per second sent over one link.
DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_L13, counter, CRC flit errors of lane 13.
DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL, counter, CRC flit errors of all links.
DCGM_FI_DRIVER_VERSION, label, driver.
"""


def scrape(profile: str, faults: tuple[str, ...] = (), style: LabelStyle = DEFAULT_STYLE,
           jobs: JobMap = NO_JOBS) -> tuple[str, NvmlBackend]:
    clock = FakeClock(start=1_700_000_000.0)
    collectors = parse_collectors(CSV, "links.csv")
    assert collectors.warnings == ()
    sim = SimNvml(profile, seed=7, clock=clock, faults=[parse_fault(f) for f in faults])
    backend = NvmlBackend(sim, collectors.specs, clock=clock, wall_clock=clock)
    backend.start()
    try:
        for _ in range(3):  # GPM rates need two samples
            readings = backend.poll()
            clock.advance(15.0)
        snapshot = Snapshot(backend.inventory, readings, collectors,
                            HostLabel("Hostname", "node-a"))
        return render(device_families(snapshot, style, jobs)).text.decode(), backend
    finally:
        backend.close()


def series(text: str, name: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith(name + "{")]


def label(line: str, name: str) -> str:
    return line.split(f'{{{name}="' if f'{{{name}="' in line else f',{name}="')[1].split('"')[0]


def test_every_active_link_of_every_gpu_has_series_labelled_as_dcgm_exporter_does() -> None:
    text, _ = scrape("h100-8")
    per_link = series(text, "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_PER_LINK_TOTAL")
    assert len(per_link) == 8 * 18
    assert per_link[0].startswith(
        'DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_PER_LINK_TOTAL{nvlink="0",gpu="0",gpu_uuid="GPU-')
    assert (',pci_bus_id="00000000:00:09.0",device="nvidia0",model_name="NVIDIA H100 80GB '
            'HBM3",hostname="node-a",DCGM_FI_DRIVER_VERSION="590.48.01"}') in per_link[0]
    for name in ("DCGM_FI_DEV_NVLINK_TX_THROUGHPUT_PER_LINK", "DCGM_FI_DEV_NVLINK_LINK_STATUS",
                 "DCGM_FI_PROF_NVLINK_TX_BYTES_PER_LINK"):
        assert len(series(text, name)) == 8 * 18, name
    # GPU-level fields keep the GPU's own labels.
    (total,) = [s for s in series(text, "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL")
                if 'gpu="0"' in s]
    assert total.startswith('DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL{gpu="0",UUID="GPU-')


def test_link_series_follow_the_label_style_and_repeat_per_hpc_job() -> None:
    text, _ = scrape("h100-8", style=LabelStyle(old_namespace=True),
                     jobs={(0, -1): ("job-a", "job-b")})
    gpu0_link0 = [s for s in series(text, "DCGM_FI_DEV_NVLINK_LINK_STATUS")
                  if s.startswith('DCGM_FI_DEV_NVLINK_LINK_STATUS{nvlink="0",gpu="0",')]
    assert [s.split(",hpc_job=")[1].split("}")[0] for s in gpu0_link0] == ['"job-a"',
                                                                             '"job-b"']
    # The link's own labels stay dcgm-exporter's link template whatever the style.
    assert all('gpu_uuid="GPU-' in s and "uuid=" not in s.replace("gpu_uuid=", "")
               for s in gpu0_link0)
    assert all('DCGM_FI_DRIVER_VERSION="590.48.01",hpc_job=' in s for s in gpu0_link0)
    assert len(series(text, "DCGM_FI_DEV_NVLINK_LINK_STATUS")) == 8 * 18 + 18


def test_the_links_share_the_gpu_total_and_a_fault_shows_on_its_own_link() -> None:
    text, _ = scrape("h100-8", ("nvlink,gpu=2,link=5,at=0s,rate=10",))
    per_link = {(label(line, "nvlink"), label(line, "gpu")): float(line.rsplit(" ", 1)[1])
                for line in series(text, "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_PER_LINK_TOTAL")}
    assert per_link[("5", "2")] >= 10 * 30  # the last of three polls 15 s apart: t=30 s
    total = next(float(s.rsplit(" ", 1)[1]) for s in
                 series(text, "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL") if 'gpu="2"' in s)
    assert total == sum(v for (_, gpu), v in per_link.items() if gpu == "2")
    assert len(series(text, "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_L13")) == 8


def test_a_mig_gpu_has_no_link_series_and_a_gpu_without_lane_13_no_lane_13_series() -> None:
    mig_text, _ = scrape("h200-mig")
    gpus = {label(s, "gpu")
            for s in series(mig_text, "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_PER_LINK_TOTAL")}
    assert gpus == {"2", "3", "4", "5", "6", "7"}  # GPUs 0 and 1 run MIG
    a100_text, backend = scrape("a100-timesliced")  # 12 links per GPU
    assert len(series(a100_text, "DCGM_FI_DEV_NVLINK_LINK_STATUS")) == 4 * 12
    assert series(a100_text, "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_L13") == []
    # Asked once per GPU (INVALID_ARGUMENT: no such link), then left out of the plan.
    assert backend.call_errors[("nvmlDeviceGetNvLinkErrorCounter", "INVALID_ARGUMENT")] == 4
    l4_text, _ = scrape("l4-1")  # no NVLink at all
    assert l4_text.count("NVLINK") == 0


def test_a_reload_on_the_same_links_keeps_their_series_and_asks_nothing_unsupported_again(
        ) -> None:
    """Link outputs and (field id, link) field-value entries that answered "not supported"
    stay left out across a reload that only changes the fields; every link keeps its series."""
    clock = FakeClock(start=1_700_000_000.0)
    collectors = parse_collectors(CSV, "links.csv")
    backend = NvmlBackend(SimNvml("a100-timesliced", seed=7, clock=clock), collectors.specs,
                          clock=clock, wall_clock=clock)
    backend.start()
    try:
        for _ in range(2):
            before = backend.poll()
            clock.advance(15.0)
        errors = dict(backend.call_errors)
        more = parse_collectors(CSV + "DCGM_FI_DEV_GPU_TEMP, gauge, temperature.\n", "more.csv")
        backend.set_fields(more.specs)
        for _ in range(2):
            after = backend.poll()
            clock.advance(15.0)
    finally:
        backend.close()
    assert dict(backend.call_errors) == errors
    assert {k: set(v) for k, v in after.links.items()} == \
        {k: set(v) for k, v in before.links.items()}
    assert len(after.links) == 4 * 12
    assert all("DCGM_FI_DEV_GPU_TEMP" in after.values[(g, -1)] for g in range(4))


class NoCountersOnLink3(SimNvml):
    """The simulated node, but link 3 of every GPU keeps no error counters."""

    def nvmlDeviceGetNvLinkErrorCounter(self, handle: Handle, link: int, counter: int) -> int:
        if link == 3:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        # The node's own method is made from the call table, out of the type checker's sight.
        table = getattr(super(), "nvmlDeviceGetNvLinkErrorCounter")  # noqa: B009
        count: int = table(handle, link, counter)
        return count


def test_a_link_that_does_not_support_a_field_loses_it_alone_also_across_a_reload() -> None:
    clock = FakeClock(start=1_700_000_000.0)
    collectors = parse_collectors(CSV, "links.csv")
    backend = NvmlBackend(NoCountersOnLink3("a100-timesliced", seed=7, clock=clock),
                          collectors.specs, clock=clock, wall_clock=clock)
    crc = "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_PER_LINK_TOTAL"

    def links_with_crc() -> set[tuple[int, int]]:
        readings = backend.poll()
        clock.advance(15.0)
        return {key for key, values in readings.links.items() if crc in values}

    every_link_but_3 = {(g, link) for g in range(4) for link in range(12) if link != 3}
    backend.start()
    try:
        assert links_with_crc() == every_link_but_3
        errors = dict(backend.call_errors)
        assert errors[("nvmlDeviceGetNvLinkErrorCounter", "NOT_SUPPORTED")] == 4
        more = parse_collectors(CSV + "DCGM_FI_DEV_GPU_TEMP, gauge, temperature.\n", "more.csv")
        backend.set_fields(more.specs)
        assert links_with_crc() == every_link_but_3
        assert links_with_crc() == every_link_but_3
    finally:
        backend.close()
    assert dict(backend.call_errors) == errors  # link 3 was not asked again

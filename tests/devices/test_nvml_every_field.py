"""Every served field, read through the real pynvml from the simulated libnvidia-ml.so.1.

The scenario (`tests/nvmlsim/every_field.py`) gives each field its own raw value under the
exact call, field id and scope, or GPM metric DCGM's own field table says DCGM reads it from
(read from the table, not from the exporter's specs); a field read the wrong way gets no
value or another field's, a wrong conversion another number. A spec changed to read another
call or field id fails it (`test_a_spec_reading_the_wrong_call_or_field_id_is_caught`).
Then the exporter itself is started with a collectors file naming every DCGM field by every
name: it starts, warns once per line it cannot serve, and exports every servable name.
"""

from __future__ import annotations

import csv
import re
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from exporter.fields.catalog import MetricType, Scope
from exporter.fields.dcgm_names import dcgm_names
from tests.devices.test_nvml_clib import start_exporter
from tests.nvmlsim import every_field
from tests.nvmlsim.dcgm_sources import per_link, reference_rows
from tests.nvmlsim.harness import run_child, write_scenario
from tests.support.exporter_process import ExporterProcess
from tests.support.paths import fixture_file
from tests.support.wait import wait_until

BACKEND = """
from dataclasses import replace
from exporter.devices.nvml import NvmlBackend
from exporter.fields.catalog import HANDLE, Call
from tests.nvmlsim.every_field import served_specs
specs = served_specs()
changed = {CHANGED}  # a spec name -> the part it reads instead (the mutation test)
specs = [replace(s, part=changed[s.name]) if s.name in changed else s for s in specs]
backend = NvmlBackend(pynvml, specs, clock=sim.time)
backend.start()
backend.poll()
sim.advance(2.0)  # GPM rates need two samples
readings = backend.poll()
out["values"] = readings.values[(0, -1)]
out["links"] = {f"{link}:{name}": v for (gpu, link), values in readings.links.items()
                for name, v in values.items()}
out["labels"] = readings.labels[(0, -1)]
out["errors"] = {f"{fn}:{code}": n for (fn, code), n in backend.call_errors.items()}
backend.close()
"""

NO_SAMPLE_HERE = {
    # Rendered from the XID ledger (one series per code seen), not a per-poll value.
    "DCGM_EXP_XID_ERRORS_COUNT",
    # Counted per reason over a window of polls, not a per-poll value.
    "DCGM_EXP_CLOCK_EVENTS_COUNT",
    # Totals since start: of XIDs (the ledger), of reasons turning on (edges between polls).
    "DCGM_EXP_XID_ERRORS_TOTAL",
    "DCGM_EXP_CLOCK_EVENTS_TOTAL",
    # One series per health watch, from DCGM's rules over many answers (test_health.py).
    "DCGM_EXP_GPU_HEALTH_STATUS",
    # A label on the other series.
    "DCGM_FI_DRIVER_VERSION",
    # One series per other GPU: this scenario has one GPU (test_p2p_status_of_every_pair).
    "DCGM_EXP_P2P_STATUS",
}


NO_SERIES_YET = {"DCGM_EXP_XID_ERRORS_COUNT", "DCGM_EXP_XID_ERRORS_TOTAL",
                 "DCGM_EXP_CLOCK_EVENTS_TOTAL"}
"""No series until an XID or a reason turning on (none in this scenario)."""


def read_every_field(nvmlsim_lib: Path, directory: Path, changed: str = "{}"
                     ) -> tuple[every_field.Scenario, dict[str, Any]]:
    """The scenario, and what the exporter's device layer read from it (`changed`: Python
    text of the spec parts to replace, by name)."""
    scenario = every_field.build()
    path = write_scenario(directory, {"clock": "manual", "devices": [scenario.device]})
    return scenario, run_child(nvmlsim_lib, BACKEND.replace("{CHANGED}", changed),
                               scenario_file=path)


@pytest.fixture(scope="module")
def read(nvmlsim_lib: Path, tmp_path_factory: pytest.TempPathFactory
         ) -> tuple[every_field.Scenario, dict[str, Any]]:
    return read_every_field(nvmlsim_lib, tmp_path_factory.mktemp("every"))


def test_every_served_field_has_a_value(
        read: tuple[every_field.Scenario, dict[str, Any]]) -> None:
    _, result = read
    values, links = result["values"], result["links"]
    link_names = {key.split(":", 1)[1] for key in links}
    missing = [s.name for s in every_field.served_specs()
               if s.name not in values and s.name not in link_names
               and s.name not in result["labels"] and s.name not in NO_SAMPLE_HERE]
    assert missing == [], f"no value through pynvml: {missing}\nerrors: {result['errors']}"


def test_every_value_is_the_scenarios_in_dcgm_units(
        read: tuple[every_field.Scenario, dict[str, Any]]) -> None:
    scenario, result = read
    assert len(scenario.expected) > 380
    assert sum(map(len, scenario.expected_links.values())) > 100
    assert every_field.wrong_values(scenario, result) == {}


def test_a_spec_reading_the_wrong_call_or_field_id_is_caught(
        nvmlsim_lib: Path, tmp_path: Path) -> None:
    """Copies of three specs, each changed the way a slip would change it: the application
    clock read with the memory clock's argument, a field id one NVLink error counter off, a
    call with one of its arguments swapped. Each, and nothing else, reads a wrong value."""
    changed = ('{"DCGM_FI_DEV_APP_SM_CLOCK": Call("nvmlDeviceGetApplicationsClock", '
               '(HANDLE, pynvml.NVML_CLOCK_MEM)), '
               '"DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL": '
               'pynvml.NVML_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL, '
               '"DCGM_FI_DEV_ECC_SBE_VOL_DEV": Call("nvmlDeviceGetMemoryErrorCounter", '
               '(HANDLE, pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, pynvml.NVML_VOLATILE_ECC, '
               'pynvml.NVML_MEMORY_LOCATION_DEVICE_MEMORY))}')
    scenario, result = read_every_field(nvmlsim_lib, tmp_path, changed)
    assert sorted(every_field.wrong_values(scenario, result)) == [
        "DCGM_FI_DEV_APP_SM_CLOCK", "DCGM_FI_DEV_ECC_SBE_VOL_DEV",
        "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL"]


def test_every_label_field_is_the_scenarios_string(
        read: tuple[every_field.Scenario, dict[str, Any]]) -> None:
    scenario, result = read
    assert len(scenario.expected_labels) >= 10
    assert result["labels"] == scenario.expected_labels


def test_every_link_field_on_every_link(
        read: tuple[every_field.Scenario, dict[str, Any]]) -> None:
    scenario, result = read
    # Per link by DCGM's table, whatever scope the spec says.
    rows = reference_rows()
    link_specs = [s.name for s in every_field.served_specs() if per_link(rows[s.name])]
    assert len(link_specs) > 10
    assert sorted(scenario.expected_links) == sorted(link_specs)
    for name, by_link in scenario.expected_links.items():
        got = {link: result["links"].get(f"{link}:{name}") for link in by_link}
        assert got == pytest.approx(by_link), name


# ----------------------------------------------------------------------- the exporter


def every_name_csv() -> tuple[str, int, set[str]]:
    """A collectors file with every name of the reference table: its text, the number of
    lines that cannot be served, and the names that must be exported."""
    path = fixture_file("dcgm-fields", "dcgm-fields.csv")
    with path.open(newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    table = dcgm_names()
    lines, unserved, exported = [], 0, set()
    for row in rows:
        name = row["dcgm_name"]
        field = table.field(name)
        assert field is not None, name
        spec = table.served_spec(field)
        if spec is None:
            unserved += 1
            lines.append(f"{name}, gauge, not served")
            continue
        type_ = spec.type.value
        lines.append(f"{name}, {type_}, {name} help")
        if spec.type is not MetricType.LABEL and spec.name not in NO_SERIES_YET \
                and spec.scope is not Scope.PEER:  # one GPU: no pair
            exported.add(name)
    return "\n".join(lines) + "\n", unserved, exported


def test_an_exporter_with_every_dcgm_name_serves_every_servable_one(
        nvmlsim_lib: Path, tmp_path: Path, exporter: type[ExporterProcess]) -> None:
    text, unserved, names = every_name_csv()
    collectors = tmp_path / "every.csv"
    collectors.write_text(text)
    scenario = every_field.build()
    proc = start_exporter(exporter, nvmlsim_lib,
                          write_scenario(tmp_path, {"devices": [scenario.device]}),
                          "-f", str(collectors))

    def exported() -> set[str] | None:
        families = {f.name for f in text_string_to_metric_families(proc.metrics())}
        # The parser names a counter family without its `_total`.
        seen = {n for n in names if n in families or n.removesuffix("_total") in families
                or n.removesuffix("_TOTAL") in families}
        return seen if seen == names else None

    try:
        wait_until(exported, 30.0, 0.2, what="every servable name on /metrics")
    except AssertionError:
        families = {f.name for f in text_string_to_metric_families(proc.metrics())}
        raise AssertionError(f"never exported: {sorted(names - families)}") from None
    log = proc.output()
    warnings = re.findall(r"every\.csv:(\d+): (\S+) .*is not served", log)
    assert len(warnings) == unserved
    assert len({line for line, _ in warnings}) == unserved  # once per line
    # The link fields have their link series; label fields label the series.
    body = proc.metrics()
    assert 'DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_PER_LINK_TOTAL{nvlink="17",gpu="0"' in body
    power = next(line for line in body.splitlines() if line.startswith("DCGM_FI_DEV_POWER_USAGE{"))
    for name, value in scenario.expected_labels.items():
        assert f'{name}="{value}"' in power, name
    # The fields custom collectors files add most often (docs: dcgm-fields.md) are among
    # them; the PCIe throughput pair is NOT_SUPPORTED in DCGM 4 and named as such.
    assert names >= MOST_USED
    for name in ("DCGM_FI_DEV_PCIE_TX_THROUGHPUT", "DCGM_FI_DEV_PCIE_RX_THROUGHPUT"):
        assert re.search(rf"{name} is not served: DCGM never has a value for it .*"
                         r"DCGM_FI_PROF_PCIE_[TR]X_BYTES", log), name


MOST_USED = {
    "DCGM_FI_DEV_FB_TOTAL", "DCGM_FI_PROF_SM_ACTIVE", "DCGM_FI_PROF_SM_OCCUPANCY",
    "DCGM_FI_PROF_PIPE_FP32_ACTIVE", "DCGM_FI_PROF_PIPE_FP16_ACTIVE",
    "DCGM_FI_PROF_NVLINK_TX_BYTES", "DCGM_FI_PROF_NVLINK_RX_BYTES",
    "DCGM_FI_PROF_PIPE_FP64_ACTIVE", "DCGM_FI_DEV_POWER_MGMT_LIMIT",
    "DCGM_FI_DEV_FB_USED_PERCENT", "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL",
    "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "DCGM_FI_DEV_POWER_VIOLATION",
    "DCGM_FI_DEV_THERMAL_VIOLATION", "DCGM_FI_DEV_SYNC_BOOST_VIOLATION",
    "DCGM_FI_DEV_BOARD_LIMIT_VIOLATION", "DCGM_FI_DEV_LOW_UTIL_VIOLATION",
    "DCGM_FI_DEV_RELIABILITY_VIOLATION", "DCGM_FI_DEV_PSTATE",
    "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", "DCGM_FI_DEV_COUNT",
}
"""dcgm-fields.md's "most-used beyond the default CSV" list, less the PCIe throughput pair."""


def test_mig_max_slices_with_mig_on(nvmlsim_lib: Path, tmp_path: Path) -> None:
    """DCGM_FI_DEV_MIG_MAX_SLICES walks the GPU instance profiles through pynvml: the larger
    of the MIG device count (7) and the largest profile (8 slices here), 0 with MIG off."""
    profiles = {f"nvmlDeviceGetGpuInstanceProfileInfo({p})": n
                for p, n in ((0, 1), (1, 2), (2, 3), (3, 4), (4, 8), (9, 1))}
    mig = [{"gi": 1, "profile": "1g.18gb"}]
    path = write_scenario(tmp_path, {"devices": [
        {"mig": mig, "calls": profiles}, {"calls": profiles}]})
    result = run_child(nvmlsim_lib, """
        from exporter.devices.nvml import NvmlBackend
        from exporter.fields.csv import parse_collectors
        specs = parse_collectors("DCGM_FI_DEV_MIG_MAX_SLICES, gauge, x\\n", "c.csv").specs
        backend = NvmlBackend(pynvml, specs)
        backend.start()
        readings = backend.poll()
        out["slices"] = {gpu: v["DCGM_FI_DEV_MIG_MAX_SLICES"]
                         for (gpu, inst), v in readings.values.items() if inst == -1}
        backend.close()
    """, scenario_file=path)
    assert result["slices"] == {"0": 8.0, "1": 0.0}


def test_p2p_status_of_every_pair(nvmlsim_lib: Path, tmp_path: Path,
                                  exporter: type[ExporterProcess]) -> None:
    """Both P2P fields through pynvml on three GPUs: the bitmap of peers whose NVLink P2P
    status is OK (never the GPU's own bit), and dcgm-exporter's one series per ordered pair
    with the status spelled in `link_status`."""
    def calls(statuses: dict[int, int]) -> dict[str, int]:
        return {f"nvmlDeviceGetP2PStatus({peer},2)": s for peer, s in statuses.items()}
    devices = [{"calls": calls({1: 0, 2: 0})}, {"calls": calls({0: 0, 2: 3})},
               {"calls": calls({0: 4, 1: 0})}]
    path = write_scenario(tmp_path, {"devices": devices})
    collectors = tmp_path / "p2p.csv"
    collectors.write_text("DCGM_FI_DEV_NVLINK_P2P_STATUS, gauge, bitmap\n"
                          "DCGM_EXP_P2P_STATUS, counter, P2P NvLink status\n")
    proc = start_exporter(exporter, nvmlsim_lib, path, "-f", str(collectors))

    def samples() -> dict[tuple[str, str, str, str], float] | None:
        found = {}
        families = text_string_to_metric_families(proc.metrics())
        for s in (s for f in families if f.name.startswith("DCGM_") for s in f.samples):
            found[(s.name, s.labels["gpu"], s.labels.get("peer_gpu", ""),
                   s.labels.get("link_status", ""))] = s.value
        return found if len(found) == 3 + 6 else None

    got = wait_until(samples, 30.0, 0.2, what="nine P2P series")
    bitmap = {gpu: v for (name, gpu, _, _), v in got.items()
              if name == "DCGM_FI_DEV_NVLINK_P2P_STATUS"}
    assert bitmap == {"0": 0b110, "1": 0b001, "2": 0b010}
    pairs = {(gpu, peer, status): v for (name, gpu, peer, status), v in got.items()
             if name != "DCGM_FI_DEV_NVLINK_P2P_STATUS"}
    assert pairs == {("0", "1", "OK"): 0, ("0", "2", "OK"): 0, ("1", "0", "OK"): 0,
                     ("1", "2", "TopologyNotSupported"): 3, ("2", "0", "DisabledByRegKey"): 4,
                     ("2", "1", "OK"): 0}
    # dcgm-exporter's label order: the GPU's, then link_status, then peer_gpu.
    line = next(x for x in proc.metrics().splitlines() if x.startswith("DCGM_EXP_P2P_STATUS{"))
    assert re.search(r',link_status="OK",peer_gpu="1"}', line), line


def test_a_lost_peer_does_not_take_the_gpu_asking_with_it(nvmlsim_lib: Path,
                                                           tmp_path: Path) -> None:
    """NVML answers GPU_IS_LOST for a pair whose peer fell off the bus: the asking GPU stays
    in the readings (no bitmap that poll, no pair series for the lost peer)."""
    statuses = {f"nvmlDeviceGetP2PStatus({peer},2)": 0 for peer in range(3)}
    path = write_scenario(tmp_path, {"devices": [{"calls": statuses}] * 3})
    result = run_child(nvmlsim_lib, """
        from exporter.devices.nvml import NvmlBackend
        from exporter.fields.csv import parse_collectors
        specs = parse_collectors("DCGM_FI_DEV_NVLINK_P2P_STATUS, gauge, x\\n"
                                 "DCGM_EXP_P2P_STATUS, gauge, x\\n"
                                 "DCGM_FI_DEV_GPU_TEMP, gauge, x\\n", "c.csv").specs
        backend = NvmlBackend(pynvml, specs)
        backend.start()
        backend.poll()
        sim.set_gpu_lost(2)
        readings = backend.poll()
        out["gpus"] = sorted({gpu for (gpu, inst) in readings.values})
        out["bitmaps"] = {gpu: v.get("DCGM_FI_DEV_NVLINK_P2P_STATUS")
                          for (gpu, inst), v in readings.values.items()}
        out["pairs"] = sorted(f"{gpu}>{peer}" for gpu, peer in readings.peers)
        backend.close()
    """, scenario_file=path)
    assert result["gpus"] == [0, 1]
    assert result["pairs"] == ["0>1", "1>0"]
    assert result["bitmaps"] == {"0": 0b010, "1": 0b001}


def test_after_a_loss_and_a_walk_the_other_gpus_keep_their_p2p(nvmlsim_lib: Path,
                                                                tmp_path: Path) -> None:
    """The walk after a GPU fell off the bus plans P2P over the GPUs it found: the lost one
    is never asked, and the others stay in the readings with their pairs."""
    statuses = {f"nvmlDeviceGetP2PStatus({peer},2)": 0 for peer in range(3)}
    path = write_scenario(tmp_path, {"clock": "manual", "devices": [{"calls": statuses}] * 3})
    result = run_child(nvmlsim_lib, """
        from exporter.devices.nvml import NvmlBackend
        from exporter.fields.csv import parse_collectors
        specs = parse_collectors("DCGM_FI_DEV_NVLINK_P2P_STATUS, gauge, x\\n"
                                 "DCGM_EXP_P2P_STATUS, gauge, x\\n", "c.csv").specs
        backend = NvmlBackend(pynvml, specs, clock=sim.time)
        backend.start()
        backend.poll()
        sim.set_gpu_lost(2)
        polls = []
        for _ in range(6):  # the loss, then walks at growing pauses
            sim.advance(30.0)
            readings = backend.poll()
            polls.append({"gpus": sorted({gpu for gpu, _ in readings.values}),
                          "bitmaps": {gpu: v.get("DCGM_FI_DEV_NVLINK_P2P_STATUS")
                                      for (gpu, _), v in readings.values.items()},
                          "pairs": sorted(f"{g}>{p}" for g, p in readings.peers)})
        out["polls"] = polls
        out["lost_total"] = backend.gpus_lost_total
        backend.close()
    """, scenario_file=path)
    for poll in result["polls"]:
        assert poll["gpus"] == [0, 1], poll
        assert poll["bitmaps"] == {"0": 0b010, "1": 0b001}, poll
        assert poll["pairs"] == ["0>1", "1>0"], poll
    assert result["lost_total"] == 1


def test_the_cluster_uuid_label_appears_once_registration_completes(
        nvmlsim_lib: Path, tmp_path: Path) -> None:
    device = {"calls": {"nvmlDeviceGetGpuFabricInfoV().state": 2},  # in progress
              "strings": {"nvmlDeviceGetGpuFabricInfoV().clusterUuid":
                          "5c0ffee0-d15e-a5e0-b0ba-cafe12345678"}}
    path = write_scenario(tmp_path, {"clock": "manual", "devices": [device]})
    result = run_child(nvmlsim_lib, """
        from exporter.devices.nvml import NvmlBackend
        from exporter.fields.csv import parse_collectors
        specs = parse_collectors("DCGM_FI_DEV_GPU_TEMP, gauge, x\\n"
                                 "DCGM_FI_DEV_FABRIC_CLUSTER_UUID, label, x\\n", "c.csv").specs
        backend = NvmlBackend(pynvml, specs, clock=sim.time)
        backend.start()
        name = "DCGM_FI_DEV_FABRIC_CLUSTER_UUID"
        out["before"] = backend.poll().labels.get((0, -1), {}).get(name)
        sim.set_value(0, "call:nvmlDeviceGetGpuFabricInfoV().state", 3)  # completed
        sim.advance(61.0)  # past the periodic walk
        out["after"] = backend.poll().labels.get((0, -1), {}).get(name)
        backend.close()
    """, scenario_file=path)
    assert result["before"] is None  # zeros until then: no label
    assert result["after"] == "5c0ffee0-d15e-a5e0-b0ba-cafe12345678"

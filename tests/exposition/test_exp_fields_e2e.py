"""dcgm-exporter 4.8.4's own fields, end to end: the exporter over the simulated node with the
shipped default-counters.csv (its DCGM_EXP_* and new rows switched on) and scripted faults,
its body checked by promtool, scraped by a real Prometheus that stores the totals as
counters and the health watches as gauges."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.devices.test_shipped_csvs import SHIPPED, uncommented
from tests.support.exporter_process import ExporterProcess, http_get
from tests.support.prometheus import PrometheusProcess
from tests.support.promtool import promtool_problems
from tests.support.wait import wait_until

FAULTS = ("xid,code=79,gpu=1,at=1s", "ecc,gpu=0,at=1s,dbe=1", "thermal,gpu=2,at=3s",
          "xid,code=43,gpu=3,at=1s", "xid,code=43,gpu=3,at=2s")


def test_prometheus_scrapes_the_exporter_fields_with_their_types(
        exporter: type[ExporterProcess], tmp_path: Path) -> None:
    csv = tmp_path / "default-counters.csv"
    csv.write_text(uncommented(SHIPPED / "default-counters.csv"))
    faults = [arg for f in FAULTS for arg in ("--sim.fault", f)]
    proc = exporter(["--backend", "sim", "--sim.profile", "h100-8", "-f", str(csv),
                     "-c", "500ms", *faults])
    proc.wait_ready()

    def settled() -> str | None:
        text = proc.metrics()
        done = ('xid="79"} 1' in text and 'clock_event="hw_thermal"} 1' in text
                and 'health_watch="THERMAL"} 10' in text)
        return text if done else None

    text = wait_until(settled, 40, 0.25, what="the faults in the exposition")
    assert promtool_problems(text) == []
    for name, kind in (("DCGM_EXP_XID_ERRORS_TOTAL", "counter"),
                       ("DCGM_EXP_CLOCK_EVENTS_TOTAL", "counter"),
                       ("DCGM_EXP_XID_ERRORS_COUNT", "gauge"),
                       ("DCGM_EXP_CLOCK_EVENTS_COUNT", "gauge"),
                       ("DCGM_EXP_GPU_HEALTH_STATUS", "gauge"),
                       ("DCGM_EXP_P2P_STATUS", "gauge"),
                       ("DCGM_FI_DEV_FABRIC_HEALTH_MASK", "gauge"),
                       ("DCGM_FI_DEV_ENFORCED_POWER_LIMIT", "gauge"),
                       ("DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", "gauge")):
        assert f"# TYPE {name} {kind}\n" in text, name

    prometheus = PrometheusProcess(tmp_path / "prometheus", {
        "global": {"scrape_interval": "1s", "scrape_timeout": "1s"},
        "scrape_configs": [{"job_name": "node", "static_configs": [
            {"targets": [f"127.0.0.1:{proc.port}"]}]}],
    }).wait_ready()
    try:
        def scraped() -> list[dict[str, Any]] | None:
            result = prometheus.query("count_over_time(up[1m])")
            return result if result and float(result[0]["value"][1]) >= 3 else None

        wait_until(scraped, 60, 0.5, what="three scrapes of the node")
        assert [r["value"][1] for r in prometheus.query("up")] == ["1"]

        def value(expr: str) -> list[str]:
            return [r["value"][1] for r in prometheus.query(expr)]

        assert value('DCGM_EXP_XID_ERRORS_TOTAL{gpu="1",xid="79"}') == ["1"]
        assert value('DCGM_EXP_XID_ERRORS_TOTAL{gpu="3",xid="43"}') == ["2"]
        assert value('count(DCGM_EXP_XID_ERRORS_TOTAL{window_size_in_ms!=""})') == []
        assert value('DCGM_EXP_CLOCK_EVENTS_TOTAL{gpu="2",clock_event="hw_thermal"}') == ["1"]
        assert value('DCGM_EXP_GPU_HEALTH_STATUS{gpu="1",health_watch="ALL",'
                     'health_error_code="DCGM_FR_FALLEN_OFF_BUS"}') == ["20"]
        assert value('DCGM_EXP_GPU_HEALTH_STATUS{gpu="0",health_watch="MEM",'
                     'health_error_severity="ISOLATE",'
                     'health_error_category="HARDWARE_MEMORY"}') == ["20"]
        assert value("count(DCGM_EXP_GPU_HEALTH_STATUS)") == [str(8 * 11)]
        assert value('count(DCGM_EXP_GPU_HEALTH_STATUS == 0)') == [str(8 * 11 - 4)]
        # The 0 series of the windowed count: GPUs without an XID, no `xid` label.
        assert value('count(DCGM_EXP_XID_ERRORS_COUNT{xid=""} == 0)') == ["6"]
        _, _, body = http_get(f"{prometheus.url}/api/v1/metadata")
        metadata = json.loads(body)["data"]
        for name, kind in (("DCGM_EXP_XID_ERRORS_TOTAL", "counter"),
                           ("DCGM_EXP_CLOCK_EVENTS_TOTAL", "counter"),
                           ("DCGM_EXP_GPU_HEALTH_STATUS", "gauge")):
            assert metadata[name][0]["type"] == kind, name
    finally:
        prometheus.stop()

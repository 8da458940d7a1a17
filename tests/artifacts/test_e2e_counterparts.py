"""End to end before Hopper with the DCGM_FI_PROF_* counterparts on (the default): the
simulated `l4-1` and `a100-timesliced` nodes scraped by a real Prometheus. The shared GPM
measures read the counterpart, not the NVML field they fall back on, and the node dashboard's
PCIe panel, which needed Hopper before, answers. `test_e2e_prehopper` checks the fallbacks
with the counterparts off."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from functools import partial

import pytest

from exporter.promql.measures import DRAM, GR_ENGINE
from tests.artifacts.committed import dashboard_panels
from tests.artifacts.test_dashboards import substitute
from tests.support.exporter_process import ExporterProcess
from tests.support.paths import ROOT
from tests.support.prometheus import PrometheusProcess
from tests.support.wait import wait_until

pytestmark = pytest.mark.e2e

VARIABLES = {"job": "gpu-exporter", "__rate_interval": "15s", "__range": "1h",
             "__interval": "1s", "__interval_ms": "1000"}


@pytest.fixture(scope="module", params=["l4-1", "a100-timesliced"])
def prometheus(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
               ) -> Iterator[PrometheusProcess]:
    with contextlib.ExitStack() as cleanup:
        exporter = ExporterProcess(["--backend", "sim", "--sim.profile", request.param,
                                    "-c", "1s"])
        cleanup.callback(exporter.close)
        exporter.wait_ready(60.0)
        config = {"global": {"scrape_interval": "1s", "scrape_timeout": "1s"},
                  "scrape_configs": [{"job_name": "gpu-exporter", "static_configs": [
                      {"targets": [f"127.0.0.1:{exporter.port}"]}]}]}
        server = PrometheusProcess(tmp_path_factory.mktemp(f"counterparts-{request.param}"),
                                   config).wait_ready()
        cleanup.callback(server.stop)
        wait_until(partial(_has, server, "DCGM_FI_PROF_PCIE_TX_BYTES"), 60.0, 0.5,
                   what="counterparts scraped")
        wait_until(partial(_has, server, "min(count_over_time(up[15s])) >= 12"), 60.0, 0.5,
                   what="15s of samples")
        yield server


def _has(server: PrometheusProcess, expr: str) -> bool:
    return bool(server.query(expr))


def _by_uuid(series: list[dict[str, object]]) -> dict[str, float]:
    found = {}
    for s in series:
        metric, value = s["metric"], s["value"]
        assert isinstance(metric, dict)
        assert isinstance(value, list)
        found[str(metric["UUID"])] = float(value[1])
    return found


def test_measures_read_the_counterparts(prometheus: PrometheusProcess) -> None:
    for measure, field in ((GR_ENGINE, "DCGM_FI_PROF_GR_ENGINE_ACTIVE"),
                           (DRAM, "DCGM_FI_PROF_DRAM_ACTIVE")):
        query = measure.promql()
        assert query is not None
        # One instant: the measure is the PROF series, GPU for GPU, not NVML's fallback.
        at = time.time() - 1.0
        got = _by_uuid(prometheus.query(query, at=at))
        want = _by_uuid(prometheus.query(field, at=at))
        assert want, field
        assert got == want, (field, query)


def test_pcie_and_activity_panels_answer(prometheus: PrometheusProcess) -> None:
    panels = {p.title: p for p in dashboard_panels(ROOT / "dashboards" / "gpu-node-detail.json")}
    for title in ("PCIe throughput", "Graphics engine / SM", "Memory interface"):
        answered = [t.expr for t in panels[title].targets
                    if prometheus.query(substitute(t.expr, VARIABLES))]
        assert answered, title
    assert prometheus.query("DCGM_FI_PROF_SM_ACTIVE") == []

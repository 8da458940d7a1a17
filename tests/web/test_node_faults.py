"""Held faults as a scraper and a person see them: the exporter run on the simulated node,
`gpu_exporter_gpu_fault` on /metrics and each GPU's faults in /api/node, from the fault to
its clearing event."""

from __future__ import annotations

import json
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from exporter.fields.faults import ClearedBy
from tests.support.exporter_process import ExporterProcess
from tests.support.wait import wait_until

FAULTS = [
    "xid,code=95,gpu=0,at=2s", "reset,gpu=0,at=8s",  # RESET_GPU, then a reset
    "xid,code=13,gpu=1,at=2s", "exit,gpu=1,at=8s",  # RESTART_APP, then its holders exit
    "xid,code=43,gpu=2,at=2s",  # IGNORE
    "ecc,gpu=3,at=2s,dbe=1",  # a double-bit error, never reset here
]
ARGS = ["--backend", "sim", "--sim.profile", "a100-timesliced", "-c", "500ms",
        "--sim.boot-id", "boot-a", *(a for f in FAULTS for a in ("--sim.fault", f))]
DBE = "DCGM_FR_VOLATILE_DBE_DETECTED"


def held(proc: ExporterProcess) -> dict[tuple[str, str], dict[str, str]]:
    """(gpu, code) -> labels of each gpu_exporter_gpu_fault series now."""
    out = {}
    for family in text_string_to_metric_families(proc.metrics()):
        if family.name == "gpu_exporter_gpu_fault":
            for sample in family.samples:
                assert sample.value == 1.0
                out[(sample.labels["gpu"], sample.labels["code"])] = sample.labels
    return out


def held_when(proc: ExporterProcess, wanted: set[tuple[str, str]], exact: bool
              ) -> dict[tuple[str, str], dict[str, str]] | None:
    """The held faults once they include `wanted` (or are exactly it); None until then."""
    now = held(proc)
    return now if (set(now) == wanted if exact else set(now) >= wanted) else None


def api_faults(proc: ExporterProcess) -> dict[int, list[dict[str, Any]]]:
    status, _, body = proc.get("/api/node")
    assert status == 200
    return {gpu["gpu"]: gpu["faults"] for gpu in json.loads(body)["node"]["gpus"]}


def test_faults_show_until_their_clearing_event(exporter: type[ExporterProcess]) -> None:
    proc = exporter(ARGS)
    proc.wait_ready()
    expected = {("0", "95"), ("1", "13"), ("3", DBE)}
    faults = wait_until(lambda: held_when(proc, expected, exact=False), 30.0,
                        what="XID 95, XID 13 and the double-bit error held")
    assert faults[("0", "95")] == {
        "gpu": "0", "UUID": faults[("0", "95")]["UUID"], "source": "xid", "code": "95",
        "name": "ROBUST_CHANNEL_UNCONTAINED_ERROR", "action": "RESET_GPU", "fatal": "true",
        "cleared_by": "gpu-reset"}
    assert faults[("1", "13")]["action"] == "RESTART_APP"
    assert faults[("1", "13")]["cleared_by"] == ClearedBy.HOLDER_EXIT.value
    assert faults[("3", DBE)]["source"] == "health"
    assert faults[("3", DBE)]["cleared_by"] == "gpu-reset"
    assert ("2", "43") not in faults, "an IGNORE XID raises nothing"
    page = api_faults(proc)
    assert [(f["code"], f["action"], f["cleared_by"]) for f in page[0]] == \
        [("95", "RESET_GPU", "gpu-reset")]
    assert page[2] == []
    _, _, html = proc.get("/")
    card = html.decode().split('id="gpu-0"')[1].split("</article>")[0]
    assert '<ul class="faults"><li data-source="xid" data-code="95" data-action="RESET_GPU">' \
        in card
    assert "held until the GPU is reset" in card
    # GPU 0 is reset at 8 s and GPU 1's processes exit then: both clear; the double-bit error
    # on GPU 3, whose GPU nobody resets, stays; XID 43 never shows.
    cleared = wait_until(lambda: held_when(proc, {("3", DBE)}, exact=True), 40.0,
                         what="XID 95 and XID 13 cleared")
    assert set(cleared) == {("3", DBE)}
    page = api_faults(proc)
    assert page[0] == []
    assert page[1] == []
    assert [f["code"] for f in page[3]] == [DBE]

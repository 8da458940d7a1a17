"""The GPM fallback (`exporter.promql.measures`): every GPM field of the catalog has its entry,
placeholders resolve to the enabled sources only, and promtool evaluates the fallback over
hand-written series of a Hopper GPU (GPM and NVML both), a GPU before Hopper (NVML only) and
a Hopper GPU in MIG mode (GPM per instance, the NVLink counter on the parent): every GPU and
instance is read once."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from exporter.artifacts.dashboards.render import render
from exporter.artifacts.dashboards.spec import Dashboard, Kind, Panel, Query, Section
from exporter.artifacts.fieldset import FieldSet
from exporter.fields.catalog import BY_NAME, CATALOG, Reader
from exporter.fields.gpm_fallbacks import GPM_ONLY, MEASURES
from exporter.promql import measures as gpm
from exporter.promql.measures import DRAM, GR_ENGINE, NVLINK_BYTES
from tests.artifacts.conftest import promtool
from tests.support.paths import ROOT

GR, UTIL = "DCGM_FI_PROF_GR_ENGINE_ACTIVE", "DCGM_FI_DEV_GPU_UTIL"


def test_every_gpm_field_is_in_one_measure() -> None:
    gpm_fields = [s.name for s in CATALOG if s.reader is Reader.GPM]
    listed = [f for m in MEASURES for f in m.gpm]
    assert sorted(listed) == sorted(gpm_fields)
    assert len({m.key for m in MEASURES}) == len(MEASURES)
    for measure in MEASURES:
        if measure.nvml is None:
            assert measure.without, measure.key
            continue
        counterpart = BY_NAME[measure.nvml.field]
        assert counterpart.reader is not Reader.GPM, measure.key
        assert counterpart.unit in ("%", "KiB"), measure.key
        assert measure.nvml.counter == (counterpart.type.value == "counter"), measure.key
    assert {f for m in MEASURES if m.nvml is None for f in m.gpm} == GPM_ONLY


def test_a_placeholder_resolves_to_the_enabled_sources() -> None:
    text = "avg(" + GR_ENGINE.select('{a="1"}', '{b="2"}') + ")"
    assert gpm.unresolved(text)
    assert gpm.resolve(text) == (
        f'avg((({GR}{{a="1"}} or {GR}{{b="2"}}) or on (UUID) '
        f'({UTIL}{{a="1"}} / 100 or {UTIL}{{b="2"}} / 100)))')
    assert gpm.resolve(text, lambda f: f == GR) == f'avg(({GR}{{a="1"}} or {GR}{{b="2"}}))'
    assert gpm.resolve(text, lambda f: f == UTIL) == (
        f'avg((({UTIL}{{a="1"}} / 100 or {UTIL}{{b="2"}} / 100)))')
    assert gpm.resolve(text, lambda _: False) is None
    # A field set resolves them, and drops a query whose other fields it lacks.
    fields = FieldSet("test", frozenset({UTIL, "DCGM_FI_DEV_FB_USED"}))
    assert fields.resolve(f"{GR_ENGINE.select()} * DCGM_FI_DEV_FB_USED") == (
        f"({UTIL} / 100) * DCGM_FI_DEV_FB_USED")
    assert fields.resolve(f"{GR_ENGINE.select()} * DCGM_FI_DEV_FB_FREE") is None
    assert [m.key for m in gpm.measures_in(text + DRAM.select())] == ["gr-engine", "dram"]


def test_counters_need_a_window_and_selectors_stay_plain() -> None:
    with pytest.raises(ValueError, match="rate window"):
        NVLINK_BYTES.select("{}")
    assert gpm.resolve(NVLINK_BYTES.select(window="5m")) == (
        "((DCGM_FI_PROF_NVLINK_TX_BYTES + DCGM_FI_PROF_NVLINK_RX_BYTES) or on (UUID) "
        "rate(DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL[5m]) * 1024)")
    with pytest.raises(ValueError, match="may not hold"):
        GR_ENGINE.select('{a="\u27e7"}')


def test_an_unresolved_placeholder_never_reaches_a_dashboard() -> None:
    panel = Panel("p", Kind.TIMESERIES, (Query(GR_ENGINE.select()),), "percentunit", "d")
    spec = Dashboard("u", "f.json", "t", "d", (), (), (Section("s", (panel,)),))
    with pytest.raises(ValueError, match="not resolved"):
        render(spec)
    assert render(spec.restricted_to(FieldSet("f", frozenset({UTIL}))))


def _committed_texts() -> dict[str, str]:
    paths = [*sorted((ROOT / "dashboards").glob("*.json")),
             *sorted((ROOT / "alerts").glob("*.y*ml")),
             *sorted((ROOT / "deploy" / "keda").glob("*.yaml"))]
    return {str(p.relative_to(ROOT)): p.read_text() for p in paths}


def test_committed_artifacts_read_the_fallback_with_each_gpm_measure() -> None:
    """Wherever an artifact reads a GPM field that has an NVML counterpart, it reads the
    counterpart too, except on MIG instances, which have none (NVML reports no utilisation
    under MIG)."""
    fallbacks = {f: m.nvml.field for m in MEASURES if m.nvml is not None for f in m.gpm}
    checked = 0
    for name, text in _committed_texts().items():
        assert not gpm.unresolved(text), name
        if name.startswith("dashboards/"):
            model = json.loads(text)
            units = [" ".join(t["expr"] for t in p.get("targets", []))
                     for p in model["panels"] if p["type"] != "row"]
        else:
            units = [e for e in re.findall(r"(?:expr|query): (.*)", text)]
        for unit in units:
            if 'GPU_I_ID!=""' in unit:
                continue
            for field, counterpart in fallbacks.items():
                if field in unit:
                    assert counterpart in unit, (name, unit[:200])
                    checked += 1
    assert checked > 15


def test_panels_over_gpm_alone_say_they_need_hopper() -> None:
    for path in sorted((ROOT / "dashboards").glob("*.json")):
        for panel in json.loads(path.read_text())["panels"]:
            exprs = [t["expr"] for t in panel.get("targets", [])]
            fields = {f for e in exprs for f in re.findall(r"\bDCGM_F[IE]_[A-Z0-9_]+", e)}
            if fields and fields <= GPM_ONLY:
                note = panel["fieldConfig"]["defaults"].get("noValue", "")
                assert "Hopper" in note, (path.name, panel["title"])


# -- promtool ------------------------------------------------------------------------------

HOPPER = 'UUID="GPU-h", gpu="0", Hostname="n"'
BEFORE = 'UUID="GPU-a", gpu="1", Hostname="n"'
MIG_1, MIG_2 = (f'UUID="GPU-m", gpu="2", Hostname="n", GPU_I_ID="{i}", GPU_I_PROFILE="3g"'
                for i in (1, 2))
MIG_PARENT = 'UUID="GPU-m", gpu="2", Hostname="n"'
MIG_BEFORE = 'UUID="GPU-x", gpu="3", Hostname="n", GPU_I_ID="1", GPU_I_PROFILE="3g"'


def _inputs() -> list[dict[str, str]]:
    series = [
        # Hopper: GPM and NVML both, disagreeing so that a double count shows.
        (HOPPER, GR, "0.25x20"), (HOPPER, UTIL, "90x20"),
        (HOPPER, "DCGM_FI_PROF_DRAM_ACTIVE", "0.5x20"),
        (HOPPER, "DCGM_FI_DEV_MEM_COPY_UTIL", "10x20"),
        (HOPPER, "DCGM_FI_PROF_NVLINK_TX_BYTES", "3000x20"),
        (HOPPER, "DCGM_FI_PROF_NVLINK_RX_BYTES", "1000x20"),
        (HOPPER, "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", "0+6000x20"),
        # Before Hopper: NVML only. 60 KiB a minute is 1024 bytes a second.
        (BEFORE, UTIL, "50x20"), (BEFORE, "DCGM_FI_DEV_MEM_COPY_UTIL", "25x20"),
        (BEFORE, "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", "0+60x20"),
        # Hopper in MIG mode: GPM per instance, the NVLink counter on the parent GPU.
        (MIG_1, GR, "0.5x20"), (MIG_2, GR, "0.75x20"),
        (MIG_1, "DCGM_FI_PROF_NVLINK_TX_BYTES", "100x20"),
        (MIG_1, "DCGM_FI_PROF_NVLINK_RX_BYTES", "28x20"),
        (MIG_PARENT, "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", "0+600x20"),
        # MIG before Hopper: framebuffer, no activity anywhere.
        (MIG_BEFORE, "DCGM_FI_DEV_FB_USED", "100x20"),
    ]
    return [{"series": f"{name}{{{labels}}}", "values": values}
            for labels, name, values in series]


def _case(expr: str, expected: dict[str, float]) -> dict[str, Any]:
    """`expr` summed per GPU (UUID) must equal `expected` to 1e-9."""
    wanted = " or ".join(f'label_replace(vector({v!r}), "UUID", "{u}", "", "")'
                         for u, v in expected.items())
    check = f"abs(sum by (UUID) ({expr}) - on (UUID) ({wanted})) < bool 1e-9"
    return {"expr": check, "eval_time": "10m",
            "exp_samples": [{"labels": f'{{UUID="{u}"}}', "value": 1} for u in expected]}


def test_promtool_reads_every_gpu_once(tmp_path: Path) -> None:
    gr = GR_ENGINE.promql()
    dram = DRAM.promql()
    nvlink = NVLINK_BYTES.promql(window="5m")
    assert gr is not None
    assert dram is not None
    assert nvlink is not None
    cases = [
        _case(gr, {"GPU-h": 0.25, "GPU-a": 0.5, "GPU-m": 1.25}),
        _case(f"count by (UUID, GPU_I_ID) ({gr})", {"GPU-h": 1, "GPU-a": 1, "GPU-m": 2}),
        _case(dram, {"GPU-h": 0.5, "GPU-a": 0.25}),
        # The MIG GPU: its instances' GPM bytes, not also the parent's counter.
        _case(nvlink, {"GPU-h": 4000, "GPU-a": 1024, "GPU-m": 128}),
        # A KEDA-style average: (0.25 + 0.5 + 0.5 + 0.75) / 4.
        {"expr": f"100 * avg({gr})", "eval_time": "10m",
         "exp_samples": [{"labels": "{}", "value": 50}]},
        # Only one source collected: the other side is simply not read.
        _case(GR_ENGINE.promql(enabled=lambda f: f == UTIL) or "",
              {"GPU-h": 0.9, "GPU-a": 0.5}),
        _case(GR_ENGINE.promql(enabled=lambda f: f == GR) or "",
              {"GPU-h": 0.25, "GPU-m": 1.25}),
    ]
    test = {"rule_files": [], "evaluation_interval": "1m",
            "tests": [{"interval": "1m", "input_series": _inputs(),
                       "promql_expr_test": cases}]}
    (tmp_path / "test.yml").write_text(yaml.safe_dump(test, sort_keys=False))
    result = subprocess.run([promtool(), "test", "rules", "test.yml"], cwd=tmp_path,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr

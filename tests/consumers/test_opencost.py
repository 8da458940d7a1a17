"""OpenCost's own GPU queries (tests/fixtures/consumers/opencost/queries.yaml), each run
unchanged against a real Prometheus scraping the exporter on every simulated generation.

The YAML is first proven against OpenCost's code: each entry's format string is a Go string
literal of the source file it names, and its query is that format filled in. Then every query
must answer on every node, with the labels OpenCost's decoders read and the units they assume,
except where the board physically lacks what is asked (`EXCUSED`, whose queries must then
answer nothing, so that serving them later shows up here).
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from tests.consumers.consumer_queries import (
    OpenCostQuery,
    format_pattern,
    go_source,
    grouping_labels,
    opencost_queries,
)
from tests.consumers.nodes import BRAKE_FOR_S, GENERATIONS, XID, Generation, Node
from tests.support.wait import wait_until

pytestmark = pytest.mark.e2e

QUERIES = opencost_queries()
NOT_BEFORE_HOPPER = "NVML measures it only through GPM, which needs Hopper or newer"
NO_NVLINK = "the board has no NVLink (PCIe card)"


def excuse(generation: Generation, query: OpenCostQuery) -> str | None:
    """Return why `generation` may leave `query` unanswered, or None where it must answer."""
    if not generation.hopper and re.search(r"DCGM_FI_PROF_(SM_ACTIVE|SM_OCCUPANCY|PIPE_)",
                                           query.query):
        return NOT_BEFORE_HOPPER
    if not generation.nvlink and "DCGM_FI_PROF_NVLINK_" in query.query:
        return NO_NVLINK
    return None


SERVED_LABELS = frozenset({"container", "pod", "namespace", "device", "modelName", "UUID",
                           "pod_uid"})
"""Labels the exporter serves, as dcgm-exporter does, that OpenCost's queries group by: each
must be set on every answer that groups by it. `uid` and `cluster_id` are served by neither
(a relabel adds cluster_id; the uid lineage reads pod_uid), and `Hostname` is dcgm-exporter
4.8.2's spelling of the host label (`hostname` since 4.8.3): see docs/compatibility.md."""
RATIO_QUERIES = re.compile(r"Ratio|DRAMActive|SMActive|SMOccupancy|Usage(Avg|Max)")
"""Queries whose answers are fractions 0..1 (GPU usage is GR_ENGINE_ACTIVE, a ratio)."""
MIG_SCOPED = re.compile(r"DCGM_FI_DEV_FB_USED|DCGM_FI_PROF_(GR_ENGINE|DRAM)_ACTIVE")
"""Fields served per MIG GPU instance: answers grouped by GPU_I_PROFILE must name the
instances."""
UNITS: dict[str, tuple[float, float, str]] = {
    "QueryGPUDevicePowerAvg": (1.0, 1000.0, "watts"),
    "QueryGPUDeviceTempAvg": (1.0, 120.0, "degrees Celsius"),
    "QueryGPUDeviceMemoryUsedAvg": (1.0, 150_000.0, "MiB"),
    "QueryGPUDeviceMemoryUsedMax": (1.0, 150_000.0, "MiB"),
}
"""Plausible ranges of device gauges, in the unit OpenCost assumes (a value in mW, bytes or
kelvin would fall outside)."""


def values(series: dict[str, Any]) -> list[float]:
    """Return a result series' values (one for a vector, several for a subquery's matrix)."""
    if "values" in series:
        return [float(v) for _, v in series["values"]]
    return [float(series["value"][1])]


@pytest.fixture(scope="module")
def answers(nodes: dict[str, Node]) -> dict[tuple[str, str], list[dict[str, Any]]]:
    """Every query's result on every node, by (generation id, query name)."""
    return {(g, q.name): node.query(q.query) for g, node in nodes.items() for q in QUERIES}


def test_queries_yaml_has_every_query_of_the_sources() -> None:
    assert len(QUERIES) == 33
    assert len({q.name for q in QUERIES}) == len(QUERIES)


@pytest.mark.parametrize("query", QUERIES, ids=lambda q: q.name)
def test_format_is_a_go_literal_of_its_source_and_query_fills_it(query: OpenCostQuery) -> None:
    source = go_source(query.source).read_text()
    assert f"`{query.format}`" in source, f"{query.name}: format not in {query.source}"
    branch = format_pattern(query.format)
    # Several formats are applied once per metric or reason, the branches joined by " or ".
    assert re.fullmatch(f"{branch}(?: or {branch})*", query.query), query.name


@pytest.mark.parametrize("generation", GENERATIONS, ids=lambda g: g.id)
def test_every_query_answers_unless_excused(
        generation: Generation, answers: dict[tuple[str, str], list[dict[str, Any]]]) -> None:
    missing = [q.name for q in QUERIES
               if excuse(generation, q) is None and not answers[generation.id, q.name]]
    served_though_excused = [f"{q.name} ({excuse(generation, q)})" for q in QUERIES
                             if excuse(generation, q) and answers[generation.id, q.name]]
    answered = len(QUERIES) - len(missing) - sum(excuse(generation, q) is not None
                                                 for q in QUERIES)
    print(f"OpenCost on {generation.profile}: {answered}/{len(QUERIES)} answer")
    assert missing == [], f"{generation.id}: queries without an answer: {missing}"
    assert served_though_excused == [], (
        f"{generation.id}: excused queries now answer; drop the excuse: {served_though_excused}")


@pytest.mark.parametrize("generation", GENERATIONS, ids=lambda g: g.id)
def test_answers_carry_the_labels_the_decoders_read(
        generation: Generation, answers: dict[tuple[str, str], list[dict[str, Any]]]) -> None:
    unlabelled = []
    for q in QUERIES:
        wanted = grouping_labels(q.query) & SERVED_LABELS
        for series in answers[generation.id, q.name]:
            absent = sorted(label for label in wanted if not series["metric"].get(label))
            if absent:
                unlabelled.append(f"{q.name}: {absent} missing in {series['metric']}")
            # OpenCost's applyGPUInfo files any device whose name contains "nvidia" as one.
            if "device" in wanted and "nvidia" not in series["metric"].get("device", ""):
                unlabelled.append(f"{q.name}: device not an nvidia one in {series['metric']}")
    assert unlabelled == [], f"{generation.id}:\n" + "\n".join(unlabelled[:10])


def test_mig_instances_are_named_where_a_field_is_per_instance(
        answers: dict[tuple[str, str], list[dict[str, Any]]]) -> None:
    for q in QUERIES:
        if "GPU_I_PROFILE" in grouping_labels(q.query) and MIG_SCOPED.search(q.query):
            profiles = {s["metric"].get("GPU_I_PROFILE", "") for s in answers["mig", q.name]}
            ids = {s["metric"].get("GPU_I_ID", "") for s in answers["mig", q.name]}
            assert {"2g.35gb", "1g.18gb"} <= profiles, (q.name, profiles)
            assert len(ids - {""}) >= 5, (q.name, ids)


@pytest.mark.parametrize("generation", GENERATIONS, ids=lambda g: g.id)
def test_ratios_and_units_are_what_opencost_assumes(
        generation: Generation, answers: dict[tuple[str, str], list[dict[str, Any]]]) -> None:
    wrong = []
    for q in QUERIES:
        for series in answers[generation.id, q.name]:
            got = values(series)
            if RATIO_QUERIES.search(q.name) and "Violation" not in q.name:
                wrong += [f"{q.name}: {v} not in 0..1" for v in got if not 0.0 <= v <= 1.0]
            if q.name in UNITS:
                low, high, unit = UNITS[q.name]
                wrong += [f"{q.name}: {v} not in {unit}" for v in got if not low <= v <= high]
            wrong += [f"{q.name}: {v} negative" for v in got if v < 0]
    assert wrong == [], f"{generation.id}:\n" + "\n".join(wrong[:10])


@pytest.mark.parametrize("generation", GENERATIONS, ids=lambda g: g.id)
def test_fb_used_and_fb_free_pair_one_to_one(generation: Generation, nodes: dict[str, Node],
                                             answers: dict[tuple[str, str], list[dict[str, Any]]]
                                             ) -> None:
    """OpenCost divides FB_USED by FB_USED + FB_FREE series by series: both must have the same
    label sets, so that every FB_USED series of a container gets its ratio."""
    node = nodes[generation.id]

    def label_sets(name: str) -> set[tuple[tuple[str, str], ...]]:
        return {tuple(sorted((k, v) for k, v in s["metric"].items() if k != "__name__"))
                for s in node.query(f'{name}{{container!=""}}')}

    used, free = label_sets("DCGM_FI_DEV_FB_USED"), label_sets("DCGM_FI_DEV_FB_FREE")
    assert used, generation.id
    assert used == free, (generation.id, used ^ free)
    ratio = answers[generation.id, "QueryGPUMemoryUsedRatioAvg"]
    assert len(ratio) == len(used), (generation.id, len(ratio), len(used))


def extrapolated_increase(samples: list[tuple[float, float]], start: float, end: float) -> float:
    """Return what Prometheus's increase() over [start, end] makes of a counter's samples
    (promql/functions.go extrapolatedRate, as of Prometheus 2.x), written out here so that
    the expected figure does not come from the engine under test."""
    (t0, v0), (t1, v1) = samples[0], samples[-1]
    result = v1 - v0
    sampled = t1 - t0
    average = sampled / (len(samples) - 1)
    to_start, to_end = t0 - start, end - t1
    if result > 0 and v0 >= 0:
        to_start = min(to_start, sampled * (v0 / result))
    threshold = average * 1.1
    interval = sampled + (to_start if to_start < threshold else average / 2)
    interval += to_end if to_end < threshold else average / 2
    return result * interval / sampled


@pytest.mark.parametrize("generation", GENERATIONS, ids=lambda g: g.id)
def test_violation_counters_are_ns_and_opencost_divides_them_as_us(
        generation: Generation, nodes: dict[str, Node]) -> None:
    """The brake held BRAKE_FOR_S seconds: the counter served rose by that many nanoseconds
    (DCGM stores NVML's raw value, in ns, and dcgm-exporter serves it unchanged). OpenCost's
    query divides the hour's increase by 3.6e9, the hour in microseconds, so its "fraction"
    is the ns figure over 3.6e9: 1000 times the real share of time."""
    node = nodes[generation.id]
    (violation,) = [q for q in QUERIES if q.name == "QueryGPUThrottleViolationRatio"]
    raw_expr = f'DCGM_FI_DEV_POWER_VIOLATION{{gpu="{generation.brake_gpu}",container!=""}}[1h]'

    def consistent() -> tuple[list[dict[str, Any]], list[dict[str, Any]]] | None:
        before = node.query(raw_expr)
        answer = node.query(violation.query)
        after = node.query(raw_expr)
        return (before, answer) if before == after else None

    raw, answer = wait_until(consistent, 20.0, 0.2, what="no scrape between the queries")
    assert raw, generation.id
    for series in raw:
        samples = [(float(t), float(v)) for t, v in series["values"]]
        assert samples[-1][1] == BRAKE_FOR_S * 1_000_000_000, (generation.id, samples[-1])
        labels = series["metric"]
        (power,) = [s for s in answer if s["metric"]["reason"] == "power"
                    and s["metric"]["UUID"] == labels["UUID"]
                    and s["metric"]["pod"] == labels["pod"]]
        expected = extrapolated_increase(samples, node.at - 3600, node.at) / 3.6e9
        assert float(power["value"][1]) == pytest.approx(expected, rel=1e-9), generation.id
    others = [s for s in answer if s["metric"]["reason"] != "power"
              or s["metric"]["UUID"] not in {r["metric"]["UUID"] for r in raw}]
    assert others, generation.id
    assert {float(s["value"][1]) for s in others} == {0.0}, generation.id
    assert {s["metric"]["reason"] for s in answer} == {"power", "thermal", "sync_boost",
                                                      "board_limit"}


@pytest.mark.parametrize("generation", GENERATIONS, ids=lambda g: g.id)
def test_xid_reaches_the_pod_and_opencost_counts_value_changes_per_series(
        generation: Generation, nodes: dict[str, Node]) -> None:
    """The XID raised on the brake GPU is on its pod's series (`err_code` and `err_msg`, as
    dcgm-exporter labels it). OpenCost counts `changes()` of each series; as the code is a
    label too, a new code starts a new series rather than changing a value, so OpenCost's
    count is the value changes inside each series, here computed from the raw samples."""
    node = nodes[generation.id]
    (xid,) = [q for q in QUERIES if q.name == "QueryGPUXIDErrorCount"]
    raw_expr = f'DCGM_FI_DEV_XID_ERRORS{{gpu="{generation.brake_gpu}",container!=""}}[1h]'

    def consistent() -> tuple[list[dict[str, Any]], list[dict[str, Any]]] | None:
        before = node.query(raw_expr)
        answer = node.query(xid.query)
        return (before, answer) if node.query(raw_expr) == before else None

    raw, answer = wait_until(consistent, 20.0, 0.2, what="no scrape between the queries")
    raised = [s["metric"] for s in raw if s["metric"]["err_code"] == str(XID)]
    assert raised, f"{generation.id}: XID {XID} not on the pod's series"
    assert all(m["err_msg"] == "Graphics Engine Exception" for m in raised)
    for pod in {s["metric"]["pod"] for s in raw}:
        changes = sum(
            sum(a != b for (_, a), (_, b) in zip(s["values"], s["values"][1:], strict=False))
            for s in raw if s["metric"]["pod"] == pod)
        (count,) = [s for s in answer if s["metric"]["pod"] == pod
                    and s["metric"]["UUID"] == raised[0]["UUID"]]
        assert float(count["value"][1]) == changes, (generation.id, pod)

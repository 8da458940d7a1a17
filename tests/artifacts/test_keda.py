"""KEDA ScaledObjects: valid against KEDA's CRD, metadata values as strings, queries that
aggregate to at most one series, and clear errors from `generate keda`."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.artifacts.conftest import run_generate, validate_against_crd
from tests.support.paths import ROOT

EXAMPLES = sorted((ROOT / "deploy" / "keda").glob("*.yaml"))
CRD = "keda.sh_scaledobjects.yaml"


def single_series(query: str) -> bool:
    """True when every vector in the query is wrapped by an aggregation without `by`."""
    depth_of_agg: list[int] = []
    depth = 0
    i = 0
    while i < len(query):
        m = re.match(r"(sum|avg|max|min|count)\s*(by|without)?\s*\(", query[i:])
        if m:
            if m.group(2):
                return False
            depth_of_agg.append(depth)
            depth += 1
            i += m.end()
            continue
        if query[i] == "(":
            depth += 1
        elif query[i] == ")":
            depth -= 1
            if depth_of_agg and depth_of_agg[-1] == depth:
                depth_of_agg.pop()
        elif query[i] == "{" and not depth_of_agg:
            return False
        i += 1
    return True


def _load(path: Path) -> dict[str, Any]:
    obj: dict[str, Any] = yaml.safe_load(path.read_text())
    return obj


def _check(obj: dict[str, Any]) -> None:
    validate_against_crd(obj, CRD, "v1alpha1")
    assert obj["spec"]["triggers"]
    for trigger in obj["spec"]["triggers"]:
        meta = trigger["metadata"]
        assert all(isinstance(v, str) for v in meta.values()), meta
        assert single_series(meta["query"]), meta["query"]
        float(meta["threshold"])


def test_single_series_detector() -> None:
    assert single_series('avg(DCGM_FI_DEV_GPU_UTIL{pod=~"a"})')
    assert single_series('100 * sum(a{x="1"}) / (sum(a{x="1"}) + sum(b{x="1"}))')
    assert not single_series('avg by (pod) (DCGM_FI_DEV_GPU_UTIL{pod=~"a"})')
    assert not single_series('DCGM_FI_DEV_GPU_UTIL{pod=~"a"} / avg(b{c="d"})')


def test_examples() -> None:
    names = [p.name for p in EXAMPLES]
    assert names == ["decode-pool.yaml", "framebuffer-pressure.yaml", "gpu-utilization.yaml",
                     "inference-queue.yaml", "mig-gr-engine.yaml", "prefill-pool.yaml"]
    for path in EXAMPLES:
        _check(_load(path))
    util = _load(ROOT / "deploy" / "keda" / "gpu-utilization.yaml")
    assert util["spec"]["triggers"][0]["metricType"] == "Value"
    mig = _load(ROOT / "deploy" / "keda" / "mig-gr-engine.yaml")
    assert "DCGM_FI_PROF_GR_ENGINE_ACTIVE" in mig["spec"]["triggers"][0]["metadata"]["query"]
    queue = _load(ROOT / "deploy" / "keda" / "inference-queue.yaml")
    waiting, activity = (t["metadata"]["query"] for t in queue["spec"]["triggers"])
    assert waiting.startswith("sum(vllm:num_requests_waiting{")
    # GPM where the GPU has it, NVML utilisation before Hopper, per GPU inside the average.
    assert activity.startswith("100 * avg((DCGM_FI_PROF_GR_ENGINE_ACTIVE{")
    assert " or on (UUID) DCGM_FI_DEV_GPU_UTIL{" in activity
    assert [t["metricType"] for t in queue["spec"]["triggers"]] == ["AverageValue", "Value"]


@pytest.mark.parametrize("role", ["prefill", "decode"])
def test_role_pools_scale_apart(role: str) -> None:
    """Each pool: a queue-depth and a GPU trigger over that role's pods only, whichever stack
    labelled them, and never the other role's."""
    obj = _load(ROOT / "deploy" / "keda" / f"{role}-pool.yaml")
    queue, gpu = obj["spec"]["triggers"]
    assert [queue["metricType"], gpu["metricType"]] == ["AverageValue", "Value"]
    for trigger in (queue, gpu):
        query = trigger["metadata"]["query"]
        selectors = re.findall(r"\{([^}]*)\}", query)
        roles = [m for sel in selectors for m in re.findall(r'(\w+)="(prefill|decode)"', sel)]
        assert {value for _, value in roles} == {role}
        assert {label for label, _ in roles} == {
            "llm_d_ai_role", "nvidia_com_dynamo_sub_component_type",
            "nvidia_com_dynamo_component_type"}
        assert "pod=~" not in query
    # Serving metrics carry no pod labels: the queue is taken from the pods whose GPUs do.
    assert queue["metadata"]["query"].startswith(
        'sum(vllm:num_requests_waiting{namespace="inference"} and on (namespace, pod) (')
    metric, fallback = {"prefill": ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "DCGM_FI_DEV_GPU_UTIL"),
                        "decode": ("DCGM_FI_PROF_DRAM_ACTIVE", "DCGM_FI_DEV_MEM_COPY_UTIL")}[role]
    for query in (gpu["metadata"]["query"], queue["metadata"]["query"]):
        assert metric in query
        assert f") or on (UUID) ({fallback}{{" in query


def test_generate_role_pool() -> None:
    result = run_generate("keda", "--namespace", "serving", "--deployment", "chat-decode",
                          "--role", "decode", "--metric", "fb", "--target", "85",
                          "--queue-target", "6")
    assert result.returncode == 0, result.stderr
    obj = yaml.safe_load(result.stdout)
    _check(obj)
    assert obj["spec"]["scaleTargetRef"]["name"] == "chat-decode"
    queries = [t["metadata"]["query"] for t in obj["spec"]["triggers"]]
    assert queries
    assert all('namespace="serving"' in q and '"decode"' in q for q in queries)
    bad = run_generate("keda", "--namespace", "s", "--deployment", "d", "--role", "encode",
                       "--metric", "util", "--target", "50")
    assert bad.returncode == 2
    assert "--role" in bad.stderr


@pytest.mark.parametrize("metric", ["util", "gr-engine", "fb", "dram"])
def test_generate_one(metric: str) -> None:
    result = run_generate("keda", "--namespace", "serving", "--deployment", "chat",
                          "--metric", metric, "--target", "65", "--min", "2", "--max", "8",
                          "--prometheus", "http://prom.example:9090")
    assert result.returncode == 0, result.stderr
    docs = list(yaml.safe_load_all(result.stdout))
    assert len(docs) == 1
    obj = docs[0]
    _check(obj)
    assert obj["metadata"]["namespace"] == "serving"
    assert obj["spec"]["scaleTargetRef"]["name"] == "chat"
    assert (obj["spec"]["minReplicaCount"], obj["spec"]["maxReplicaCount"]) == (2, 8)
    meta = obj["spec"]["triggers"][0]["metadata"]
    assert meta["threshold"] == "65"
    assert meta["serverAddress"] == "http://prom.example:9090"
    assert 'namespace="serving"' in meta["query"]


def test_pod_regex_selects_only_the_deployments_pods() -> None:
    result = run_generate("keda", "--namespace", "s", "--deployment", "llm", "--metric",
                          "util", "--target", "50")
    query = yaml.safe_load(result.stdout)["spec"]["triggers"][0]["metadata"]["query"]
    pod_re = re.search(r'pod=~"([^"]+)"', query)
    assert pod_re
    regex = re.compile(pod_re.group(1))
    assert regex.fullmatch("llm-7d9f8c6b5-x2z4q")
    assert regex.fullmatch("llm-5b8c9d7f4b-q8w9z")
    assert not regex.fullmatch("llm-prefill-x2z4q")
    assert not regex.fullmatch("llm-7d9f8c6b5-x2z4q-extra")


@pytest.mark.parametrize(("args", "message"), [
    (["--metric", "util", "--target", "50"], "--deployment"),
    (["--deployment", "d", "--metric", "util", "--target", "150"], "--target is a percentage"),
    (["--deployment", "d", "--metric", "util", "--target", "50", "--min", "5", "--max", "2"],
     "--max must be"),
    (["--deployment", "d", "--metric", "util", "--target", "0"], "--target must be positive"),
])
def test_generate_one_errors(args: list[str], message: str) -> None:
    result = run_generate("keda", "--namespace", "n", *args)
    assert result.returncode == 2
    assert message in result.stderr


def test_metric_not_collected(tmp_path: Path) -> None:
    csv = tmp_path / "c.csv"
    csv.write_text("DCGM_FI_DEV_FB_USED, gauge, used\n")
    result = run_generate("keda", "--collectors", str(csv), "--namespace", "n",
                          "--deployment", "d", "--metric", "gr-engine", "--target", "50")
    assert result.returncode == 2
    assert ("--metric gr-engine needs DCGM_FI_PROF_GR_ENGINE_ACTIVE (GPM) or "
            f"DCGM_FI_DEV_GPU_UTIL (before Hopper), which {csv} does not enable") \
        in result.stderr


def test_activity_from_whichever_source_is_collected(tmp_path: Path) -> None:
    """A collectors file without the GPM field (usual before Hopper) still gets the trigger,
    on NVML utilisation alone; one without the NVML field gets GPM alone."""
    for enabled, used, unused in (("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_GPU_UTIL{",
                                   "DCGM_FI_PROF_"),
                                  ("DCGM_FI_PROF_GR_ENGINE_ACTIVE",
                                   "DCGM_FI_PROF_GR_ENGINE_ACTIVE{", "DCGM_FI_DEV_")):
        csv = tmp_path / "c.csv"
        csv.write_text(f"{enabled}, gauge, activity\n")
        result = run_generate("keda", "--collectors", str(csv), "--namespace", "n",
                              "--deployment", "d", "--metric", "gr-engine", "--target", "50",
                              "--role", "prefill", "--queue-target", "4")
        assert result.returncode == 0, result.stderr
        obj = yaml.safe_load(result.stdout)
        _check(obj)
        for trigger in obj["spec"]["triggers"]:
            query = trigger["metadata"]["query"]
            assert used in query
            assert unused not in query
            assert " or on (UUID) " not in query

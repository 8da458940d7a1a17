"""Enrichment from a local HTTP server that speaks the Kubernetes pod list/watch paths."""

from __future__ import annotations

from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from exporter.devices.nvml import NvmlBackend
from exporter.exposition.publisher import Publisher
from exporter.fields.csv import default_collectors_path, load_collectors
from exporter.k8s.config import KubernetesConfig
from exporter.k8s.kubelet_client import PodResourcesClient
from exporter.k8s.pod_access import check_access
from exporter.k8s.pod_labels import PodLabelRules
from exporter.k8s.pod_metadata import PodMetadataWatcher
from exporter.k8s.source import KubeletSource
from exporter.k8s.types import PodRef
from exporter.sampling.config import SamplerSettings
from exporter.sampling.sampler import Sampler
from exporter.sampling.snapshot import HostLabel
from exporter.simulated.kubelet import (
    SimKubeletHandle,
    plan_allocations,
    pod_resources,
    start_sim_kubelet,
)
from exporter.simulated.node import SimNvml
from tests.support.apiserver import FakeApiServer, pod
from tests.support.wait import wait_until

from .k8s_helpers import gpu_uuid, plain_node

LLM = pod("inference", "llm-0", "uid-llm-0",
          {"app.kubernetes.io/name": "llm", "role": "prefill", "team": "ml",
           "pod-template-hash": "x"})
OTHER_NODE = pod("inference", "llm-9", "uid-llm-9", {"role": "decode"}, node="node-b")


def test_label_names_are_sanitised_and_filtered() -> None:
    rules = PodLabelRules.from_config(KubernetesConfig(
        pod_labels=r"team|role|app\.kubernetes\.io/.*|a-b|a\.b|example\.com/queue"))
    labels = {"team": "ml", "role": "", "app.kubernetes.io/name": "llm", "secret": "x",
              "a-b": "1", "a.b": "2", "example.com/queue": "q"}
    copied, dropped = rules.apply("u", labels)
    assert copied == (
        ("pod_uid", "u"),
        ("label_a_b", "1"),  # "a-b" sorts first; "a.b" would collide and is dropped
        ("label_app_kubernetes_io_name", "llm"),
        ("label_example_com_queue", "q"),
        ("label_team", "ml"),
    )
    assert [(d.key, d.reason) for d in dropped] == [("a.b", "duplicate")]


def test_watch_follows_pods_of_this_node(api: FakeApiServer, kubeconfig: str) -> None:
    api.state.pods = [LLM, OTHER_NODE]
    config = KubernetesConfig(enabled=True, node_name="node-a", pod_labels="role|team")
    watcher = PodMetadataWatcher.from_config(config, kubeconfig=kubeconfig)
    watcher.start()
    try:
        assert watcher.synced.wait(10)
        assert watcher.labels_for("inference", "llm-0") == (
            ("pod_uid", "uid-llm-0"), ("label_role", "prefill"), ("label_team", "ml")
        )
        assert watcher.labels_for("inference", "llm-9") == ()
        (listed,) = api.state.lists()
        assert listed["fieldSelector"] == ["spec.nodeName=node-a"]

        changed = pod("inference", "llm-0", "uid-llm-0", {"role": "decode"})
        api.state.push("MODIFIED", changed)
        wait_until(lambda: watcher.labels_for("inference", "llm-0")
                   == (("pod_uid", "uid-llm-0"), ("label_role", "decode")))
        api.state.push("ADDED", pod("batch", "job-1", "uid-job-1", {"team": "data"}))
        wait_until(lambda: watcher.labels_for("batch", "job-1") != ())
        api.state.push("DELETED", changed)
        wait_until(lambda: watcher.labels_for("inference", "llm-0") == ())
        assert api.state.watches()
        assert all(w["fieldSelector"] == ["spec.nodeName=node-a"] for w in api.state.watches())
        assert len(api.state.lists()) == 1  # watched from the list's version, never relisted
        assert watcher.families()[0].samples[0].value == 1
    finally:
        watcher.close()


@pytest.mark.usefixtures("kubeconfig")
async def test_source_adds_labels_without_a_request_per_refresh(
    api: FakeApiServer, kubelet: SimKubeletHandle, socket_path: str
) -> None:
    api.state.pods = [LLM, pod("research", "nb-a", "uid-nb-a", {"team": "rs"}),
                      pod("research", "nb-b", "uid-nb-b", {})]
    shared = gpu_uuid(1)
    kubelet.servicer.set_pods([
        pod_resources("inference", "llm-0", {"server": [("nvidia.com/gpu", [gpu_uuid(0)])]}),
        pod_resources("research", "nb-a", {"nb": [("nvidia.com/gpu", [f"{shared}::0"])]}),
        pod_resources("research", "nb-b", {"nb": [("nvidia.com/gpu", [f"{shared}::1"])]}),
    ])
    config = KubernetesConfig(enabled=True, pod_resources_socket=socket_path,
                              node_name="node-a", pod_labels="team")
    source = KubeletSource(config, client=PodResourcesClient(socket_path))
    try:
        await source.refresh(plain_node(2))  # starts the watch
        assert await source.wait_metadata(30)
        metadata = source._metadata
        assert metadata is not None
        wait_until(lambda: metadata.labels_for("inference", "llm-0") != ())
        for _ in range(5):
            attribution = await source.refresh(plain_node(2))
        assert attribution.owners == {(0, -1): PodRef(
            "llm-0", "inference", "server", (("pod_uid", "uid-llm-0"), ("label_team", "ml")))}
        (fam,) = [f for f in source.families() if f.name == "gpu_exporter_pod_gpu_allocation"]
        extras = {dict(s.labels)["pod"]: dict(s.labels) for s in fam.samples}
        assert extras["nb-a"]["label_team"] == "rs"
        assert extras["nb-a"]["pod_uid"] == "uid-nb-a"
        assert "label_team" not in extras["nb-b"]
        assert extras["nb-b"]["pod_uid"] == "uid-nb-b"
        assert len(api.state.lists()) == 1
        assert "gpu_exporter_kubernetes_api_up" in [f.name for f in source.families()]
    finally:
        await source.close()


def test_pod_scope_watches_only_its_own_pod(api: FakeApiServer, kubeconfig: str) -> None:
    api.state.pods = [LLM, pod("inference", "llm-1", "uid-llm-1", {"team": "ml"})]
    config = KubernetesConfig(enabled=True, scope="pod", pod_name="llm-0",
                              pod_namespace="inference", pod_labels="team")
    watcher = PodMetadataWatcher.from_config(config, kubeconfig=kubeconfig)
    watcher.start()
    try:
        assert watcher.synced.wait(10)
        assert watcher.labels_for("inference", "llm-1") == ()
        assert watcher.labels_for("inference", "llm-0") != ()
        path, query = api.state.requests[0]
        assert path == "/api/v1/namespaces/inference/pods"
        assert query["fieldSelector"] == ["metadata.name=llm-0"]
    finally:
        watcher.close()


def test_check_access_explains_rbac_and_reachability(
    api: FakeApiServer, kubeconfig: str, tmp_path: Path
) -> None:
    config = KubernetesConfig(enabled=True, node_name="node-a", pod_labels="team")
    ok, message = check_access(config, kubeconfig=kubeconfig)
    assert ok, message
    api.state.forbidden = True
    ok, message = check_access(config, kubeconfig=kubeconfig)
    assert not ok
    assert "403" in message
    assert "get/list/watch" in message
    dead = FakeApiServer()
    dead_config = dead.write_kubeconfig(tmp_path / "dead")  # never started: nothing listens
    dead._server.server_close()
    ok, message = check_access(config, kubeconfig=dead_config)
    assert not ok
    assert "unreachable" in message


Series = dict[tuple[str, frozenset[tuple[str, str]]], float]


def parsed(text: str) -> Series:
    """Every sample of the exposition; fails when two series of a family share a label set
    (Prometheus would reject the whole scrape)."""
    series: Series = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            key = (s.name, frozenset(s.labels.items()))
            assert key not in series, f"duplicate series {key}"
            series[key] = s.value
    return series


def of(series: Series, name: str, **match: str) -> list[dict[str, str]]:
    return [dict(labels) for (n, labels), _ in series.items()
            if n == name and all(dict(labels).get(k) == v for k, v in match.items())]


@pytest.mark.usefixtures("kubeconfig")
async def test_dcgm_pod_labels_and_virtual_gpus_through_a_poll(
    api: FakeApiServer, socket_path: str
) -> None:
    """The simulated H200 node with the demo's allocations, polled by the real sampler with
    dcgm-exporter's pod labels, pod UID and virtual GPUs."""
    collectors = load_collectors(default_collectors_path())
    backend = NvmlBackend(SimNvml("h200-mig", seed=7), collectors.specs)
    backend.start()
    backend.poll()  # enumerates the devices
    inventory = backend.inventory
    labels = {"app.kubernetes.io/name": "llm", "llm-d.ai/role": "decode", "pod": "forged",
              "team": "ml"}
    api.state.pods = [pod(p.namespace, p.name, f"uid-{p.name}", labels)
                      for p in plan_allocations(inventory)]
    kubelet = start_sim_kubelet(socket_path, inventory)
    config = KubernetesConfig(
        enabled=True, pod_resources_socket=socket_path, node_name="node-a",
        enable_pod_labels=True, enable_pod_uid=True, virtual_gpus=True,
        pod_label_allowlist=(r"^app\.kubernetes\.io/", "llm-d", "^pod$"))
    source = KubeletSource(config)
    sampler = Sampler(backend, collectors,
                      SamplerSettings(interval_s=1.0, host=HostLabel("Hostname", "node-a")),
                      Publisher("sim"), attribution=source)
    try:
        await sampler.poll_once()
        assert await source.wait_metadata(30)
        metadata = source._metadata
        assert metadata is not None
        wait_until(lambda: metadata.labels_for("research", "notebook-bob-0") != ())
        await sampler.poll_once()
        series = parsed(sampler.current.text.decode())

        # A field every copy repeats (the holders' own FB_USED and GPU_UTIL need process reads,
        # which this source has none of: tests/k8s/test_k8s_virtual_gpu_split.py).
        util = "DCGM_FI_DEV_POWER_USAGE"
        # GPU 7 is time-sliced between three notebooks: one copy each, with its replica id.
        shared = of(series, util, gpu="7")
        assert sorted((s["pod"], s["vgpu"], s["pod_uid"]) for s in shared) == [
            ("notebook-alice-0", "0", "uid-notebook-alice-0"),
            ("notebook-bob-0", "1", "uid-notebook-bob-0"),
            ("notebook-carol-0", "2", "uid-notebook-carol-0"),
        ]
        for s in shared:
            assert s["namespace"] == "research"
            assert s["container"] == "notebook"
            assert s["app_kubernetes_io_name"] == "llm"
            assert s["llm_d_ai_role"] == "decode"
            assert "team" not in s
            assert "label_team" not in s
        # An exclusive GPU: one series, its pod's labels, no vgpu; an idle one: unlabelled.
        (exclusive,) = of(series, util, gpu="2")
        assert exclusive["namespace"] == "inference"
        assert "vgpu" not in exclusive
        assert exclusive["pod_uid"] == f"uid-{exclusive['pod']}"
        assert exclusive["llm_d_ai_role"] == "decode"
        (idle,) = of(series, util, gpu="6")
        assert "pod" not in idle
        assert "pod_uid" not in idle
        # The 3g.71gb instance whose two compute instances are two pods': two copies.
        split = of(series, "DCGM_FI_DEV_FB_FREE", GPU_I_PROFILE="3g.71gb")
        assert len({s["pod"] for s in split}) == 2 == len(split)
        assert all("vgpu" not in s for s in split)
        # Without process reads no holder's own framebuffer is known: the device's alone.
        (used,) = of(series, "DCGM_FI_DEV_FB_USED", GPU_I_PROFILE="3g.71gb")
        assert "pod" not in used
        # The pod label named `pod` never replaced the pod's name: it was renamed, and
        # counted once.
        assert "forged" not in {s.get("pod") for s in of(series, util)}
        assert {s.get("pod_label_pod") for s in of(series, util) if "pod" in s} == {"forged"}
        dropped = {dict(labels)["reason"]: v for (n, labels), v in series.items()
                   if n == "gpu_exporter_pod_labels_dropped_total"}
        assert dropped == {"invalid": 0.0, "duplicate": 0.0}
        assert series[("gpu_exporter_pod_labels_renamed_total", frozenset())] == 1.0

        # A label change arrives through the watch, without a new list.
        changed = pod("research", "notebook-bob-0", "uid-notebook-bob-0",
                      {**labels, "llm-d.ai/role": "prefill"})
        api.state.push("MODIFIED", changed)
        wait_until(lambda: ("llm_d_ai_role", "prefill")
                   in metadata.labels_for("research", "notebook-bob-0"))
        await sampler.poll_once()
        (bob,) = of(parsed(sampler.current.text.decode()), util, pod="notebook-bob-0")
        assert bob["llm_d_ai_role"] == "prefill"
        assert bob["vgpu"] == "1"
        assert len(api.state.lists()) == 1
    finally:
        await sampler.close()
        kubelet.stop()

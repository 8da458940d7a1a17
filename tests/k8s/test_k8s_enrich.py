"""Enrichment from a local HTTP server that speaks the Kubernetes pod list/watch paths."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from exporter.k8s.client import PodResourcesClient
from exporter.k8s.config import KubernetesConfig
from exporter.k8s.enrich import PodMetadataWatcher, check_access, pod_labels, sanitise_label_key
from exporter.k8s.simkubelet import SimKubeletHandle, pod_resources
from exporter.k8s.source import KubeletSource
from exporter.k8s.types import PodRef
from tests.support.apiserver import FakeApiServer, pod
from tests.support.wait import wait_until

from .k8s_helpers import gpu_uuid, plain_node


@pytest.fixture
def kubeconfig(api: FakeApiServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    path = api.write_kubeconfig(tmp_path / "kubeconfig")
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("KUBECONFIG", path)
    return path


LLM = pod("inference", "llm-0", "uid-llm-0",
          {"app.kubernetes.io/name": "llm", "role": "prefill", "team": "ml",
           "pod-template-hash": "x"})
OTHER_NODE = pod("inference", "llm-9", "uid-llm-9", {"role": "decode"}, node="node-b")


def test_label_names_are_sanitised_and_filtered() -> None:
    allow = re.compile(r"team|role|app\.kubernetes\.io/.*|a-b|a\.b")
    labels = {"team": "ml", "role": "", "app.kubernetes.io/name": "llm", "secret": "x",
              "a-b": "1", "a.b": "2"}
    assert pod_labels("u", labels, allow) == (
        ("pod_uid", "u"),
        ("label_a_b", "1"),  # "a-b" sorts first; "a.b" would collide and is dropped
        ("label_app_kubernetes_io_name", "llm"),
        ("label_team", "ml"),
    )
    assert sanitise_label_key("example.com/queue") == "label_example_com_queue"


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
        assert all(w["fieldSelector"] == ["spec.nodeName=node-a"] for w in api.state.watches())
        assert len(api.state.lists()) == 1  # watched from the list's version, never relisted
        assert watcher.families()[0].samples[0].value == 1
    finally:
        watcher.close()


async def test_source_adds_labels_without_a_request_per_refresh(
    api: FakeApiServer, kubeconfig: str, kubelet: SimKubeletHandle, socket_path: str
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
        assert extras["nb-a"]["label_team"] == "rs" and extras["nb-a"]["pod_uid"] == "uid-nb-a"
        assert "label_team" not in extras["nb-b"] and extras["nb-b"]["pod_uid"] == "uid-nb-b"
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
    assert not ok and "403" in message and "get/list/watch" in message
    dead = FakeApiServer()
    dead_config = dead.write_kubeconfig(tmp_path / "dead")  # never started: nothing listens
    dead._server.server_close()
    ok, message = check_access(config, kubeconfig=dead_config)
    assert not ok and "unreachable" in message

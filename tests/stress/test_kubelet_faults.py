"""Fault matrix, Kubernetes side: the exporter on the simulated node, attributing its GPUs
through a real pod-resources gRPC server (and the fake API server) that the test breaks."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

from exporter.simulated.kubelet import SimKubeletHandle, pod_resources, serve_pod_resources
from exporter.simulated.node.profiles import gpu_uuid
from tests.stress.conftest import Matrix
from tests.stress.harness import Rule, StressRun, finish
from tests.stress.kubelets import (
    GPU,
    NAMESPACE,
    NOT_PROTOBUF,
    PROFILE,
    RawKubelet,
    SlowKubelet,
    list_answer,
    oversized_answer,
    pods,
)
from tests.stress.nodes import TEMP, during, start_sim
from tests.stress.results import CASES
from tests.stress.scraper import Scrape
from tests.support.apiserver import FakeApiServer, pod
from tests.support.exporter_process import ExporterProcess, free_port

REFRESH_ERRORS = "gpu_exporter_kubelet_refresh_errors_total"


def pod_of(scrape: Scrape, gpu: int) -> str | None:
    found = scrape.matching(TEMP, gpu=str(gpu))
    return found[0][0].get("pod") if found else None


def pods_shown(scrape: Scrape) -> set[str]:
    """Pods named on any DCGM series."""
    return {dict(labels)["pod"] for name, labels in scrape.samples or {}
            if name.startswith("DCGM_") and "pod" in dict(labels)}


def refresh_errors(scrape: Scrape, code: str) -> float:
    return scrape.value(REFRESH_ERRORS, code=code) or 0.0


def kubelet_run(exporter: type[ExporterProcess], socket_path: str, *args: str,
                env: dict[str, str] | None = None) -> StressRun:
    return start_sim(exporter, "-k", "--kubernetes.pod-resources-socket", socket_path, *args,
                     profile=PROFILE, env=env)


def labels_kept(gpu: int, pod_name: str, start: str, end: str) -> Rule:
    """A rule: between two marks GPU `gpu` keeps `pod_name` (the kubelet's last answer),
    neither blanked nor replaced."""
    def rule(scrape: Scrape, marks: Mapping[str, float]) -> list[str]:
        if during(scrape, marks, start, end) and pod_of(scrape, gpu) != pod_name:
            return [f"GPU {gpu} labelled {pod_of(scrape, gpu)!r}, not the kept {pod_name!r}"]
        return []
    return rule


@pytest.fixture
def handles() -> Iterator[list[SimKubeletHandle | RawKubelet]]:
    """Kubelets a case starts, stopped after it."""
    started: list[SimKubeletHandle | RawKubelet] = []
    yield started
    for handle in started:
        handle.stop()


def test_kubelet_socket_absent_at_start(socket_path: str, exporter: type[ExporterProcess],
                                        handles: list[SimKubeletHandle | RawKubelet],
                                        matrix: Matrix) -> None:
    run = kubelet_run(exporter, socket_path)
    run.mark("fault")  # absent from the start
    run.wait_served(lambda s: s.value(REFRESH_ERRORS, code="SOCKET_ABSENT") is not None,
                    "the absent socket reported")
    run.hold(30)
    run.mark("clear")
    kubelet = serve_pod_resources(socket_path)
    handles.append(kubelet)
    kubelet.servicer.set_pods(pods("web"))
    recovery = run.recovered(lambda s: pod_of(s, 0) == "web-0", "pod labels")
    run.hold(15)

    def no_owner_before(scrape: Scrape, marks: Mapping[str, float]) -> list[str]:
        if not during(scrape, marks, "clear", None) and pods_shown(scrape):
            return [f"pods {pods_shown(scrape)} shown with no kubelet"]
        return []

    result = matrix.record("kubelet-absent", finish(
        run, CASES["kubelet-absent"][0], ready=[200], rules=[no_owner_before], recovery_s=recovery))
    assert result.ok, result.explain()


def test_kubelet_restarted_socket_recreated(socket_path: str, exporter: type[ExporterProcess],
                                            handles: list[SimKubeletHandle | RawKubelet],
                                            matrix: Matrix) -> None:
    first = serve_pod_resources(socket_path)
    handles.append(first)
    first.servicer.set_pods(pods("before"))
    run = kubelet_run(exporter, socket_path)
    run.wait_served(lambda s: pod_of(s, 0) == "before-0", "pod labels")
    run.hold(20)
    run.mark("fault")
    first.stop()
    run.wait_served(lambda s: refresh_errors(s, "SOCKET_ABSENT") > 0, "the kubelet gone",
                    since="fault")
    run.hold(25)
    run.mark("clear")
    second = serve_pod_resources(socket_path)
    handles.append(second)
    second.servicer.set_pods(pods("after"))
    recovery = run.recovered(lambda s: pod_of(s, 0) == "after-0", "the new kubelet's pods")
    run.hold(15)

    def no_return_of_old(scrape: Scrape, marks: Mapping[str, float]) -> list[str]:
        if during(scrape, marks, "recovered", None) and pod_of(scrape, 0) != "after-0":
            return [f"GPU 0 labelled {pod_of(scrape, 0)!r} after the restart"]
        return []

    result = matrix.record("kubelet-restart", finish(
        run, CASES["kubelet-restart"][0], ready=[200], recovery_s=recovery,
        rules=[labels_kept(0, "before-0", "fault", "clear"), no_return_of_old]))
    assert result.ok, result.explain()


def test_kubelet_slow_past_the_deadline(socket_path: str, exporter: type[ExporterProcess],
                                        handles: list[SimKubeletHandle | RawKubelet],
                                        matrix: Matrix) -> None:
    servicer = SlowKubelet()
    servicer.set_pods(pods("steady"))
    handles.append(serve_pod_resources(socket_path, servicer))
    run = kubelet_run(exporter, socket_path)
    run.wait_served(lambda s: pod_of(s, 0) == "steady-0", "pod labels")
    run.hold(20)
    run.mark("fault")
    servicer.delay_s = 3.0
    run.wait_served(lambda s: refresh_errors(s, "DEADLINE_EXCEEDED") > 0,
                    "a refresh past its deadline", since="fault")
    run.hold(50)
    run.mark("clear")
    servicer.set_pods(pods("fresh"))
    servicer.release()
    recovery = run.recovered(lambda s: pod_of(s, 0) == "fresh-0", "fresh allocations")
    run.hold(15)
    result = matrix.record("kubelet-slow", finish(
        run, CASES["kubelet-slow"][0], ready=[200], recovery_s=recovery,
        rules=[labels_kept(0, "steady-0", "fault", "clear")]))
    assert result.ok, result.explain()


def test_kubelet_malformed_and_oversized_answers(socket_path: str,
                                                 exporter: type[ExporterProcess],
                                                 handles: list[SimKubeletHandle | RawKubelet],
                                                 matrix: Matrix) -> None:
    kubelet = RawKubelet(socket_path, list_answer(pods("good")))
    handles.append(kubelet)
    run = kubelet_run(exporter, socket_path)
    run.wait_served(lambda s: pod_of(s, 0) == "good-0", "pod labels")
    run.hold(20)
    run.mark("fault")
    kubelet.answer = NOT_PROTOBUF
    seen = run.wait_served(lambda s: bool(s.matching(REFRESH_ERRORS)),
                           "the malformed answer refused", since="fault")
    run.hold(15)
    run.mark("oversized")
    kubelet.answer = oversized_answer(17 * 1024 * 1024)
    run.wait_served(lambda s: refresh_errors(s, "RESOURCE_EXHAUSTED") > 0,
                    "the oversized answer refused", since="oversized")
    run.hold(15)
    run.mark("clear")
    kubelet.answer = list_answer(pods("fresh"))
    recovery = run.recovered(lambda s: pod_of(s, 0) == "fresh-0", "good answers again")
    run.hold(15)

    def never_believed(scrape: Scrape, _marks: Mapping[str, float]) -> list[str]:
        huge = {p for p in pods_shown(scrape) if p.startswith("huge")}
        return [f"pods {huge} from the oversized answer shown"] if huge else []

    malformed = sorted(lab["code"] for lab, _ in seen.matching(REFRESH_ERRORS))
    result = matrix.record("kubelet-garbage", finish(
        run, CASES["kubelet-garbage"][0], ready=[200], recovery_s=recovery,
        rules=[labels_kept(0, "good-0", "fault", "clear"), never_believed],
        note=f"refused as {', '.join(malformed)}, then RESOURCE_EXHAUSTED"))
    assert result.ok, result.explain()


MALFORMED_IDS = ["", "GPU-", "GPU-not-a-uuid!", "MIG-", "MIG-GPU-x/1/2/3/4", "nvidia",
                 "nvidia-1", "../../etc/passwd", "GPU-\u00e9\u0000\u2028x", "GPU-" + "f" * 10_000,
                 f"{gpu_uuid(PROFILE, 3)}::", f"{gpu_uuid(PROFILE, 3)}::x::y"]


def test_malformed_device_ids(kubelet: SimKubeletHandle, socket_path: str,
                              exporter: type[ExporterProcess], matrix: Matrix) -> None:
    kubelet.servicer.set_pods([
        *pods("good", [0]),
        pod_resources(NAMESPACE, "bad", {"main": [(GPU, MALFORMED_IDS)]}),
        pod_resources(NAMESPACE, "mixed", {"main": [(GPU, [MALFORMED_IDS[2],
                                                            gpu_uuid(PROFILE, 2)])]}),
    ])
    run = kubelet_run(exporter, socket_path)
    run.wait_served(lambda s: (s.value("gpu_exporter_device_id_parse_errors_total") or 0) > 0,
                    "the malformed ids counted")
    run.hold(60)

    def only_valid_owners(scrape: Scrape, _marks: Mapping[str, float]) -> list[str]:
        out = []
        if "bad" in pods_shown(scrape):
            out.append("a pod holding only malformed ids is shown as an owner")
        if (pod_of(scrape, 0), pod_of(scrape, 2)) != ("good-0", "mixed"):
            out.append(f"valid ids not attributed: {pod_of(scrape, 0)}, {pod_of(scrape, 2)}")
        return out

    result = matrix.record("malformed-ids", finish(
        run, CASES["malformed-ids"][0], ready=[200], rules=[only_valid_owners]))
    assert result.ok, result.explain()


def test_api_server_unreachable_with_pod_labels(kubelet: SimKubeletHandle, socket_path: str,
                                                tmp_path: Path,
                                                exporter: type[ExporterProcess],
                                                matrix: Matrix) -> None:
    kubelet.servicer.set_pods(pods("web", [0]))
    port = free_port()  # nothing listens here until the API server starts
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": f"http://127.0.0.1:{port}"}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}]}))
    run = kubelet_run(exporter, socket_path, "--kubernetes.pod-labels", "app",
                      env={"KUBECONFIG": str(kubeconfig), "NODE_NAME": "node-a"})
    run.mark("fault")  # unreachable from the start
    run.wait_served(lambda s: pod_of(s, 0) == "web-0", "kubelet pod labels")
    run.wait_served(lambda s: (s.value("gpu_exporter_kubernetes_api_errors_total") or 0) > 0,
                    "the unreachable API server counted")
    run.hold(30)
    run.mark("clear")
    api = FakeApiServer(port)
    api.state.pods.append(pod(NAMESPACE, "web-0", "uid-web-0", {"app": "web"}))
    api.start()
    try:
        recovery = run.recovered(
            lambda s: any(lab.get("label_app") == "web" for lab, _ in s.matching(TEMP, gpu="0")),
            "pod labels from the API server", timeout=40)
        run.hold(15)
    finally:
        api.stop()

    def no_label_without_api(scrape: Scrape, marks: Mapping[str, float]) -> list[str]:
        out = []
        if pod_of(scrape, 0) != "web-0":
            out.append(f"kubelet attribution lost: GPU 0 labelled {pod_of(scrape, 0)!r}")
        if not during(scrape, marks, "clear", None) and any(
                "label_app" in lab for lab, _ in scrape.matching(TEMP)):
            out.append("label_app shown with no API server")
        return out

    result = matrix.record("apiserver-down", finish(
        run, CASES["apiserver-down"][0], ready=[200],
        rules=[no_label_without_api], recovery_s=recovery))
    assert result.ok, result.explain()

"""The built image as the GPU Operator runs dcgm-exporter's: only the image swapped.

The operator's DaemonSet (its asset, transformed for a ClusterPolicy that names our image,
sets `config.name` to a ConfigMap of metrics and passes dcgm-exporter's `-c 1000` as `args`)
runs under podman: the operator's env, the ConfigMap subPath-mounted at
/etc/dcgm-exporter/dcgm-metrics.csv, the pod-resources directory mounted with a real kubelet
gRPC server in it, the simulated libnvidia-ml.so.1 where the NVIDIA toolkit injects the
driver's, a read-only root and no capabilities.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from exporter.fields.csv import parse_collectors
from tests.deploy.operator_node import EXCLUSIVE_POD, GPU_UUIDS, SHARED_PODS
from tests.deploy.operator_render import helm_default_policy
from tests.support.container import RunningContainer, start
from tests.support.wait import wait_until

from .node import ContainerNode, operator_container

pytestmark = pytest.mark.timeout(1800)  # the first test may build the image

METRICS_CONFIGMAP = "team-dcgm-metrics"
METRICS_CSV = """\
# The team's short list
DCGM_FI_DEV_SM_CLOCK,   gauge, SM clock of the team list (MHz).
DCGM_FI_DEV_GPU_TEMP,   gauge, GPU temperature of the team list (C).
DCGM_FI_DEV_FB_USED,    gauge, Framebuffer in use of the team list (MiB).
"""
POLICY = helm_default_policy().with_our_image().with_exporter(
    config={"name": METRICS_CONFIGMAP}, args=["-c", "1000"])
SIGTERM_BUDGET_S = 5.0


@dataclass
class OperatorRun:
    container: RunningContainer
    health_after_s: float

    def metrics(self) -> str:
        status, text = self.container.get("/metrics")
        assert status == 200, text
        return text


@pytest.fixture(scope="module")
def operator_run(built_image: str, nvmlsim_lib: Path) -> Iterator[OperatorRun]:
    node = ContainerNode.start(nvmlsim_lib)
    spec = operator_container(node, POLICY, built_image,
                              configmaps={METRICS_CONFIGMAP: {"dcgm-metrics.csv": METRICS_CSV}})
    container = start(spec)
    try:
        # The operator's probes: /health, 1 s timeout, 45 s initial delay.
        health_after = container.answered("/health", budget_s=45.0, timeout_s=1.0)
        yield OperatorRun(container, health_after)
    finally:
        container.remove()
        node.stop()


def _served_fields(text: str) -> set[str]:
    return set(re.findall(r"^(DCGM_\w+)[{ ]", text, flags=re.MULTILINE))


def test_the_container_runs_read_only_without_capabilities(operator_run: OperatorRun) -> None:
    spec = operator_run.container.spec
    assert (spec.read_only, spec.cap_drop_all, spec.privileged) == (True, True, False)
    assert spec.env["DCGM_EXPORTER_COLLECTORS"] == "/etc/dcgm-exporter/dcgm-metrics.csv"
    assert spec.args == ("-c", "1000")
    assert "/var/lib/kubelet/pod-resources" in {b.target for b in spec.binds}


def test_health_answers_within_seconds(operator_run: OperatorRun) -> None:
    # The probe allows 45 s; the image answers in a few (the figure is in docs/performance.md).
    assert operator_run.health_after_s < 15


def test_the_configmaps_fields_are_served_with_its_help(operator_run: OperatorRun) -> None:
    wanted = {f.spec.name: f.help for f in
              parse_collectors(METRICS_CSV, "the ConfigMap").fields}
    text = wait_until(lambda: (lambda t: t if set(wanted) <= _served_fields(t) else None)(
        operator_run.metrics()), timeout=30, interval=0.2, what="the ConfigMap's fields")
    assert _served_fields(text) == set(wanted)
    helps = dict(re.findall(r"^# HELP (DCGM_\w+) (.*)$", text, flags=re.MULTILINE))
    assert helps == wanted
    assert "gpu_exporter_collect_interval_seconds 1" in text  # the user's `-c 1000`


def test_pods_holding_gpus_label_their_series(operator_run: OperatorRun) -> None:
    namespace, pod, container = EXCLUSIVE_POD

    def labelled() -> str | None:
        text = operator_run.metrics()
        return text if f'pod="{pod}"' in text else None

    text = wait_until(labelled, timeout=30, interval=0.2, what="pod labels")
    gpu0 = [line for line in text.splitlines()
            if line.startswith("DCGM_FI_DEV_SM_CLOCK{") and GPU_UUIDS[0] in line]
    assert len(gpu0) == 1
    assert f'container="{container}",namespace="{namespace}",pod="{pod}"' in gpu0[0]
    # The time-sliced GPU 1: its holders in the allocation rows.
    holders = {(s.labels["namespace"], s.labels["pod"], s.labels["container"])
               for family in text_string_to_metric_families(text) for s in family.samples
               if s.name == "gpu_exporter_pod_gpu_allocation" and s.labels.get("gpu") == "1"}
    assert holders == set(SHARED_PODS)


def test_the_log_says_what_it_serves(operator_run: OperatorRun) -> None:
    log = operator_run.container.logs()
    assert "NVML initialised" in log
    assert "enumerated 3 GPUs" in log
    assert "serving on http://*:9400/metrics (backend auto, 3 fields, every 1s)" in log
    assert "Traceback" not in log


def test_sigterm_exits_0_within_5_seconds(operator_run: OperatorRun) -> None:
    # Last in this module: it stops the shared container.
    container = operator_run.container
    sent = time.monotonic()
    container.signal("TERM")
    code = container.wait_exit(timeout=SIGTERM_BUDGET_S + 10)
    took = time.monotonic() - sent
    assert code == 0, container.logs()
    assert took < SIGTERM_BUDGET_S, f"{took:.1f}s"
    assert container.logs().rstrip().endswith("shutting down")

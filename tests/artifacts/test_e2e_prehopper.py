"""End to end before Hopper: the committed dashboards and KEDA objects on the simulated
`a100-timesliced` and `l4-1` nodes, whose GPUs have no GPM and so serve no `DCGM_FI_PROF_*`
series, scraped by a real Prometheus and by VictoriaMetrics (the panels and KEDA queries are
checked on both).

One stack per profile, shared by this module's tests: the exporter on the simulated node (two
nodes of one L4 each, as a fleet of single-L4 instances is laid out), a simulated kubelet per
node handing its GPUs to the pods planned here, a stand-in API server giving those pods their
labels (copied by `--kubernetes.pod-labels inference`), the serving-metrics stand-in and
Prometheus.

The pods belong to the `llm-inference` Deployment (namespace `inference`, KAI queue `chat`):
a prefill pod labelled as Dynamo labels it, a decode pod labelled as llm-d does, and on the
A100 node one with no role; the A100 node's last GPU is time-sliced between three pods of an
embedding service (queue `batch`). The prefill and decode GPUs go idle for a few seconds
(`idle` faults), and the activity triggers are compared, sample by sample, with what the
simulated GPUs did.
"""

from __future__ import annotations

import contextlib
import re
import shutil
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import yaml

from exporter.artifacts.fieldset import load_fieldset
from exporter.artifacts.keda import (
    EXAMPLES,
    Metric,
    ScaledObjectSpec,
    check_spec,
    deployment_pods,
    scaled_object,
)
from exporter.k8s.inference_labels import QUEUE, ROLE
from exporter.simulated.node.dynamics import GpuDynamics
from exporter.simulated.node.fault_specs import parse_fault
from exporter.simulated.node.profiles import get_profile, gpu_uuid
from tests.artifacts.committed import (
    DASHBOARDS,
    EXTERNAL,
    KEDA_EXAMPLES,
    committed_keda_queries,
    dashboard_panels,
    legends,
    retargeted_keda_queries,
    variable_queries,
)
from tests.artifacts.serving_target import ServingTarget
from tests.artifacts.test_dashboards import substitute
from tests.support.apiserver import FakeApiServer, pod
from tests.support.exporter_process import ExporterProcess
from tests.support.prometheus import PrometheusProcess
from tests.support.simtime import simulated_time_of
from tests.support.victoriametrics import VictoriaMetricsProcess
from tests.support.wait import wait_until

pytestmark = pytest.mark.e2e

NAMESPACE, DEPLOYMENT, REPLICA_SET = "inference", "llm-inference", "7d9c5b8f4"
VARIABLES = {"job": "gpu-exporter", "namespace": NAMESPACE, "deployment": DEPLOYMENT,
             "__rate_interval": "15s", "__range": "1h", "__interval": "1s",
             "__interval_ms": "1000"}
IDLE_AT_S, IDLE_FOR_S = 16.0, 4.0
"""Simulated time of the prefill and decode GPUs' idle stretch: over by the time the stack
has gathered its first 15 s of samples."""
FOLLOWED = (IDLE_AT_S - 6.0, IDLE_AT_S + IDLE_FOR_S + 3.0)
"""Simulated seconds over which the triggers are compared with the simulated GPUs (from the
first scrape, where that came later)."""
SLACK_PERCENT = 1.5
"""NVML rounds utilisation to whole percent; the poll reads the energy counter and the
utilisation a few milliseconds apart."""


@dataclass(frozen=True)
class Holder:
    pod: str
    labels: dict[str, str]
    gpu: int
    replica: int | None = None
    """The time-slicing replica of a shared GPU; None: the GPU is the pod's alone."""

    @property
    def role(self) -> str | None:
        for source in ROLE.sources:
            value = self.labels.get(source.key, "")
            if value and re.fullmatch(source.values, value):
                return value
        return None


@dataclass(frozen=True)
class NodePlan:
    name: str
    holders: tuple[Holder, ...]
    idle_gpus: tuple[int, ...]


def _server(suffix: str) -> str:
    return f"{DEPLOYMENT}-{REPLICA_SET}-{suffix}"


PREFILL = {"nvidia.com/dynamo-component-type": "worker",
           "nvidia.com/dynamo-sub-component-type": "prefill", "kai.scheduler/queue": "chat"}
DECODE = {"llm-d.ai/role": "decode", "llm-d.ai/model": "qwen3-8b",
          "kai.scheduler/queue": "chat"}
NO_ROLE = {"kai.scheduler/queue": "chat"}
EMBEDDER = {"kai.scheduler/queue": "batch", "app.kubernetes.io/name": "text-embedder"}

PLANS: dict[str, tuple[NodePlan, ...]] = {
    "a100-timesliced": (NodePlan("a100-node", (
        Holder(_server("x2k9p"), PREFILL, 0),
        Holder(_server("b7m4q"), DECODE, 1),
        Holder(_server("r8t2w"), NO_ROLE, 2),
        *(Holder(f"text-embedder-5f6b8c9d7-{suffix}", EMBEDDER, 3, replica)
          for replica, suffix in enumerate(("h3n6z", "f5c1v", "k9w7d"))),
    ), idle_gpus=(0, 1)),),
    "l4-1": (NodePlan("l4-node-a", (Holder(_server("x2k9p"), PREFILL, 0),), idle_gpus=(0,)),
             NodePlan("l4-node-b", (Holder(_server("b7m4q"), DECODE, 0),), idle_gpus=(0,))),
}


def _faults(plan: NodePlan) -> list[str]:
    return [f"idle,gpu={gpu},at={IDLE_AT_S:g}s,for={IDLE_FOR_S:g}s" for gpu in plan.idle_gpus]


@dataclass
class Stack:
    profile: str
    plans: tuple[NodePlan, ...]
    prometheus: PrometheusProcess
    victoria: VictoriaMetricsProcess
    engine: str = "prometheus"
    """Where `query` asks: Prometheus, or VictoriaMetrics scraping the same targets."""
    _dynamics: dict[tuple[str, int], GpuDynamics] = field(default_factory=dict)

    def on(self, engine: str) -> Stack:
        return replace(self, engine=engine)

    def query(self, expr: str) -> list[dict[str, Any]]:
        server = self.prometheus if self.engine == "prometheus" else self.victoria
        return server.query(expr)

    def dynamics(self, plan: NodePlan, gpu: int) -> GpuDynamics:
        """GPU `gpu` of the node as the exporter simulates it (seed 0, the node's faults)."""
        key = (plan.name, gpu)
        if key not in self._dynamics:
            spec = get_profile(self.profile).gpus[gpu]
            self._dynamics[key] = GpuDynamics(self.profile, spec, 0,
                                              [parse_fault(f) for f in _faults(plan)])
        return self._dynamics[key]


def _start_node(plan: NodePlan, profile: str, api: FakeApiServer, sockets: Path,
                kubeconfig: str, cleanup: contextlib.ExitStack) -> ExporterProcess:
    # Imported here: grpc is heavy.
    from exporter.simulated.kubelet import pod_resources, serve_pod_resources

    kubelet = serve_pod_resources(str(sockets / f"{plan.name}.sock"))
    cleanup.callback(kubelet.stop)
    grants = []
    for holder in plan.holders:
        device = gpu_uuid(profile, holder.gpu)
        if holder.replica is not None:
            device += f"::{holder.replica}"
        grants.append(pod_resources(NAMESPACE, holder.pod,
                                    {"server": [("nvidia.com/gpu", [device])]}))
        api.state.pods.append(pod(NAMESPACE, holder.pod, f"uid-{plan.name}-{holder.pod}",
                                  holder.labels, node=plan.name))
    kubelet.servicer.set_pods(grants)
    exporter = ExporterProcess(
        ["--backend", "sim", "--sim.profile", profile, "-c", "1s", "-k",
         "--kubernetes.pod-resources-socket", kubelet.socket_path,
         "--kubernetes.pod-labels", "inference",
         *(a for f in _faults(plan) for a in ("--sim.fault", f))],
        env={"NODE_NAME": plan.name, "KUBECONFIG": kubeconfig})
    cleanup.callback(exporter.close)
    return exporter


@pytest.fixture(scope="module", params=sorted(PLANS))
def stack(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory,
          ) -> Iterator[Stack]:
    profile: str = request.param
    plans = PLANS[profile]
    tmp = tmp_path_factory.mktemp(f"prehopper-{profile}")
    # Short: unix socket paths are limited to ~107 bytes.
    sockets = Path(tempfile.mkdtemp(prefix="prh-", dir="/tmp"))
    with contextlib.ExitStack() as cleanup:
        cleanup.callback(shutil.rmtree, sockets, ignore_errors=True)
        # The exporters inherit this environment: in-cluster settings would beat KUBECONFIG.
        env = cleanup.enter_context(pytest.MonkeyPatch.context())
        env.delenv("KUBERNETES_SERVICE_HOST", raising=False)
        api = FakeApiServer().start()
        cleanup.callback(api.stop)
        kubeconfig = api.write_kubeconfig(tmp / "kubeconfig")
        exporters = [_start_node(plan, profile, api, sockets, kubeconfig, cleanup)
                     for plan in plans]
        serving = ServingTarget({(NAMESPACE, h.pod) for plan in plans for h in plan.holders
                                 if h.pod.startswith(f"{DEPLOYMENT}-")}).start()
        cleanup.callback(serving.stop)
        for e in exporters:
            e.wait_ready(60.0)
        scrape_configs: list[dict[str, Any]] = [
            {"job_name": "gpu-exporter", "static_configs": [
                {"targets": [f"127.0.0.1:{e.port}" for e in exporters]}]},
            # Keeps the served namespace/pod, as a PodMonitor's target labels would be.
            {"job_name": "serving", "honor_labels": True, "static_configs": [
                {"targets": [f"127.0.0.1:{serving.port}"]}]},
        ]
        config = {"global": {"scrape_interval": "1s", "scrape_timeout": "1s"},
                  "scrape_configs": scrape_configs}
        prometheus = PrometheusProcess(tmp / "prometheus", config).wait_ready()
        cleanup.callback(prometheus.stop)
        victoria = VictoriaMetricsProcess(tmp / "victoria-metrics", scrape_configs).wait_ready()
        cleanup.callback(victoria.stop)
        s = Stack(profile, plans, prometheus, victoria)
        held = sum(1 for plan in plans for h in plan.holders if h.replica is None)
        for server in (s, s.on("victoria-metrics")):
            wait_until(partial(_labelled_gpus, server, held), 90.0, 0.5,
                       what=f"every exclusively held GPU labelled with its pod ({server.engine})")
            wait_until(partial(server.query, "min(count_over_time(up[15s])) >= 12"), 60.0, 0.5,
                       what=f"15s of samples of every target ({server.engine})")
            wait_until(partial(_attribution_settled, server), 60.0, 0.5,
                       what=f"no series relabelled within a rate window ({server.engine})")
        yield s


def _labelled_gpus(stack: Stack, held: int) -> bool:
    return len(stack.query('DCGM_FI_DEV_FB_USED{pod!=""}')) == held


def _attribution_settled(stack: Stack) -> bool:
    """No device series gave way to another over the last 15 s (a pod's labels arriving
    after its first polls): a rate panel would draw both, one legend twice."""
    return (len(stack.query("last_over_time(DCGM_FI_DEV_FB_USED[15s])"))
            == len(stack.query("DCGM_FI_DEV_FB_USED")))


def test_no_profiling_series_before_hopper(stack: Stack) -> None:
    """What makes these nodes pre-Hopper: GPM unsupported, no DCGM_FI_PROF_* at all."""
    assert stack.query('{__name__=~"DCGM_FI_PROF_.+"}') == []
    gpm = stack.query("gpu_exporter_gpm_supported")
    assert gpm
    assert {(s["metric"].get("reason"), s["value"][1]) for s in gpm} == {("unsupported", "0")}


def test_every_panel_answers_or_says_why(stack: Stack, engine: str) -> None:
    """Each panel has data, or carries the note Grafana shows in place of "No data". The
    panels left empty are the ones with nothing to show on these nodes, each saying so."""
    stack = stack.on(engine)
    blank, clashes, empty = [], [], []
    for path in DASHBOARDS:
        for panel in dashboard_panels(path):
            targets = [t for t in panel.targets if not EXTERNAL.search(t.expr)]
            if not targets:
                continue
            drawn: list[str] = []
            answered = False
            for target in targets:
                series = stack.query(substitute(target.expr, VARIABLES))
                answered = answered or bool(series)
                if target.legend not in ("", "__auto"):
                    drawn += legends(target.legend, series)
            if not answered:
                empty.append(f"{path.name} / {panel.title}")
                if not panel.no_value:
                    blank.append(f"{path.name} / {panel.title}")
            if len(set(drawn)) != len(drawn):
                clashes.append(f"{path.name} / {panel.title}: {sorted(drawn)}")
        for name, selector, label in variable_queries(path):
            if EXTERNAL.search(selector) or 'GPU_I_PROFILE!=""' in selector:
                continue  # no MIG on these nodes: the profile list is rightly empty
            if not stack.query(f"count by ({label}) ({substitute(selector, VARIABLES)})"):
                blank.append(f"{path.name} / variable {name}")
    assert blank == [], "silently blank:\n" + "\n".join(blank)
    assert clashes == [], "legends that repeat:\n" + "\n".join(clashes)
    # The activity panels answer from NVML; what stays empty needs GPM or MIG (or NVLink).
    answered_from_nvml = {
        "gpu-fleet-overview.json": ("Graphics engine active", "Mean engine activity by node"),
        "gpu-node-detail.json": ("Graphics engine / SM", "Memory interface"),
        "gpu-kubernetes-workloads.json": ("Engine activity per container",
                                          "Held devices by activity (idle first)"),
        "gpu-inference-autoscaling.json": ("Graphics engine trigger",
                                           "Engine activity by role",
                                           "Memory-interface activity by role",
                                           "Engine activity per queue"),
    }
    for name, titles in answered_from_nvml.items():
        for title in titles:
            assert f"{name} / {title}" not in empty
    assert {"gpu-node-detail.json / Pipes", "gpu-node-detail.json / PCIe throughput",
            "gpu-fleet-overview.json / Tensor pipe active"} <= set(empty)


def _pool(stack: Stack, role: str | None) -> list[tuple[NodePlan, int]]:
    """(node, GPU) of every GPU a pool's pods hold exclusively: the pods with `role`, else
    the Deployment's."""
    pods = re.compile(deployment_pods(DEPLOYMENT))
    return [(plan, h.gpu) for plan in stack.plans for h in plan.holders
            if h.replica is None and (h.role == role if role else pods.fullmatch(h.pod))]


def test_every_keda_example_returns_one_series(stack: Stack, engine: str) -> None:
    stack = stack.on(engine)
    for name, query in committed_keda_queries(NAMESPACE, DEPLOYMENT):
        series = stack.query(query)
        assert len(series) == 1, (name, query, series)
        assert float(series[0]["value"][1]) >= 0, (name, series)


def test_generated_keda_queries_return_one_series(stack: Stack, engine: str) -> None:
    """What `generate keda` writes for each metric, for the Deployment and for each role
    pool (built in-process from the same function; the command is tested in test_keda)."""
    stack = stack.on(engine)
    fields = load_fieldset(None)
    for metric in Metric:
        for role in (None, "prefill", "decode"):
            spec = ScaledObjectSpec(NAMESPACE, DEPLOYMENT, metric, 50, queue_target=4,
                                    role=role)
            check_spec(spec, fields)
            for trigger in scaled_object(spec, fields)["spec"]["triggers"]:
                series = stack.query(trigger["metadata"]["query"])
                assert len(series) == 1, (metric, role, trigger["metadata"]["query"], series)


def _simulated_percent(stack: Stack, metric: Metric, pool: list[tuple[NodePlan, int]],
                       at: float) -> tuple[float, float]:
    """(the pool's mean NVML utilisation - GPU or memory, as `metric` falls back to - in
    percent, the simulated time) of the polls Prometheus holds for `at`."""
    expected, times = [], []
    for plan, gpu in pool:
        dyn = stack.dynamics(plan, gpu)
        energy = stack.prometheus.query(
            f'DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{{Hostname="{plan.name}", gpu="{gpu}"}}', at)
        (sample,) = energy
        t = simulated_time_of(dyn, float(sample["value"][1]))
        gpu_pct, memory_pct = dyn.utilization_pct(t, 1.0)
        expected.append(gpu_pct if metric is Metric.GR_ENGINE else memory_pct)
        times.append(t)
    return sum(expected) / len(expected), min(times)


@pytest.mark.parametrize("filename", ["prefill-pool.yaml", "decode-pool.yaml",
                                      "inference-queue.yaml"])
def test_role_and_queue_triggers_follow_the_load(stack: Stack, filename: str) -> None:
    """The role pools' and the queue example's GPU trigger, sample by sample, is the NVML
    utilisation the simulated GPUs of that pool had, through an idle stretch and back."""
    (example,) = [e for e in EXAMPLES if e.filename == filename]
    obj = yaml.safe_load((KEDA_EXAMPLES[0].parent / filename).read_text())
    queue, gpu = retargeted_keda_queries(obj, NAMESPACE, DEPLOYMENT)
    assert len(stack.query(queue)) == 1
    pool = _pool(stack, example.spec.role)
    assert pool, filename
    first = stack.plans[0]
    reference = stack.dynamics(first, first.idle_gpus[0])

    def simulated_now() -> float:
        (sample,) = stack.query(
            f'DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{{Hostname="{first.name}", '
            f'gpu="{first.idle_gpus[0]}"}}')
        return simulated_time_of(reference, float(sample["value"][1]))

    wait_until(lambda: simulated_now() > FOLLOWED[1] + 1, 90.0, 0.5,
               what=f"simulated time past {FOLLOWED[1]}s")
    start = time.time() - (simulated_now() - FOLLOWED[0])
    steps = stack.prometheus.query_range(gpu, start, start + FOLLOWED[1] - FOLLOWED[0], 1.0)
    (series,) = steps
    compared = []  # (trigger, simulated, simulated time)
    for at, value in series["values"]:
        expected, t = _simulated_percent(stack, example.spec.metric, pool, float(at))
        compared.append((float(value), expected, t))
    off = [(round(v, 2), round(e, 2)) for v, e, _ in compared if abs(v - e) > SLACK_PERCENT]
    assert off == [], f"{filename}: (trigger, simulated) off by more than {SLACK_PERCENT}"
    before = [v for v, _, t in compared if t < IDLE_AT_S]
    idle = [v for v, _, t in compared if IDLE_AT_S + 1.2 <= t < IDLE_AT_S + IDLE_FOR_S]
    after = [v for v, _, t in compared if t > IDLE_AT_S + IDLE_FOR_S + 1]
    assert len(before) >= 2, f"the first scrape came after {IDLE_AT_S - 2}s: {compared}"
    assert len(idle) >= 2, compared
    assert len(after) >= 1, compared
    assert max(before) > 1.0, compared
    if example.spec.role is not None:  # the pool is one GPU, idle for a while
        assert idle == [0.0] * len(idle), compared
        assert max(after) > 0.0, compared


def test_role_and_queue_panels_split_the_fleet(stack: Stack) -> None:
    """Every per-role line is prefill or decode (both present), every per-queue line a queue
    of the planned pods."""
    path = next(p for p in DASHBOARDS if p.name == "gpu-inference-autoscaling.json")
    queues = {h.labels[QUEUE.sources[0].key] for plan in stack.plans for h in plan.holders}
    seen: dict[str, set[str]] = {"role": set(), "kai_scheduler_queue": set()}
    for panel in dashboard_panels(path):
        found: dict[str, set[str]] = {}
        for target in panel.targets:
            label = next((n for n in seen if f"{{{{{n}}}}}" in target.legend), None)
            if label is not None:
                series = stack.query(substitute(target.expr, VARIABLES))
                found.setdefault(label, set()).update(s["metric"].get(label, "")
                                                      for s in series)
        for label, values in found.items():
            assert values, (panel.title, label)  # (a MIG line may be empty: no MIG here)
            assert values <= ({"prefill", "decode"} if label == "role" else queues), \
                (panel.title, values)
            seen[label] |= values
    assert seen == {"role": {"prefill", "decode"}, "kai_scheduler_queue": queues}

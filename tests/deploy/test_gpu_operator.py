"""The GPU Operator drop-in: set `dcgmExporter.repository/image/version` to our image and the
operator's DaemonSet keeps working.

The image is read from our Dockerfile; the DaemonSet is what the operator renders from its
own assets (tests/fixtures/gpu-operator) for a ClusterPolicy; each case starts the exporter
exactly as that container spec would on a simulated node (operator_node.py lists what stands
in for the node and the liberties taken: container paths re-rooted under a temporary
directory, port 9400 published on a free port).
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from exporter import __version__
from exporter.fields.catalog import MetricType
from exporter.fields.csv import parse_collectors

from .operator_node import (
    DRA_CLAIM,
    DRA_DEVICE,
    DRA_DRIVER,
    DRA_POD,
    EXCLUSIVE_POD,
    NODE_NAME,
    SHARED_PODS,
    pod_uid,
    start_cluster,
    start_container,
)
from .operator_render import (
    DOCKERFILE,
    OUR_IMAGE,
    ImageSpec,
    Obj,
    Policy,
    RenderError,
    env_value,
    golden_daemonsets,
    helm_default_policy,
    image_path,
    read_dockerfile,
    render_exporter_daemonset,
    sample_cluster_policy,
)
from .operator_runs import UPSTREAM_DEFAULT_COLLECTORS, Case, Runs

# A user's ConfigMap for `dcgmExporter.config.name`, under the key the operator mounts.
CUSTOM_CONFIGMAP = "custom-dcgm-exporter-metrics"
CUSTOM_METRICS = """\
# Our team's short list
DCGM_FI_DEV_SM_CLOCK,   gauge, SM clock of the team list (MHz).
DCGM_FI_DEV_GPU_TEMP,   gauge, GPU temperature of the team list (C).
DCGM_FI_DEV_FB_USED,    gauge, Framebuffer in use of the team list (MiB).
"""
HPC_JOB = "slurm-4242"

FAST_POLLS = {"name": "DCGM_EXPORTER_INTERVAL", "value": "1000"}
"""A ClusterPolicy `env` item: profiling fields are rates between two polls, so every case
but the untouched default polls each second instead of waiting for the 15 s default."""


def _fast(policy: Policy) -> Policy:
    return policy.with_exporter(env=[*(policy.exporter.get("env") or []), FAST_POLLS])


def _golden_daemonset(name: str) -> Obj:
    (daemonset,) = golden_daemonsets(name)
    daemonset = copy.deepcopy(daemonset)
    container = daemonset["spec"]["template"]["spec"]["containers"][0]
    # Rendered by the operator's tests with a test tag; the GPUCluster takes ours the same way.
    container["image"] = image_path(OUR_IMAGE)
    container["env"].append(dict(FAST_POLLS))  # as the operator appends `env` items
    return daemonset


DEFAULT = helm_default_policy().with_our_image()
"""The chart's values: no hostengine of its own (dcgm.enabled false)."""
SAMPLE = sample_cluster_policy().with_our_image()
"""The operator's sample ClusterPolicy: dcgm.enabled, so DCGM_REMOTE_HOSTENGINE_INFO is set."""
FAST = _fast(DEFAULT)
CASES: dict[str, Case] = {
    "default": Case(lambda: render_exporter_daemonset(DEFAULT)),
    "config-name": Case(
        lambda: render_exporter_daemonset(FAST.with_exporter(config={"name": CUSTOM_CONFIGMAP})),
        configmaps={CUSTOM_CONFIGMAP: {"dcgm-metrics.csv": CUSTOM_METRICS}}),
    "dcgm-enabled": Case(lambda: render_exporter_daemonset(_fast(SAMPLE))),
    "args": Case(lambda: render_exporter_daemonset(DEFAULT.with_exporter(
        args=["-f", "/etc/dcgm-exporter/default-counters.csv", "-c", "1000"]))),
    "args-xid-window": Case(lambda: render_exporter_daemonset(DEFAULT.with_exporter(
        args=["-f", "/etc/dcgm-exporter/default-counters.csv", "-c", "1000", "-x", "60000"]))),
    "pod-labels": Case(lambda: render_exporter_daemonset(FAST.with_exporter(
        enablePodLabels=True, enablePodUID=True,
        podLabelAllowlistRegex=["^app$", r"^llm-d\.ai/.*$"]))),
    "hpc-job-mapping": Case(
        lambda: render_exporter_daemonset(FAST.with_exporter(hpcJobMapping={"enabled": True})),
        host_files={"/var/lib/dcgm-exporter/job-mapping/0": f"{HPC_JOB}\n"}),
    "dra-pod-metadata": Case(
        lambda: _golden_daemonset("golden-gpucluster-dcgm-exporter-pod-metadata.yaml")),
    "dra-remote-engine": Case(
        lambda: _golden_daemonset("golden-gpucluster-dcgm-exporter-remote-engine.yaml")),
}
DRA_CASES = ("dra-pod-metadata", "dra-remote-engine")


def _starting(case_id: str) -> object:
    return pytest.param(case_id)


STARTING = [_starting(c) for c in CASES]


@pytest.fixture(scope="module")
def image() -> ImageSpec:
    return read_dockerfile(DOCKERFILE)


@pytest.fixture(scope="module")
def runs(image: ImageSpec, nvmlsim_lib: Path) -> Iterator[Runs]:
    cluster = start_cluster()
    started = Runs(CASES, nvmlsim_lib, image, cluster)
    try:
        yield started
    finally:
        started.close()
        cluster.stop()


# ----------------------------------------------------------------------------- rendering


def _container(daemonset: Obj) -> Obj:
    container: Obj = daemonset["spec"]["template"]["spec"]["containers"][0]
    return container


def test_the_chart_default_renders_a_container_with_no_args_and_four_env_vars() -> None:
    daemonset = render_exporter_daemonset(DEFAULT)
    container = _container(daemonset)
    assert container["image"] == f"registry.example.com/platform/gpu-exporter:{__version__}"
    assert "args" not in container
    assert "command" not in container
    assert [e["name"] for e in container["env"]] == [
        "DCGM_EXPORTER_LISTEN", "DCGM_EXPORTER_KUBERNETES", "DCGM_EXPORTER_COLLECTORS",
        "NODE_NAME"]
    assert daemonset["spec"]["template"]["spec"]["automountServiceAccountToken"] is False


def test_policy_transforms_reach_the_container() -> None:
    sample = _container(render_exporter_daemonset(SAMPLE))
    assert env_value(sample, "DCGM_REMOTE_HOSTENGINE_INFO") == "nvidia-dcgm:5555"

    custom = render_exporter_daemonset(DEFAULT.with_exporter(config={"name": CUSTOM_CONFIGMAP}))
    assert env_value(_container(custom), "DCGM_EXPORTER_COLLECTORS") == \
        "/etc/dcgm-exporter/dcgm-metrics.csv"
    assert {"name": "metrics-config", "readOnly": True,
            "mountPath": "/etc/dcgm-exporter/dcgm-metrics.csv",
            "subPath": "dcgm-metrics.csv"} in _container(custom)["volumeMounts"]

    labels = render_exporter_daemonset(DEFAULT.with_exporter(
        enablePodLabels=True, podLabelAllowlistRegex=["^app$", "^team$"]))
    assert env_value(_container(labels), "DCGM_EXPORTER_KUBERNETES_ENABLE_POD_LABELS") == "true"
    assert env_value(_container(labels),
                     "DCGM_EXPORTER_KUBERNETES_POD_LABEL_ALLOWLIST_REGEX") == "^app$,^team$"
    assert labels["spec"]["template"]["spec"]["automountServiceAccountToken"] is True

    # `env` comes last and wins, even over config.name's collectors path.
    both = render_exporter_daemonset(DEFAULT.with_exporter(
        config={"name": CUSTOM_CONFIGMAP},
        env=[{"name": "DCGM_EXPORTER_COLLECTORS", "value": UPSTREAM_DEFAULT_COLLECTORS}]))
    assert env_value(_container(both), "DCGM_EXPORTER_COLLECTORS") == \
        UPSTREAM_DEFAULT_COLLECTORS

    with pytest.raises(RenderError, match="must all be set"):
        image_path({"repository": "registry.example.com", "image": "gpu-exporter"})
    assert image_path({**OUR_IMAGE, "version": "sha256:ab12"}).endswith("gpu-exporter@sha256:ab12")


def test_the_dra_goldens_enable_dra() -> None:
    for case_id in DRA_CASES:
        assert env_value(_container(CASES[case_id].daemonset()), "KUBERNETES_ENABLE_DRA") == \
            "true"


def test_an_image_without_the_csv_directory_cannot_take_the_configmap(tmp_path: Path) -> None:
    dockerfile = tmp_path / "Dockerfile"
    dockerfile.write_text("\n".join(line for line in DOCKERFILE.read_text().splitlines()
                                    if "/etc/dcgm-exporter/" not in line))
    image = read_dockerfile(dockerfile)
    daemonset = render_exporter_daemonset(DEFAULT.with_exporter(config={"name": CUSTOM_CONFIGMAP}))
    with pytest.raises(RenderError, match="no directory dcgm-exporter"):
        start_container(daemonset, image, tmp_path, lib_dir=tmp_path, scenario=tmp_path,
                        cluster=None, configmaps=CASES["config-name"].configmaps)


# ----------------------------------------------------------------------------- running it


@pytest.mark.parametrize("case_id", STARTING)
def test_health_answers_within_the_probe_budget(runs: Runs, case_id: str) -> None:
    run = runs.get(case_id)
    # The operator's probes: /health, 45 s initial delay, 1 s timeout. Measured from the
    # process start; a few seconds here even on a busy machine.
    assert run.process.probe_paths == ["/health", "/health"]
    assert run.health_after_s < 45


@pytest.mark.parametrize("case_id", STARTING)
def test_metrics_serve_the_configured_csv(runs: Runs, case_id: str) -> None:
    run = runs.get(case_id)
    collectors = parse_collectors(run.collectors_path().read_text(), "configured CSV")
    wanted = {f.spec.name: f.help for f in collectors.fields if f.type is not MetricType.LABEL}
    # Every field of the file the container names, with that file's help text (so it was
    # the image's file that was read), and nothing else. Profiling fields are rates: they
    # come with the second poll.
    text = run.wait_for_metrics(lambda names: set(wanted) <= names)
    served = set(re.findall(r"^(DCGM_\w+)[{ ]", text, flags=re.MULTILINE))
    assert served == set(wanted)
    helps = dict(re.findall(r"^# HELP (DCGM_\w+) (.*)$", text, flags=re.MULTILINE))
    assert {name: helps[name] for name in wanted} == wanted
    # Each label field of the file labels every DCGM series (none: nothing to look for).
    label_fields = [f.spec.name for f in collectors.fields if f.type is MetricType.LABEL]
    dcgm_series = [(name, labels) for name, labels, _ in run.samples()
                   if name.startswith("DCGM_FI_")]
    assert dcgm_series
    unlabelled = [(name, labels) for name, labels in dcgm_series
                  if not all(label in labels for label in label_fields)]
    assert unlabelled == []


@pytest.mark.parametrize("case_id", STARTING)
def test_pods_holding_gpus_through_the_device_plugin_label_them(runs: Runs,
                                                                case_id: str) -> None:
    run = runs.get(case_id)
    namespace, pod, container = EXCLUSIVE_POD
    exclusive = run.labelled_gpu_series("0", "pod")
    assert exclusive
    assert all(
        (s.get("namespace"), s.get("pod"), s.get("container")) == (namespace, pod, container)
        for s in exclusive)
    # A time-sliced GPU has several holders: its series carry none, and each holder has an
    # allocation row to join on.
    time_sliced = run.gpu_series("1")
    assert time_sliced
    assert all("pod" not in s for s in time_sliced)
    holders = {(labels["namespace"], labels["pod"], labels["container"])
               for name, labels, _ in run.samples()
               if name == "gpu_exporter_pod_gpu_allocation" and labels.get("gpu") == "1"}
    assert holders == set(SHARED_PODS)
    if case_id not in DRA_CASES:
        # Without DRA mapping a claimed GPU is not attributed (dcgm-exporter's behaviour).
        claimed = run.gpu_series("2")
        assert claimed
        assert all("pod" not in s for s in claimed)


def test_args_are_dcgm_flags_without_a_subcommand(runs: Runs) -> None:
    run = runs.get("args")
    assert run.container["args"][0] == "-f"
    interval = [v for name, _, v in run.samples()
                if name == "gpu_exporter_collect_interval_seconds"]
    assert interval == [1.0]  # -c 1000: milliseconds, as dcgm-exporter reads it


def test_the_sample_policys_remote_hostengine_is_not_fatal(runs: Runs) -> None:
    run = runs.get("dcgm-enabled")
    assert run.process.env["DCGM_REMOTE_HOSTENGINE_INFO"] == "nvidia-dcgm:5555"
    assert run.process.proc.poll() is None


def test_pod_labels_follow_the_allow_list(runs: Runs) -> None:
    series = runs.get("pod-labels").labelled_gpu_series("0", "app")
    assert series
    for labels in series:
        assert labels.get("app") == "llm"
        assert labels.get("llm_d_ai_role") == "prefill"  # upstream's sanitised key
        assert "pod_template_hash" not in labels


def test_pod_uid_label(runs: Runs) -> None:
    namespace, pod, _ = EXCLUSIVE_POD
    series = runs.get("pod-labels").labelled_gpu_series("0", "pod_uid")
    assert series
    assert all(s.get("pod_uid") == pod_uid(namespace, pod) for s in series)


def test_the_dra_pod_metadata_golden_copies_every_pod_label(runs: Runs) -> None:
    series = runs.get("dra-pod-metadata").labelled_gpu_series("0", "app")
    assert series
    for labels in series:
        assert (labels.get("app"), labels.get("llm_d_ai_role"),
                labels.get("pod_template_hash")) == ("llm", "prefill", "7d9c5b8f4")


@pytest.mark.parametrize("case_id", DRA_CASES)
def test_a_gpu_claimed_through_dra_is_attributed(runs: Runs, case_id: str) -> None:
    namespace, pod, container = DRA_POD
    series = runs.get(case_id).labelled_gpu_series("2", "dra_claim_name")
    assert series
    for labels in series:
        assert (labels.get("namespace"), labels.get("pod"), labels.get("container")) == \
            (namespace, pod, container)
        assert labels.get("dra_claim_name") == DRA_CLAIM
        assert labels.get("dra_claim_namespace") == namespace
        assert labels.get("dra_driver_name") == DRA_DRIVER
        assert labels.get("dra_pool_name") == NODE_NAME
        assert labels.get("dra_device_name") == DRA_DEVICE


def test_hpc_job_mapping_labels_the_gpu(runs: Runs) -> None:
    series = runs.get("hpc-job-mapping").labelled_gpu_series("0", "hpc_job")
    assert series
    assert all(s.get("hpc_job") == HPC_JOB for s in series)

"""The chart's DaemonSet container, as Helm renders it, started on a simulated GPU node
(tests/chart/runtime.py): over the simulated NVML library and a real pod-resources gRPC
server on the mounted socket, it serves the fields it is configured with and labels the GPUs
with the pods holding them and the pod labels it was asked for.

Each case renders a values file: the chart's defaults, dcgm-exporter's values.yaml as it is
(image aside), and the feature values of tests/chart/values. All but dcgm-exporter's own poll
every second (GPU_EXPORTER_COLLECT_INTERVAL through extraEnv): profiling fields are rates
between two polls, and the default waits 15 s for the second.
"""

from __future__ import annotations

import base64
import re
import socket
import ssl
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from exporter.fields.catalog import MetricType
from exporter.fields.csv import default_collectors_path, parse_collectors
from tests.deploy.operator_node import (
    DRA_CLAIM,
    DRA_DEVICE,
    DRA_DRIVER,
    DRA_POD,
    EXCLUSIVE_POD,
    NODE_NAME,
    SHARED_PODS,
    pod_uid,
    start_cluster,
)
from tests.deploy.operator_render import under
from tests.deploy.operator_runs import Run

from ._chart import CHART, Obj, env, exporter, merged, objects, one, upstream_values, values_file
from .runtime import Release, Releases

FAST = {"extraEnv": [{"name": "GPU_EXPORTER_COLLECT_INTERVAL", "value": "1s"}]}


def _feature(name: str) -> Callable[[], Release]:
    return lambda: Release(objects(merged(values_file(name), FAST)))


CASES: dict[str, Callable[[], Release]] = {
    "defaults": lambda: Release(objects(FAST)),
    "upstream": lambda: Release(objects(upstream_values())),
    "pod-labels": lambda: Release(objects(merged(merged(upstream_values(),
                                                        values_file("pod-labels")), FAST))),
    "presets": _feature("presets"),
    "dra": _feature("dra"),
    "tls": _feature("tls"),
    "basic-auth": _feature("basic-auth"),
    "custom-metrics": _feature("custom-metrics"),
}
SERVING = [c for c in CASES if c not in ("tls", "basic-auth")]
"""Cases whose /metrics a plain, unauthenticated GET reads."""


@pytest.fixture(scope="module")
def releases(nvmlsim_lib: Path) -> Iterator[Releases]:
    cluster = start_cluster()
    started = Releases(CASES, nvmlsim_lib, cluster)
    try:
        yield started
    finally:
        started.close()
        cluster.stop()


def _configured_csv(run: Run) -> Path:
    """The CSV the container names: the last -f/--collectors argument, else the collectors
    variable, else the exporter's built-in list (container paths under the run's root)."""
    container = run.container
    args = [str(a) for a in container.get("args", [])]
    path: str | None = None
    for i, arg in enumerate(args):
        if arg in ("-f", "--collectors") and i + 1 < len(args):
            path = args[i + 1]
    variables = env(container)
    path = path or variables.get("GPU_EXPORTER_COLLECTORS") or \
        variables.get("DCGM_EXPORTER_COLLECTORS")
    return default_collectors_path() if path is None else under(run.process.root, path)


# ----------------------------------------------------------------------------- serving


def _listed(path: Path) -> dict[str, str]:
    """Field -> help text of the series a CSV asks for (label fields make no series)."""
    collectors = parse_collectors(path.read_text(), str(path))
    return {f.spec.name: f.help for f in collectors.fields if f.type is not MetricType.LABEL}


DCGM_EXPORTERS_LIST = CHART / "files" / "dcgm-exporter-chart-counters.csv"


@pytest.mark.parametrize("case_id", SERVING)
def test_it_serves_the_fields_it_is_configured_with(releases: Releases, case_id: str) -> None:
    run = releases.get(case_id)
    wanted = _listed(_configured_csv(run))
    # Each case's node serves every field of dcgm-exporter's chart list; the built-in list
    # also has fields that appear only after an event (an XID, an NVLink error).
    expected = set(wanted) & set(_listed(DCGM_EXPORTERS_LIST)) if \
        _configured_csv(run) == default_collectors_path() else set(wanted)
    text = run.wait_for_metrics(lambda names: expected <= names)
    served = set(re.findall(r"^(DCGM_\w+)[{ ]", text, flags=re.MULTILINE))
    assert expected <= served <= set(wanted)
    # The help texts say which file was read.
    helps = dict(re.findall(r"^# HELP (DCGM_\w+) (.*)$", text, flags=re.MULTILINE))
    assert {name: helps[name] for name in served} == {name: wanted[name] for name in served}


def test_dcgm_exporters_values_serve_the_list_its_chart_mounts(releases: Releases) -> None:
    run = releases.get("upstream")
    assert _configured_csv(run) == run.process.root / "etc/dcgm-exporter/default-counters.csv"
    config_map = next(c for c in objects(upstream_values()) if c["kind"] == "ConfigMap")
    assert _configured_csv(run).read_text() == config_map["data"]["metrics"]


def test_custom_metrics_are_what_is_served(releases: Releases) -> None:
    run = releases.get("custom-metrics")
    assert _configured_csv(run).read_text() == values_file("custom-metrics")["customMetrics"]


@pytest.mark.parametrize("case_id", SERVING)
def test_gpus_are_labelled_with_the_pods_holding_them(releases: Releases, case_id: str) -> None:
    run = releases.get(case_id)
    namespace, pod, container = EXCLUSIVE_POD
    exclusive = run.labelled_gpu_series("0", "pod")
    assert exclusive
    assert all((s.get("namespace"), s.get("pod"), s.get("container")) ==
               (namespace, pod, container) for s in exclusive)
    assert all(s.get("Hostname") == NODE_NAME for s in exclusive)  # NODE_NAME, downward API
    holders = {(labels["namespace"], labels["pod"], labels["container"])
               for name, labels, _ in run.samples()
               if name == "gpu_exporter_pod_gpu_allocation" and labels.get("gpu") == "1"}
    assert holders == set(SHARED_PODS)


def test_dcgm_exporters_pod_label_values_copy_the_allowed_labels(releases: Releases) -> None:
    run = releases.get("pod-labels")
    namespace, pod, _ = EXCLUSIVE_POD
    series = run.labelled_gpu_series("0", "pod_uid")
    assert series
    for labels in series:
        assert labels.get("app") == "llm"
        assert labels.get("llm_d_ai_role") == "prefill"
        assert labels.get("pod_uid") == pod_uid(namespace, pod)
        assert "pod_template_hash" not in labels  # not on the allow-list


def test_the_inference_preset_copies_the_role(releases: Releases) -> None:
    series = releases.get("presets").labelled_gpu_series("0", "llm_d_ai_role")
    assert series
    for labels in series:
        assert labels.get("llm_d_ai_role") == "prefill"
        assert "app" not in labels  # not a preset's key


def test_a_gpu_claimed_through_dra_is_attributed(releases: Releases) -> None:
    namespace, pod, container = DRA_POD
    series = releases.get("dra").labelled_gpu_series("2", "dra_claim_name")
    assert series
    for labels in series:
        assert (labels.get("namespace"), labels.get("pod"), labels.get("container")) == \
            (namespace, pod, container)
        assert (labels.get("dra_claim_name"), labels.get("dra_driver_name"),
                labels.get("dra_device_name")) == (DRA_CLAIM, DRA_DRIVER, DRA_DEVICE)


def test_without_api_access_the_defaults_copy_no_pod_labels(releases: Releases) -> None:
    run = releases.get("defaults")
    assert "KUBECONFIG" not in run.process.env  # no token mounted: no API client
    for labels in run.labelled_gpu_series("0", "pod"):
        assert not {"app", "pod_uid", "llm_d_ai_role"} & labels.keys()


# ----------------------------------------------------------------------------- securing it


def _https_get(port: int, ca: Path, server_name: str) -> tuple[int, bytes]:
    """GET /metrics over TLS, checking the certificate for `server_name` (what the
    ServiceMonitor's tlsConfig.serverName makes Prometheus check) against `ca`."""
    context = ssl.create_default_context(cafile=str(ca))
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw, \
            context.wrap_socket(raw, server_hostname=server_name) as tls:
        tls.sendall(b"GET /metrics HTTP/1.1\r\nHost: exporter\r\nConnection: close\r\n\r\n")
        chunks = []
        while chunk := tls.recv(65536):
            chunks.append(chunk)
    head, _, body = b"".join(chunks).partition(b"\r\n\r\n")
    return int(head.split()[1]), body


def test_tls_serves_the_certificate_the_chart_made(releases: Releases) -> None:
    run = releases.get("tls")
    objs = releases.release("tls").objects
    endpoint = one(objs, "ServiceMonitor")["spec"]["endpoints"][0]
    tls_config = endpoint["tlsConfig"]
    secret = one(objs, "Secret")
    ca = run.process.root / "scraper-ca.crt"
    ca.write_bytes(base64.b64decode(secret["data"][tls_config["ca"]["secret"]["key"]]))
    status, body = _https_get(run.process.port, ca, tls_config["serverName"])
    assert status == 200
    assert b"DCGM_FI_DEV_GPU_UTIL{" in body
    # Plain HTTP: the probes' two paths only.
    assert run.process.get("/health")[0] == 200
    assert run.process.get("/metrics")[0] == 400
    with pytest.raises(ssl.SSLCertVerificationError):
        _https_get(run.process.port, ca, "someone-else")


def _get_with(port: int, auth: tuple[str, str] | None) -> int:
    request = urllib.request.Request(f"http://127.0.0.1:{port}/metrics")
    if auth is not None:
        token = base64.b64encode(f"{auth[0]}:{auth[1]}".encode()).decode()
        request.add_header("Authorization", f"Basic {token}")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            status: int = response.status
            return status
    except urllib.error.HTTPError as exc:
        return exc.code


def test_basic_auth_lets_in_the_users_of_the_values(releases: Releases) -> None:
    run = releases.get("basic-auth")
    users: dict[str, str] = values_file("basic-auth")["basicAuth"]["users"]
    for user, password in users.items():
        assert _get_with(run.process.port, (user, password)) == 200
    assert _get_with(run.process.port, ("prometheus", "other-secret")) == 401
    assert _get_with(run.process.port, None) == 401
    assert run.process.get("/ready")[0] == 200  # probes need no password


def test_the_container_ran_as_rendered(releases: Releases) -> None:
    """What was started is the rendered container: its env reached the process (the
    harness's liberties aside), and its mounts are where the spec says."""
    run = releases.get("upstream")
    container: Obj = exporter(objects(upstream_values()))
    for name, value in env(container).items():
        if not value.startswith("/") and name != "DCGM_EXPORTER_LISTEN":
            assert run.process.env[name] == value, name
    for mount in container["volumeMounts"]:
        assert under(run.process.root, mount["mountPath"]).exists(), mount

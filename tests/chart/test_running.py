"""The chart's DaemonSet container, as Helm renders it, run from this checkout's image under
podman on a simulated GPU node (tests/chart/runtime.py): over the simulated NVML library and
a real pod-resources gRPC server on the mounted socket, it serves the fields it is configured
with and labels the GPUs with the pods holding them and the pod labels it was asked for,
reading them from an API server with the token and CA the kubelet mounted.

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
import yaml

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
)
from tests.support.container import HOST_LOOPBACK
from tests.support.pod_container import SERVICE_ACCOUNT_DIR

from ._chart import (
    CHART,
    Obj,
    env,
    exporter,
    merged,
    objects,
    one,
    upstream_484_values,
    upstream_values,
    values_file,
)
from .runtime import ChartRun, Release, Releases

pytestmark = pytest.mark.timeout(1800)  # the first test of a run may build the image

FAST = {"extraEnv": [{"name": "GPU_EXPORTER_COLLECT_INTERVAL", "value": "1s"}]}


def _feature(name: str) -> Callable[[], Release]:
    return lambda: Release(objects(merged(values_file(name), FAST)))


CASES: dict[str, Callable[[], Release]] = {
    "defaults": lambda: Release(objects(FAST)),
    "upstream": lambda: Release(objects(upstream_values())),
    # 4.8.4's values as they are: the web timeouts always set, no args.
    "upstream-4.8.4": lambda: Release(objects(upstream_484_values())),
    # ... with its YAML config file mounted (its default, version 2) and named by
    # DCGM_EXPORTER_CONFIG_FILE; the explicitly set interval variable wins over the YAML's.
    "upstream-4.8.4-config": lambda: Release(objects(merged(
        merged(upstream_484_values(), {"config": {"enabled": True}}), FAST))),
    "pod-labels": lambda: Release(objects(merged(merged(upstream_values(),
                                                        values_file("pod-labels")), FAST))),
    "presets": _feature("presets"),
    "dra": _feature("dra"),
    "tls": _feature("tls"),
    "basic-auth": _feature("basic-auth"),
    "custom-metrics": _feature("custom-metrics"),
}
SERVING = [c for c in CASES if c not in ("tls", "basic-auth", "upstream-4.8.4-config")]
"""Cases whose /metrics a plain, unauthenticated GET reads (the config file's case names its
CSV in the YAML, which its own test reads)."""


@pytest.fixture(scope="module")
def releases(built_image: str, nvmlsim_lib: Path) -> Iterator[Releases]:
    started = Releases(CASES, built_image, nvmlsim_lib)
    try:
        yield started
    finally:
        started.close()


def _configured_csv(run: ChartRun) -> str | None:
    """The CSV the container names: the last -f/--collectors argument, else the collectors
    variable; None: the exporter's built-in list."""
    container = run.container
    args = [str(a) for a in container.get("args", [])]
    path: str | None = None
    for i, arg in enumerate(args):
        if arg in ("-f", "--collectors") and i + 1 < len(args):
            path = args[i + 1]
    variables = env(container)
    return path or variables.get("GPU_EXPORTER_COLLECTORS") or \
        variables.get("DCGM_EXPORTER_COLLECTORS")


def _configured_text(run: ChartRun) -> str:
    """The configured CSV as the exporter reads it: through the container's own root (its
    mounts, else the image's file), or the built-in list of the package the image holds."""
    path = _configured_csv(run)
    if path is None:
        return default_collectors_path().read_text()
    return run.running.path(path).read_text()


# ----------------------------------------------------------------------------- serving


def _listed(text: str) -> dict[str, str]:
    """Field -> help text of the series a CSV asks for (label fields make no series)."""
    collectors = parse_collectors(text, "the configured list")
    return {f.spec.name: f.help for f in collectors.fields if f.type is not MetricType.LABEL}


DCGM_EXPORTERS_LIST = CHART / "files" / "dcgm-exporter-chart-counters.csv"


@pytest.mark.parametrize("case_id", SERVING)
def test_it_serves_the_fields_it_is_configured_with(releases: Releases, case_id: str) -> None:
    run = releases.get(case_id)
    wanted = _listed(_configured_text(run))
    # Each case's node serves every field of dcgm-exporter's chart list; the built-in list
    # also has fields that appear only after an event (an XID, an NVLink error).
    expected = set(wanted) & set(_listed(DCGM_EXPORTERS_LIST.read_text())) if \
        _configured_csv(run) is None else set(wanted)
    text = run.wait_for_metrics(lambda names: expected <= names)
    served = set(re.findall(r"^(DCGM_\w+)[{ ]", text, flags=re.MULTILINE))
    assert expected <= served <= set(wanted)
    # The help texts say which file was read.
    helps = dict(re.findall(r"^# HELP (DCGM_\w+) (.*)$", text, flags=re.MULTILINE))
    assert {name: helps[name] for name in served} == {name: wanted[name] for name in served}


def test_dcgm_exporters_values_serve_the_list_its_chart_mounts(releases: Releases) -> None:
    run = releases.get("upstream")
    assert _configured_csv(run) == "/etc/dcgm-exporter/default-counters.csv"
    config_map = next(c for c in objects(upstream_values()) if c["kind"] == "ConfigMap")
    # The ConfigMap's file, subPath-mounted over the image's own list of that name.
    assert _configured_text(run) == config_map["data"]["metrics"]
    assert "/etc/dcgm-exporter/default-counters.csv" in run.running.mounts()


def test_dcgm_exporter_484s_config_file_is_read(releases: Releases) -> None:
    run = releases.get("upstream-4.8.4-config")
    variables = env(run.container)
    assert variables["DCGM_EXPORTER_CONFIG_FILE"] == "/etc/dcgm-exporter/config.yaml"
    assert {"DCGM_EXPORTER_WEB_READ_TIMEOUT", "DCGM_EXPORTER_WEB_WRITE_TIMEOUT"} <= set(variables)
    config = yaml.safe_load(run.running.path("/etc/dcgm-exporter/config.yaml").read_text())
    assert config["version"] == 2
    # The YAML's metrics.file, /etc/dcgm-exporter/default-counters.csv, is the chart's
    # metrics ConfigMap mounted over the image's file of that name: its rows and help texts,
    # not the built-in list's, are what is served.
    wanted = _listed(run.running.path(config["metrics"]["file"]).read_text())
    built_in = _listed(default_collectors_path().read_text())
    energy = "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"
    assert wanted[energy] != built_in[energy]  # so its help says which file was read
    expected = set(wanted) & set(_listed(DCGM_EXPORTERS_LIST.read_text())) | {energy}
    text = run.wait_for_metrics(lambda names: expected <= names)
    helps = dict(re.findall(r"^# HELP (DCGM_\w+) (.*)$", text, flags=re.MULTILINE))
    assert expected <= set(helps) <= set(wanted)
    assert {name: helps[name] for name in expected} == {name: wanted[name] for name in expected}


def test_custom_metrics_are_what_is_served(releases: Releases) -> None:
    run = releases.get("custom-metrics")
    assert _configured_text(run) == values_file("custom-metrics")["customMetrics"]


@pytest.mark.parametrize("case_id", SERVING)
def test_gpus_are_labelled_with_the_pods_holding_them(releases: Releases, case_id: str) -> None:
    run = releases.get(case_id)
    namespace, pod, container = EXCLUSIVE_POD
    exclusive = run.labelled_gpu_series("0", "pod")
    assert exclusive
    assert all((s.get("namespace"), s.get("pod"), s.get("container")) ==
               (namespace, pod, container) for s in exclusive)
    assert all(s.get("hostname") == NODE_NAME for s in exclusive)  # NODE_NAME, downward API
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


def test_pods_that_call_the_api_server_use_the_mounted_token(releases: Releases) -> None:
    """The pod-label and DRA cases reach the API server only through the kubelet's mounts:
    the Service's address, the token (the server refuses any other) and the CA."""
    for case_id in ("pod-labels", "presets", "dra"):
        run = releases.get(case_id)
        assert run.release.daemonset["spec"]["template"]["spec"][
            "automountServiceAccountToken"] is True
        assert SERVICE_ACCOUNT_DIR in run.running.mounts()
        token = run.running.path(f"{SERVICE_ACCOUNT_DIR}/token").read_text()
        assert token == releases.cluster.access.token
        assert run.running.environ()["KUBERNETES_SERVICE_HOST"] == HOST_LOOPBACK
        assert "KUBECONFIG" not in run.running.environ()
    assert releases.cluster.server.state.unauthorized == 0


def test_without_api_access_the_defaults_copy_no_pod_labels(releases: Releases) -> None:
    run = releases.get("defaults")
    assert SERVICE_ACCOUNT_DIR not in run.running.mounts()  # no token: no API client
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


def test_tls_serves_the_certificate_the_chart_made(releases: Releases, tmp_path: Path) -> None:
    run = releases.get("tls")
    objs = releases.release("tls").objects
    endpoint = one(objs, "ServiceMonitor")["spec"]["endpoints"][0]
    tls_config = endpoint["tlsConfig"]
    secret = one(objs, "Secret")
    ca = tmp_path / "scraper-ca.crt"
    ca.write_bytes(base64.b64decode(secret["data"][tls_config["ca"]["secret"]["key"]]))
    status, body = _https_get(run.port, ca, tls_config["serverName"])
    assert status == 200
    assert b"DCGM_FI_DEV_GPU_UTIL{" in body
    # Plain HTTP: the probes' two paths only.
    assert run.get("/health")[0] == 200
    assert run.get("/metrics")[0] == 400
    with pytest.raises(ssl.SSLCertVerificationError):
        _https_get(run.port, ca, "someone-else")


def test_the_tls_secret_is_mounted_with_its_mode(releases: Releases) -> None:
    """The key is read from the Secret's volume as the kubelet writes it: mode 0440 (the
    chart's defaultMode), owned by root, the container's user, which has no capability to
    read past a file's mode."""
    run = releases.get("tls")
    volumes = {v["name"]: v for v in
               run.release.daemonset["spec"]["template"]["spec"]["volumes"]}
    assert volumes["tls"]["secret"]["defaultMode"] == 0o440
    (mount,) = [m for m in run.container["volumeMounts"] if m["name"] == "tls"]
    key = run.running.path(f"{mount['mountPath']}/tls.key")
    assert key.is_symlink()  # through ..data, as the kubelet's atomic writer lays it out
    assert oct(key.stat().st_mode & 0o777) == oct(0o440)
    assert run.running.status()["CapEff"] == "0000000000000000"


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
        assert _get_with(run.port, (user, password)) == 200
    assert _get_with(run.port, ("prometheus", "other-secret")) == 401
    assert _get_with(run.port, None) == 401
    assert run.get("/ready")[0] == 200  # probes need no password


CAP_SYS_ADMIN = 21


def test_the_container_ran_as_rendered(releases: Releases) -> None:
    """What runs is the rendered container, as the kernel holds its process: the env it
    was given, its mounts where the spec says, its user, its read-only root and the one
    capability dcgm-exporter's values add, no privilege escalation, seccomp filtering."""
    run = releases.get("upstream")
    container: Obj = exporter(objects(upstream_values()))
    environ = run.running.environ()
    for name, value in env(container).items():
        assert environ[name] == value, name
    assert environ["NODE_NAME"] == NODE_NAME
    mounts = run.running.mounts()
    for mount in container["volumeMounts"]:
        assert mount["mountPath"] in mounts, mount
        if mount.get("readOnly"):
            assert mounts[mount["mountPath"]].split(",")[0] == "ro", mount
    assert mounts["/"].split(",")[0] == "ro"
    status = run.running.status()
    assert status["Uid"].split()[:2] == ["0", "0"]
    assert int(status["CapEff"], 16) == 1 << CAP_SYS_ADMIN
    assert int(status["CapBnd"], 16) == 1 << CAP_SYS_ADMIN
    assert status["NoNewPrivs"] == "1"
    assert status["Seccomp"] == "2"  # a filter: the runtime's default profile

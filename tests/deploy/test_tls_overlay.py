"""`deploy/daemonset/tls`: the exporter serves what the ServiceMonitor expects, and the
kubelet's probes still get through.

The kustomization (the chart rendered with tls/values.yaml, plus the certificates, web config
and scrape credentials beside it) is checked for consistency (the Secrets and certificates
that each side names, the example password against its hash), then its container is started
as a local process with its args and env, its mounted files laid out under a temporary
directory and certificates made as cert-manager would issue them: the probes answer over
plain HTTP, and a scrape set up as the ServiceMonitor says gets the metrics.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import bcrypt
import pytest
import yaml

from exporter.web.webconfig import parse_web_config
from tests.support.exporter_process import free_port
from tests.support.pki import Pki, make_pki
from tests.support.wait import wait_until
from tests.web.conftest import REFUSED, Client, Response

from ._manifests import (
    DEPLOY_DIR,
    REPO_ROOT,
    Obj,
    exporter_containers,
    of_kind,
    pod_spec,
    render_kustomization,
)

OVERLAY = DEPLOY_DIR / "daemonset" / "tls"


@pytest.fixture(scope="module")
def objs() -> list[Obj]:
    return render_kustomization(OVERLAY)


def _named(objs: list[Obj], kind: str, name: str) -> Obj:
    (found,) = [o for o in of_kind(objs, kind) if o["metadata"]["name"] == name]
    return found


def _container(objs: list[Obj]) -> Obj:
    ((container, _),) = exporter_containers(of_kind(objs, "DaemonSet")[0])
    return container


def _mounts(objs: list[Obj]) -> dict[str, str]:
    """mountPath -> Secret name, for the exporter's Secret volumes."""
    ds = of_kind(objs, "DaemonSet")[0]
    secrets = {v["name"]: v["secret"]["secretName"]
               for v in pod_spec(ds)["volumes"] if "secret" in v}
    return {m["mountPath"]: secrets[m["name"]]
            for m in _container(objs)["volumeMounts"] if m["name"] in secrets}


def _env(objs: list[Obj]) -> dict[str, str]:
    return {e["name"]: str(e["value"]) for e in _container(objs)["env"] if "value" in e}


def _web_config_text(objs: list[Obj]) -> tuple[str, str]:
    """(path in the container, text) of the web config the container names."""
    path = _env(objs)["DCGM_EXPORTER_WEB_CONFIG_FILE"]
    folder, _, key = path.rpartition("/")
    secret = _named(objs, "Secret", _mounts(objs)[folder])
    return path, secret["stringData"][key]


def _endpoint(objs: list[Obj]) -> dict[str, Any]:
    endpoint: dict[str, Any] = of_kind(objs, "ServiceMonitor")[0]["spec"]["endpoints"][0]
    return endpoint


def test_each_side_names_what_the_other_provides(objs: list[Obj]) -> None:
    path, text = _web_config_text(objs)
    config = parse_web_config(text, Path(path))
    tls = config.tls
    assert tls is not None
    assert tls.client_auth_type == "RequireAndVerifyClientCert"
    mounts = _mounts(objs)
    serving = _named(objs, "Certificate", "gpu-exporter-serving")["spec"]
    for file in (tls.cert_file, tls.key_file, tls.client_ca_file):
        assert file is not None, file
        assert mounts[str(file.parent)] == serving["secretName"], file

    endpoint = _endpoint(objs)
    assert endpoint["scheme"] == "https"
    scraper = _named(objs, "Certificate", "gpu-exporter-scraper")["spec"]
    tls_config = endpoint["tlsConfig"]
    assert {tls_config["ca"]["secret"]["name"], tls_config["cert"]["secret"]["name"],
            tls_config["keySecret"]["name"]} == {scraper["secretName"]}
    assert tls_config["serverName"] in serving["dnsNames"]
    assert "server auth" in serving["usages"]
    assert "client auth" in scraper["usages"]
    assert tls.client_allowed_sans is not None
    assert set(scraper["dnsNames"]) <= set(tls.client_allowed_sans)
    assert serving["issuerRef"] == scraper["issuerRef"]  # one CA: each side trusts the other

    auth = endpoint["basicAuth"]
    credentials = _named(objs, "Secret", auth["username"]["name"])["stringData"]
    user, password = credentials[auth["username"]["key"]], credentials[auth["password"]["key"]]
    assert bcrypt.checkpw(password.encode(), config.users[user].encode())


def test_probes_stay_plain_http_on_the_metrics_port(objs: list[Obj]) -> None:
    container = _container(objs)
    for kind, path in (("livenessProbe", "/health"), ("readinessProbe", "/ready")):
        probe = container[kind]["httpGet"]
        assert probe["path"] == path, kind
        assert probe.get("scheme", "HTTP") == "HTTP", kind


@pytest.fixture
def pki(tmp_path: Path) -> Pki:
    return make_pki(tmp_path)


@pytest.fixture
def running(objs: list[Obj], pki: Pki) -> Iterator[tuple[int, Path, tuple[str, str]]]:
    """The overlay's container as a local process; its Secret volumes under pki.folder."""
    root = pki.folder
    container_path, text = _web_config_text(objs)
    rerooted = text.replace("/etc/dcgm-exporter/", f"{root}/etc/dcgm-exporter/")
    web_config = root / container_path.lstrip("/")
    web_config.parent.mkdir(parents=True)
    web_config.write_text(rerooted)
    tls_dir = root / "etc/dcgm-exporter/tls"
    tls_dir.mkdir(parents=True)
    issued = pki.ca.server()
    (tls_dir / "tls.crt").write_bytes(issued.cert_pem)
    (tls_dir / "tls.key").write_bytes(issued.key_pem)
    (tls_dir / "ca.crt").write_bytes(pki.ca.pem)
    scraper = _named(objs, "Certificate", "gpu-exporter-scraper")["spec"]
    pki.ca.client(*scraper["dnsNames"]).write(root, "scraper")

    # The container's own args and env, with the web config at its re-rooted path.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DCGM_", "GPU_EXPORTER_"))}
    env.update(_env(objs), DCGM_EXPORTER_WEB_CONFIG_FILE=str(web_config), NODE_NAME="gpu-node-1")
    port = free_port()
    log = (root / "exporter.log").open("w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "exporter", *_container(objs).get("args", []), "--backend", "sim",
         "--sim.profile", "l4-1", "-a", f"127.0.0.1:{port}", "--kubernetes.pod-resources-socket",
         str(root / "kubelet.sock")], cwd=REPO_ROOT, env=env, stdout=log,
        stderr=subprocess.STDOUT)
    endpoint = _endpoint(objs)
    credentials = _named(objs, "Secret", endpoint["basicAuth"]["username"]["name"])
    creds = (credentials["stringData"]["username"], credentials["stringData"]["password"])
    try:
        yield port, root, creds
    finally:
        proc.terminate()
        proc.wait(15)
        log.close()


def test_probes_and_the_servicemonitor_scrape_get_through(
        running: tuple[int, Path, tuple[str, str]]) -> None:
    port, root, creds = running

    def probes_ok() -> bool:
        answers = [Client(port).get(p) for p in ("/health", "/ready")]
        return all(isinstance(a, Response) and a.status == 200 for a in answers)

    try:
        wait_until(probes_ok, 60, interval=0.25, what="the probes answering 200")
    except AssertionError:
        raise AssertionError((root / "exporter.log").read_text()[-2000:]) from None
    ca = root / "etc/dcgm-exporter/tls/ca.crt"
    scrape = Client(port, ca, (root / "scraper.crt", root / "scraper.key")).get(auth=creds)
    assert isinstance(scrape, Response)
    assert scrape.status == 200
    assert b"DCGM_FI_DEV_GPU_UTIL" in scrape.body
    assert scrape.headers["X-Content-Type-Options"] == "nosniff"
    assert Client(port, ca).get(auth=creds) == REFUSED  # no client certificate
    plain = Client(port).get(auth=creds)
    assert isinstance(plain, Response)
    assert plain.status == 400


def test_the_example_config_is_valid_yaml_for_the_toolkit(objs: list[Obj]) -> None:
    """Go's exporter-toolkit reads the same text: plain YAML, no anchors or tags."""
    _, text = _web_config_text(objs)
    assert set(yaml.safe_load(text)) == {"tls_server_config", "http_server_config",
                                         "basic_auth_users"}

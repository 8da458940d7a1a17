"""A real Prometheus scrapes the exporter over HTTPS with a client certificate and basic auth.

The exporter runs as users run it (`python -m exporter serve --web.config.file ...`) with
RequireAndVerifyClientCert, an allowed SAN and one user. Prometheus has one job per way of
knocking: everything right (`up` 1), a wrong password, no client certificate (both `up` 0).
"""

from __future__ import annotations

import json
import subprocess
import urllib.parse
from collections.abc import Iterator
from pathlib import Path

import bcrypt
import pytest
import yaml

from tests.support.exporter_process import ExporterProcess, answers, free_port, http_get
from tests.support.pki import Pki
from tests.support.requirements import require_tool
from tests.support.wait import wait_until
from tests.web.conftest import Client, Response

pytestmark = pytest.mark.e2e

PASSWORD = "scrape-me"


def _web_config(folder: Path, users: bool) -> Path:
    path = folder / ("web.yml" if users else "web-nousers.yml")
    text = ("tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n"
            "  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: ca.crt\n"
            "  client_allowed_sans: [prometheus.example]\n")
    if users:
        hashed = bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(10)).decode()
        text += f"basic_auth_users:\n  prometheus: {hashed}\n"
    path.write_text(text)
    return path


def _job(name: str, target: str, folder: Path, password: str, cert: bool) -> dict[str, object]:
    tls: dict[str, object] = {"ca_file": str(folder / "ca.crt")}
    if cert:
        tls |= {"cert_file": str(folder / "client.crt"), "key_file": str(folder / "client.key")}
    return {"job_name": name, "scheme": "https", "tls_config": tls,
            "basic_auth": {"username": "prometheus", "password": password},
            "static_configs": [{"targets": [target]}]}


@pytest.fixture
def prometheus(pki: Pki, exporter: type[ExporterProcess]) -> Iterator[tuple[str, Path]]:
    binary = require_tool("prometheus", "prometheus")
    folder = pki.folder
    pki.ca_file()
    pki.ca.server().write(folder, "server")
    pki.ca.client("prometheus.example").write(folder, "client")
    served = exporter(["--backend", "sim", "--sim.profile", "l4-1", "-c", "1s",
                       "--web.config.file", str(_web_config(folder, users=True))])
    served.wait_http()  # /health answers over plain HTTP on the TLS port, as probes need
    target = f"127.0.0.1:{served.port}"
    config = {
        # Generous timeout: on a loaded 2-core machine a TLS handshake plus a first bcrypt
        # check can take most of a second.
        "global": {"scrape_interval": "2s", "scrape_timeout": "2s"},
        "scrape_configs": [_job("right", target, folder, PASSWORD, cert=True),
                           _job("wrong-password", target, folder, "guess", cert=True),
                           _job("no-certificate", target, folder, PASSWORD, cert=False)],
    }
    (folder / "prometheus.yml").write_text(yaml.safe_dump(config))
    port = free_port()
    log = (folder / "prometheus.log").open("w")
    proc = subprocess.Popen(
        [binary, f"--config.file={folder / 'prometheus.yml'}",
         f"--storage.tsdb.path={folder / 'tsdb'}", f"--web.listen-address=127.0.0.1:{port}"],
        stdout=subprocess.DEVNULL, stderr=log)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until(lambda: answers(f"{url}/-/ready"), 60.0, what="Prometheus ready")
        yield url, folder
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


def _up(prometheus: str) -> dict[str, str]:
    query = urllib.parse.urlencode({"query": "up"})
    status, _, body = http_get(f"{prometheus}/api/v1/query?{query}")
    assert status == 200
    return {r["metric"]["job"]: r["value"][1] for r in json.loads(body)["data"]["result"]}


def _last_errors(prometheus: str) -> dict[str, str]:
    status, _, body = http_get(f"{prometheus}/api/v1/targets")
    assert status == 200
    return {t["labels"]["job"]: t["lastError"]
            for t in json.loads(body)["data"]["activeTargets"]}


def test_prometheus_scrapes_over_https_with_certificate_and_password(
        prometheus: tuple[str, Path]) -> None:
    url, _ = prometheus
    expected = {"right": "1", "wrong-password": "0", "no-certificate": "0"}
    wait_until(lambda: _up(url) == expected, 60.0, what=f"up == {expected}")
    errors = _last_errors(url)
    assert errors["right"] == ""
    assert "401" in errors["wrong-password"], errors
    assert errors["no-certificate"], errors  # refused in the handshake
    # The scraped series made it in: the exporter's own, and a GPU's.
    query = urllib.parse.urlencode({"query": 'DCGM_FI_DEV_GPU_TEMP{job="right"}'})
    _, _, body = http_get(f"{url}/api/v1/query?{query}")
    assert json.loads(body)["data"]["result"], "no GPU series scraped"


def _maps(pid: int) -> str:
    return Path(f"/proc/{pid}/maps").read_text()


def test_bcrypt_is_loaded_only_with_basic_auth_users(
        pki: Pki, exporter: type[ExporterProcess]) -> None:
    """A server without `basic_auth_users` never maps bcrypt's extension; one with users
    does once it checked a password."""
    folder = pki.folder
    pki.ca_file()
    pki.ca.server().write(folder, "server")
    pki.ca.client("prometheus.example").write(folder, "client")
    for users in (False, True):
        served = exporter(["--backend", "sim", "--sim.profile", "l4-1",
                           "--web.config.file", str(_web_config(folder, users))])
        served.wait_http()
        client = Client(served.port, folder / "ca.crt",
                        (folder / "client.crt", folder / "client.key"))
        answer = client.get(auth=("prometheus", PASSWORD))
        assert isinstance(answer, Response)
        assert answer.status == 200
        assert ("_bcrypt" in _maps(served.proc.pid)) is users

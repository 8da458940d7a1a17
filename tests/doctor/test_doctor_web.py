"""`gpu-exporter doctor` reports the web config as serve would load it."""

from __future__ import annotations

import pytest

from tests.doctor.test_doctor_settings import SIM_ONLY, run_doctor
from tests.support.pki import Pki


def _web_lines(lines: list[str]) -> list[str]:
    return [line for line in lines if "] web config: " in line]


@pytest.fixture(autouse=True)
def sim_backend(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GPU_EXPORTER_WEB_CONFIG_FILE", raising=False)
    monkeypatch.setenv("GPU_EXPORTER_BACKEND", "sim")


def test_without_a_file() -> None:
    rc, lines = run_doctor(*SIM_ONLY)
    assert rc == 0
    assert _web_lines(lines) == ["[INFO] web config: none: plain HTTP, no authentication"]


def test_a_usable_file_and_what_it_honours_otherwise(pki: Pki) -> None:
    pki.ca.server().write(pki.folder, "server")
    pki.ca_file()
    path = pki.folder / "web.yml"
    path.write_text("tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n"
                    "  client_auth_type: RequestClientCert\n  client_ca_file: ca.crt\n"
                    "http_server_config:\n  headers:\n    X-Frame-Options: deny\n")
    rc, lines = run_doctor(*SIM_ONLY, "--web.config.file", str(path))
    assert rc == 0, lines
    assert _web_lines(lines) == [
        f"[  OK] web config: {path}: TLS TLS12-TLS13, client certificates: "
        "RequestClientCert; headers X-Frame-Options",
        "[WARN] web config: tls_server_config.client_auth_type: RequestClientCert: client "
        "certificates are not requested (they would not be verified or used)",
    ]


def test_a_file_serve_would_refuse(pki: Pki, monkeypatch: pytest.MonkeyPatch) -> None:
    path = pki.folder / "web.yml"
    path.write_text("tls_server_config:\n  cert_file: gone.crt\n  key_file: gone.key\n")
    monkeypatch.setenv("GPU_EXPORTER_WEB_CONFIG_FILE", str(path))
    rc, lines = run_doctor(*SIM_ONLY)
    assert rc == 1
    (line,) = _web_lines(lines)
    assert line.startswith(f"[FAIL] web config: web config {path}:2: tls_server_config."
                           f"cert_file: {pki.folder / 'gone.crt'}: cannot read: No such file "
                           "or directory")

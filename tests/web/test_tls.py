"""TLS, client certificates and basic auth, with real TLS clients against the real server.

For each `client_auth_type`: a client with a certificate from the configured CA, without
one, and with one from another CA; TLS 1.1 (refused by default); a wrong or missing password
(401); the configured headers; and rotation (the next handshake presents the new
certificate). Where Python's ssl module cannot do what Go does, the expectation says so.
"""

from __future__ import annotations

import os
import ssl
from pathlib import Path

import bcrypt
import pytest

from exporter.web.reload import LiveWebConfig
from tests.support.pki import Pki
from tests.support.wait import wait_until
from tests.web.conftest import REFUSED, Client, Response, ServedInThread

PASSWORD = "s3cret"
HASH = bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(5)).decode()

# (with a certificate from the CA, without one, with one from another CA)
EXPECTED = {
    "NoClientCert": (200, 200, 200),
    # Go asks and ignores the answer; not asking grants exactly the same access.
    "RequestClientCert": (200, 200, 200),
    # Go accepts any certificate; ssl verifies every one it accepts, so another CA's is
    # refused here (documented, and warned about at start-up).
    "RequireAnyClientCert": (200, REFUSED, REFUSED),
    "VerifyClientCertIfGiven": (200, 200, REFUSED),
    "RequireAndVerifyClientCert": (200, REFUSED, REFUSED),
}


def _write_config(pki: Pki, auth_type: str, extra: str = "") -> Path:
    folder = pki.folder
    pki.ca_file()
    ca_line = "" if auth_type == "NoClientCert" else "  client_ca_file: ca.crt\n"
    path = folder / "web.yml"
    path.write_text(
        "tls_server_config:\n"
        "  cert_file: server.crt\n"
        "  key_file: server.key\n"
        f"  client_auth_type: {auth_type}\n"
        f"{ca_line}{extra}"
        "http_server_config:\n"
        "  headers:\n"
        "    X-Content-Type-Options: nosniff\n"
        "    Strict-Transport-Security: max-age=31536000\n"
        "basic_auth_users:\n"
        f"  prometheus: {HASH}\n")
    return path


def _status(result: Response | str) -> int | str:
    return result if isinstance(result, str) else result.status


@pytest.mark.parametrize("auth_type", list(EXPECTED))
def test_client_auth_type(auth_type: str, pki: Pki, serve: type[ServedInThread]) -> None:
    folder = pki.folder
    ca = pki.ca_file()
    first = pki.ca.server()
    first.write(folder, "server")
    good = pki.ca.client("prometheus.example").write(folder, "client")
    foreign = pki.other_ca.client("prometheus.example").write(folder, "foreign")
    served = serve(LiveWebConfig.load(_write_config(pki, auth_type)))
    creds = ("prometheus", PASSWORD)

    outcomes = tuple(_status(Client(served.port, ca, cert).get(auth=creds))
                     for cert in (good, None, foreign))
    assert outcomes == EXPECTED[auth_type]
    # The client can see the alert before the server has counted it.
    refusals = list(EXPECTED[auth_type]).count(REFUSED)
    wait_until(lambda: served.refused("tls_handshake") == refusals, 10.0,
               what=f"{refusals} refused handshakes counted")

    client = Client(served.port, ca, good)
    ok = client.get(auth=creds)
    assert isinstance(ok, Response)
    assert ok.status == 200
    assert b"DCGM_FI_DEV_GPU_TEMP" in ok.body
    assert ok.headers["X-Content-Type-Options"] == "nosniff"
    assert ok.headers["Strict-Transport-Security"] == "max-age=31536000"
    assert ok.server_serial == first.serial

    for wrong in (("prometheus", "wrong"), ("nobody", PASSWORD), None):
        denied = client.get(auth=wrong)
        assert isinstance(denied, Response), wrong
        assert denied.status == 401, wrong
        assert denied.headers["WWW-Authenticate"].startswith("Basic")
        assert denied.headers["X-Content-Type-Options"] == "nosniff"
        assert b"DCGM" not in denied.body

    old = Client(served.port, ca, good, max_version=ssl.TLSVersion.TLSv1_1)
    assert old.get(auth=creds) == REFUSED

    # Rotation: the files are replaced as a Secret volume does (a new inode).
    second = pki.ca.server()
    _replace(folder, "server", second.cert_pem, second.key_pem)
    rotated = client.get(auth=creds)
    assert isinstance(rotated, Response)
    assert rotated.status == 200
    assert rotated.server_serial == second.serial != first.serial


def _replace(folder: Path, name: str, cert: bytes, key: bytes) -> None:
    for suffix, data in ((".crt", cert), (".key", key)):
        staged = folder / f".{name}{suffix}.new"
        staged.write_bytes(data)
        os.replace(staged, folder / f"{name}{suffix}")


def test_tls11_is_served_when_the_file_allows_it(pki: Pki,
                                                 serve: type[ServedInThread]) -> None:
    """The control for "TLS 1.1 refused by default": the same client gets in when asked."""
    pki.ca.server().write(pki.folder, "server")
    path = _write_config(pki, "NoClientCert", "  min_version: TLS11\n")
    served = serve(LiveWebConfig.load(path))
    old = Client(served.port, pki.ca_file(), max_version=ssl.TLSVersion.TLSv1_1)
    assert _status(old.get(auth=("prometheus", PASSWORD))) == 200


def test_client_allowed_sans(pki: Pki, serve: type[ServedInThread]) -> None:
    folder = pki.folder
    pki.ca.server().write(folder, "server")
    allowed = pki.ca.client("prometheus.example").write(folder, "allowed")
    other = pki.ca.client("intruder.example").write(folder, "other")
    path = _write_config(pki, "RequireAndVerifyClientCert",
                         "  client_allowed_sans: [prometheus.example]\n")
    served = serve(LiveWebConfig.load(path))
    ca, creds = pki.ca_file(), ("prometheus", PASSWORD)
    assert _status(Client(served.port, ca, allowed).get(auth=creds)) == 200
    assert Client(served.port, ca, other).get(auth=creds) == REFUSED
    assert served.refused("client_san") == 1


def test_a_failed_reload_keeps_the_running_certificate(pki: Pki,
                                                       serve: type[ServedInThread]) -> None:
    folder = pki.folder
    first = pki.ca.server()
    first.write(folder, "server")
    live = LiveWebConfig.load(_write_config(pki, "NoClientCert"))
    served = serve(live)
    client, creds = Client(served.port, pki.ca_file()), ("prometheus", PASSWORD)

    mismatched = pki.ca.server()
    _replace(folder, "server", mismatched.cert_pem, first.key_pem)  # not its key
    kept = client.get(auth=creds)
    assert isinstance(kept, Response)
    assert kept.server_serial == first.serial
    assert live.reloads["failure"] == 1
    assert live.reloads["success"] == 0
    assert client.get(auth=creds) != REFUSED
    assert live.reloads["failure"] == 1

    _replace(folder, "server", mismatched.cert_pem, mismatched.key_pem)
    fixed = client.get(auth=creds)
    assert isinstance(fixed, Response)
    assert fixed.server_serial == mismatched.serial
    assert live.reloads["success"] == 1


def test_probes_answer_over_plain_http_on_the_tls_port(pki: Pki,
                                                       serve: type[ServedInThread]) -> None:
    """What a kubelet's httpGet probe (no client certificate, no password) gets, while
    everything else needs TLS, a certificate and the password."""
    folder = pki.folder
    pki.ca.server().write(folder, "server")
    served = serve(LiveWebConfig.load(_write_config(pki, "RequireAndVerifyClientCert")))
    plain = Client(served.port)
    for path in ("/health", "/ready"):
        answer = plain.get(path)
        assert isinstance(answer, Response), path
        assert answer.status == 200, path
    for path in ("/metrics", "/"):
        answer = plain.get(path, auth=("prometheus", PASSWORD))
        assert isinstance(answer, Response), path
        assert answer.status == 400, path
        assert b"DCGM" not in answer.body
    # Over TLS without a certificate the handshake itself is refused, probes included.
    assert Client(served.port, pki.ca_file()).get("/health") == REFUSED


def test_credentials_are_checked_with_bcrypt_once(pki: Pki,
                                                  serve: type[ServedInThread]) -> None:
    pki.ca.server().write(pki.folder, "server")
    live = LiveWebConfig.load(_write_config(pki, "NoClientCert"))
    served = serve(live)
    client, creds = Client(served.port, pki.ca_file()), ("prometheus", PASSWORD)
    for _ in range(5):
        assert _status(client.get(auth=creds)) == 200
        assert _status(client.get(auth=("prometheus", "guess"))) == 401
    auth = live.applied.auth
    assert auth is not None
    assert auth.bcrypt_checks == 2

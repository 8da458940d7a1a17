"""Reading the web config: what upstream accepts is accepted, and every file that cannot be
used is refused with a message that names the file and the key."""

from __future__ import annotations

import logging
import subprocess
import sys
from pathlib import Path

import bcrypt
import pytest

from exporter.web.reload import Applied, LiveWebConfig
from exporter.web.webconfig import WebConfigError, load_web_config
from tests.support.paths import ROOT
from tests.support.pki import Pki

HASH = bcrypt.hashpw(b"pw", bcrypt.gensalt(4)).decode()
TLS = "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n"


def _applied(folder: Path, text: str) -> Applied:
    path = folder / "web.yml"
    path.write_text(text)
    return Applied.build(load_web_config(path))


@pytest.fixture
def certs(pki: Pki) -> Path:
    pki.ca.server().write(pki.folder, "server")
    pki.ca_file()
    return pki.folder


# (what is wrong, the file's text, what the message must name)
BAD = [
    ("unknown top-level key", TLS + "tls_config: {}\n", "tls_config: unknown key"),
    ("unknown TLS key", TLS + "  client_ca: ''\n  ca_file: x\n",
     "tls_server_config.ca_file: unknown key"),
    ("missing cert file", "tls_server_config:\n  cert_file: nope.crt\n  key_file: server.key\n",
     "nope.crt: cannot read: No such file or directory"),
    ("missing key", "tls_server_config:\n  cert_file: server.crt\n",
     "missing one of key or key_file"),
    ("bad bcrypt hash", "basic_auth_users:\n  alice: plaintext\n",
     "basic_auth_users.alice: not a bcrypt hash"),
    ("bcrypt cost", "basic_auth_users:\n  alice: '" + HASH.replace("$04$", "$03$") + "'\n",
     "basic_auth_users.alice: bcrypt cost 03"),
    ("header not settable", "http_server_config:\n  headers:\n    Server: x\n",
     "http_server_config.headers.Server: HTTP header 'Server' can not be configured"),
    ("header value", "http_server_config:\n  headers:\n    X-Frame-Options: allow\n",
     "http_server_config.headers.X-Frame-Options: invalid value"),
    ("client auth type", TLS + "  client_auth_type: Sometimes\n",
     "tls_server_config.client_auth_type: invalid value 'Sometimes'"),
    ("CA without client auth", TLS + "  client_ca_file: ca.crt\n",
     "client CAs are configured but client_auth_type is NoClientCert"),
    ("SANs without required certificates",
     TLS + "  client_auth_type: VerifyClientCertIfGiven\n  client_ca_file: ca.crt\n"
           "  client_allowed_sans: [a]\n", "tls_server_config.client_allowed_sans: requires"),
    ("RequireAnyClientCert without a CA", TLS + "  client_auth_type: RequireAnyClientCert\n",
     "RequireAnyClientCert without client_ca_file cannot be honoured"),
    ("TLS version", TLS + "  min_version: TLS14\n", "tls_server_config.min_version: unknown"),
    ("versions crossed", TLS + "  min_version: TLS13\n  max_version: TLS12\n",
     "TLS13 is above max_version TLS12"),
    ("cipher", TLS + "  cipher_suites: [TLS_RSA_WITH_RC4_128_SHA]\n",
     "tls_server_config.cipher_suites: unknown cipher"),
    ("curve", TLS + "  curve_preferences: [CurveP999]\n",
     "tls_server_config.curve_preferences: unknown curve"),
    ("CA file without certificates", TLS + "  client_auth_type: RequireAndVerifyClientCert\n"
     "  client_ca_file: server.key\n", "tls_server_config.client_ca_file"),
    ("not YAML", "tls_server_config: [\n", "not valid YAML"),
    ("rate limit", "rate_limit:\n  interval: soon\n", "rate_limit.interval"),
]


@pytest.mark.parametrize(("text", "named"), [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_bad_files_are_refused_naming_file_and_key(text: str, named: str,
                                                   certs: Path) -> None:
    with pytest.raises(WebConfigError) as raised:
        _applied(certs, text)
    message = str(raised.value)
    assert str(certs / "web.yml") in message, message
    assert named in message, message


def test_mismatched_certificate_and_key(pki: Pki) -> None:
    pki.ca.server().write(pki.folder, "server")
    _, other_key = pki.ca.server().write(pki.folder, "other")
    text = f"tls_server_config:\n  cert_file: server.crt\n  key_file: {other_key}\n"
    with pytest.raises(WebConfigError, match=r"cert_file .*server\.crt and key_file "
                                             r".*other\.key do not match"):
        _applied(pki.folder, text)


def test_a_full_file_is_read_as_upstream_reads_it(certs: Path) -> None:
    cert_pem = (certs / "server.crt").read_text()
    key_pem = (certs / "server.key").read_text()
    indent = "\n".join("    " + line for line in cert_pem.splitlines())
    key_indent = "\n".join("    " + line for line in key_pem.splitlines())
    applied = _applied(certs, (
        "tls_server_config:\n"
        f"  cert: |\n{indent}\n"
        f"  key: |\n{key_indent}\n"
        "  client_auth_type: RequireClientCert\n"  # the old spelling
        f"  client_ca_file: {certs / 'ca.crt'}\n"
        "  client_allowed_sans: [prometheus.example]\n"
        "  min_version: TLS13\n"
        "  cipher_suites: [TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256, TLS_AES_128_GCM_SHA256]\n"
        "  prefer_server_cipher_suites: false\n"
        "  curve_preferences: [X25519]\n"
        "http_server_config:\n"
        "  http2: false\n"
        "  headers:\n"
        "    Content-Security-Policy: default-src 'self'\n"
        "    X-XSS-Protection: ''\n"
        f"basic_auth_users:\n  alice: {HASH}\n  1234: {HASH}\n"
        "rate_limit:\n  interval: 100ms\n  burst: 5\n"))
    tls = applied.config.tls
    assert tls is not None
    assert tls.cert_file is None
    assert tls.cert is not None
    assert tls.client_auth_type == "RequireAnyClientCert"
    assert applied.tls is not None
    assert applied.tls.allowed_sans == ("prometheus.example",)
    assert any("TLS_AES_128_GCM_SHA256 ignored" in w for w in applied.tls.warnings)
    assert any("another CA is refused" in w for w in applied.tls.warnings)
    assert applied.config.http.headers == (("Content-Security-Policy", "default-src 'self'"),)
    assert set(applied.config.users) == {"alice", "1234"}
    assert applied.config.rate_limit is not None
    assert applied.config.rate_limit.burst == 5
    assert applied.config.http.http2 is False
    assert any("http2 is accepted and has no effect" in w for w in applied.config.warnings())


# (what is wrong, the file's text, the one line after `web config FILE:`)
MALFORMED = [
    ("a key twice", "basic_auth_users:\n  alice: x\n  bob: y\n  alice: z\n",
     "4: basic_auth_users.alice: duplicate YAML key; first defined at line 2"),
    ("a section twice", "rate_limit: {}\nhttp_server_config: {}\nrate_limit: {}\n",
     "3: rate_limit: duplicate YAML key; first defined at line 1"),
    ("a list for a path", "tls_server_config:\n  key_file: k\n  cert_file: [a, b]\n",
     "3: tls_server_config.cert_file: expected a string, found a list"),
    ("a word for a flag", "http_server_config:\n  http2: sometimes\n",
     "2: http_server_config.http2: expected true or false, found 'sometimes'"),
    ("a number in a list of names", "tls_server_config:\n  cipher_suites:\n    - TLS_A\n"
     "    - 7\n", "4: tls_server_config.cipher_suites[1]: expected a string, found '7'"),
    ("a text for a burst", "rate_limit:\n  interval: 1s\n  burst: many\n",
     "3: rate_limit.burst: expected an integer, found 'many'"),
    ("an unknown key", "http_server_config:\n\n  http3: true\n",
     "3: http_server_config.http3: unknown key (expected http2 or headers)"),
    ("a second document", "rate_limit: {}\n---\nrate_limit: {}\n",
     "3: multiple YAML documents are not supported"),
]


@pytest.mark.parametrize(("text", "line"), [m[1:] for m in MALFORMED],
                         ids=[m[0] for m in MALFORMED])
def test_a_malformed_file_is_one_line_naming_file_line_and_key(tmp_path: Path, text: str,
                                                               line: str) -> None:
    path = tmp_path / "web.yml"
    path.write_text(text)
    with pytest.raises(WebConfigError) as raised:
        load_web_config(path)
    assert str(raised.value) == f"web config {path}:{line}"


def test_a_value_checked_when_tls_is_built_names_its_line(certs: Path) -> None:
    with pytest.raises(WebConfigError) as raised:
        _applied(certs, TLS + "  min_version: TLS12\n  cipher_suites: [TLS_RSA_WITH_RC4_128_SHA]\n")
    assert str(raised.value) == (f"web config {certs / 'web.yml'}:5: tls_server_config."
                                 "cipher_suites: unknown cipher 'TLS_RSA_WITH_RC4_128_SHA'")
    with pytest.raises(WebConfigError) as raised:
        _applied(certs, TLS + "  client_auth_type: RequireAnyClientCert\n")
    assert str(raised.value).startswith(f"web config {certs / 'web.yml'}:4: tls_server_config."
                                        "client_auth_type: RequireAnyClientCert without")


# (what is wrong, the file's text, the whole refusal after `web config FILE:`, with {certs}
# standing for the certificates' folder; a refusal ending in "..." goes on with OpenSSL's
# reason, worded by its version)
REFUSED_WHEN_BUILT = [
    ("an unknown curve", TLS + "  curve_preferences: [CurveP999]\n",
     "4: tls_server_config.curve_preferences: unknown curve 'CurveP999' (expected: CurveP256, "
     "CurveP384, CurveP521, X25519)"),
    ("a certificate file that cannot be read",
     "tls_server_config:\n  key_file: server.key\n  cert_file: absent.crt\n",
     "3: tls_server_config.cert_file: {certs}/absent.crt: cannot read: No such file or "
     "directory"),
    ("a certificate file without a certificate",
     "tls_server_config:\n  cert_file: server.key\n  key_file: server.key\n",
     "2: tls_server_config.cert_file: {certs}/server.key holds no PEM certificate"),
    ("an inline certificate without a certificate",
     "tls_server_config:\n  key_file: server.key\n\n  cert: nothing\n",
     "4: tls_server_config.cert: (inline) holds no PEM certificate"),
    ("a key file without a key",
     "tls_server_config:\n  cert_file: server.crt\n  key_file: server.crt\n",
     "3: tls_server_config.key_file: {certs}/server.crt holds no PEM private key"),
    ("a certificate that is not one",
     "tls_server_config:\n  key_file: server.key\n  cert: |\n    -----BEGIN CERTIFICATE-----\n"
     "    AAAA\n    -----END CERTIFICATE-----\n",
     "1: tls_server_config: cannot load cert and key_file: ..."),
    ("RequireAnyClientCert without a CA", TLS + "  client_auth_type: RequireAnyClientCert\n",
     "4: tls_server_config.client_auth_type: RequireAnyClientCert without client_ca_file "
     "cannot be honoured: Python's ssl module verifies every client certificate it accepts. "
     "Set client_ca_file (certificates are then verified against it) or use "
     "RequireAndVerifyClientCert"),
    ("a client CA file that cannot be read",
     TLS + "  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: absent.crt\n",
     "5: tls_server_config.client_ca_file: {certs}/absent.crt: cannot read: No such file or "
     "directory"),
    ("a client CA file without a CA",
     TLS + "  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: server.key\n",
     "5: tls_server_config.client_ca_file: {certs}/server.key holds no usable CA "
     "certificate (..."),
    ("an inline client CA without a CA",
     TLS + "  client_auth_type: RequireAndVerifyClientCert\n\n  client_ca: nothing\n",
     "6: tls_server_config.client_ca: (inline) holds no usable CA certificate (..."),
]


@pytest.mark.parametrize(("text", "refusal"), [r[1:] for r in REFUSED_WHEN_BUILT],
                         ids=[r[0] for r in REFUSED_WHEN_BUILT])
def test_a_refusal_when_tls_is_built_is_the_line_of_its_key(certs: Path, text: str,
                                                           refusal: str) -> None:
    with pytest.raises(WebConfigError) as raised:
        _applied(certs, text)
    message = str(raised.value)
    expected = f"web config {certs / 'web.yml'}:" + refusal.format(certs=certs)
    if expected.endswith("..."):
        assert message.startswith(expected.removesuffix("...")), message
        assert "\n" not in message, message
    else:
        assert message == expected


def test_a_key_of_another_certificate_names_the_section_line(pki: Pki) -> None:
    pki.ca.server().write(pki.folder, "server")
    _, other_key = pki.ca.server().write(pki.folder, "other")
    path = pki.folder / "web.yml"
    with pytest.raises(WebConfigError) as raised:
        _applied(pki.folder, f"\ntls_server_config:\n  cert_file: server.crt\n"
                             f"  key_file: {other_key}\n")
    assert str(raised.value) == (
        f"web config {path}:2: tls_server_config: cert_file {pki.folder / 'server.crt'} and "
        f"key_file {other_key} do not match (the key is not the certificate's)")


def test_no_tls_keys_means_plain_http(tmp_path: Path) -> None:
    """As upstream: `min_version` alone, or an empty file, does not turn TLS on."""
    for text in ("", "tls_server_config:\n  min_version: TLS13\n",
                 f"basic_auth_users:\n  alice: {HASH}\n"):
        applied = _applied(tmp_path, text)
        assert applied.tls is None, text


def _serve(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "exporter", "serve", "--backend", "sim",
                           "-a", "127.0.0.1:0", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=60)


def test_serve_exits_naming_the_file_and_key(certs: Path) -> None:
    path = certs / "web.yml"
    path.write_text(TLS + "  client_auth: yes\n")
    result = _serve("--web.config.file", str(path))
    assert result.returncode != 0
    assert f"--web.config.file: web config {path}:4: tls_server_config.client_auth: unknown " \
           "key" in result.stderr, result.stderr
    missing = certs / "absent.yml"
    result = _serve("--web.config.file", str(missing))
    assert result.returncode != 0
    assert f"web config {missing}: cannot read: No such file or directory" in result.stderr


def test_http2_warns_at_start_up_and_only_when_given(tmp_path: Path,
                                                    caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "web.yml"
    path.write_text("http_server_config:\n  headers:\n    X-Frame-Options: deny\n")
    with caplog.at_level(logging.WARNING):
        LiveWebConfig.load(path)
    assert not [r for r in caplog.records if "http2" in r.getMessage()]
    path.write_text("http_server_config:\n  http2: true\n")
    with caplog.at_level(logging.WARNING):
        LiveWebConfig.load(path)
    (warning,) = [r.getMessage() for r in caplog.records if "http2" in r.getMessage()]
    assert str(path) in warning
    assert "HTTP/1.1 only" in warning

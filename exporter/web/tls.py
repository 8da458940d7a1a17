"""The `ssl.SSLContext` built from `tls_server_config`, as close to exporter-toolkit's Go
semantics as Python's ssl module allows; what it cannot honour is refused or comes back as a
warning.

Where Python differs from Go's crypto/tls:

- `RequestClientCert` (ask, verify nothing): ssl can only ask for certificates it verifies.
  Such a certificate is never used for anything upstream, so not asking grants the same
  access; the context asks for none.
- `RequireAnyClientCert` (require one, verify nothing): ssl cannot accept an unverified
  certificate. With `client_ca_file` or `client_ca` the certificate is required *and*
  verified against it (stricter: one from another CA is refused), with a warning; without a
  CA the file is refused.
- `client_allowed_sans` is checked right after the handshake (`san_allowed`), not inside it:
  the connection is closed before any HTTP is read, where Go fails the handshake.
- `curve_preferences`: one curve is honoured exactly; with several, ssl cannot set a list, so
  OpenSSL's default groups (which include all of Go's) are kept, with a warning.
- `cipher_suites` apply to TLS 1.2 and below; TLS 1.3 suites are not configurable, as in Go.
- TLS 1.0 and 1.1 need OpenSSL's security level 0, which is set (with a warning) only when
  `min_version` asks for them.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import ssl
import tempfile
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from exporter.textfiles import UnreadableFile, read_text
from exporter.web.webconfig import TlsSettings, TlsVersionName, WebConfigError
from exporter.yamlfiles import Section

GO_CIPHER_SUITES: dict[str, str] = {
    "TLS_RSA_WITH_AES_128_CBC_SHA": "AES128-SHA",
    "TLS_RSA_WITH_AES_256_CBC_SHA": "AES256-SHA",
    "TLS_RSA_WITH_AES_128_GCM_SHA256": "AES128-GCM-SHA256",
    "TLS_RSA_WITH_AES_256_GCM_SHA384": "AES256-GCM-SHA384",
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA": "ECDHE-ECDSA-AES128-SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA": "ECDHE-ECDSA-AES256-SHA",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA": "ECDHE-RSA-AES128-SHA",
    "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA": "ECDHE-RSA-AES256-SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256": "ECDHE-ECDSA-AES128-GCM-SHA256",
    "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384": "ECDHE-ECDSA-AES256-GCM-SHA384",
    "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256": "ECDHE-RSA-AES128-GCM-SHA256",
    "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384": "ECDHE-RSA-AES256-GCM-SHA384",
    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-RSA-CHACHA20-POLY1305",
    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-ECDSA-CHACHA20-POLY1305",
}
"""Go's names of the suites crypto/tls accepts in `CipherSuites` (TLS 1.2 and below), with
OpenSSL's names for them. Go's insecure suites are unknown upstream too."""
GO_TLS13_SUITES = frozenset({"TLS_AES_128_GCM_SHA256", "TLS_AES_256_GCM_SHA384",
                             "TLS_CHACHA20_POLY1305_SHA256"})
"""Accepted and ignored: TLS 1.3 suites are not configurable, in Go as in OpenSSL here."""
GO_CURVES: dict[str, str] = {
    "CurveP256": "prime256v1", "CurveP384": "secp384r1", "CurveP521": "secp521r1",
    "X25519": "X25519",
}
_VERSIONS: dict[TlsVersionName, ssl.TLSVersion] = {
    "TLS10": ssl.TLSVersion.TLSv1, "TLS11": ssl.TLSVersion.TLSv1_1,
    "TLS12": ssl.TLSVersion.TLSv1_2, "TLS13": ssl.TLSVersion.TLSv1_3,
}
_KEY = "tls_server_config"


@dataclass(frozen=True, slots=True)
class ServerTls:
    """A TLS context built from `tls_server_config`, with the client SANs to check and the warnings
    for the start-up log."""

    context: ssl.SSLContext
    allowed_sans: tuple[str, ...] | None
    """`client_allowed_sans`; checked on each connection with `san_allowed`."""
    warnings: tuple[str, ...]
    """What is honoured otherwise than upstream, one line each, for the start-up log."""


def _refused(where: Section, name: str, message: str) -> WebConfigError:
    """Return the refusal `web config FILE:LINE: tls_server_config.name: message`, on the line
    of the key `name` (empty: of the section itself) in `where`, the section as read."""
    return WebConfigError(f"web config {where.error(name, message)}")


def build_server_tls(settings: TlsSettings) -> ServerTls:
    """Return the TLS context for new connections; raise WebConfigError naming the file, line
    and key at fault."""
    where = settings.section
    notes: list[str] = []
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    with warnings.catch_warnings():  # TLS 1.0/1.1 are deprecated: the file asked, we warn
        warnings.simplefilter("ignore", DeprecationWarning)
        context.minimum_version = _VERSIONS[settings.min_version]
        context.maximum_version = _VERSIONS[settings.max_version]
    # This server speaks HTTP/1.1 only; saying so lets an h2-capable client settle at once.
    context.set_alpn_protocols(["http/1.1"])
    _set_ciphers(context, settings, where, notes)
    if settings.prefer_server_cipher_suites:
        context.options |= ssl.OP_CIPHER_SERVER_PREFERENCE
    else:
        context.options &= ~ssl.OP_CIPHER_SERVER_PREFERENCE
    _set_curves(context, settings, where, notes)
    _load_key_pair(context, settings, where)
    _set_client_auth(context, settings, where, notes)
    return ServerTls(context, settings.client_allowed_sans, tuple(notes))


def _set_ciphers(context: ssl.SSLContext, settings: TlsSettings, where: Section,
                 notes: list[str]) -> None:
    names = []
    for suite in settings.cipher_suites:
        if suite in GO_TLS13_SUITES:
            notes.append(f"{_KEY}.cipher_suites: {suite} ignored (TLS 1.3 suites are not "
                            f"configurable)")
        elif suite in GO_CIPHER_SUITES:
            names.append(GO_CIPHER_SUITES[suite])
        else:
            raise _refused(where, "cipher_suites", f"unknown cipher {suite!r}")
    legacy = _VERSIONS[settings.min_version] < ssl.TLSVersion.TLSv1_2
    if legacy:
        notes.append(f"{_KEY}.min_version: {settings.min_version} needs OpenSSL security "
                        f"level 0 (SHA-1 signatures allowed)")
    if not names and not legacy:
        return
    spec = ":".join(names) or "DEFAULT"
    try:
        context.set_ciphers(spec + (":@SECLEVEL=0" if legacy else ""))
    except ssl.SSLError:
        raise _refused(where, "cipher_suites", f"none of {list(settings.cipher_suites)} is "
                                               "available in this OpenSSL build") from None


def _set_curves(context: ssl.SSLContext, settings: TlsSettings, where: Section,
                notes: list[str]) -> None:
    for curve in settings.curve_preferences:
        if curve not in GO_CURVES:
            raise _refused(where, "curve_preferences", f"unknown curve {curve!r} (expected: "
                                                       f"{', '.join(GO_CURVES)})")
    if len(settings.curve_preferences) == 1:
        context.set_ecdh_curve(GO_CURVES[settings.curve_preferences[0]])
    elif settings.curve_preferences:
        notes.append(f"{_KEY}.curve_preferences: Python's ssl module sets one curve only; "
                        f"OpenSSL's default groups are kept (they include "
                        f"{', '.join(settings.curve_preferences)}), the order is not honoured")


def _load_key_pair(context: ssl.SSLContext, settings: TlsSettings, where: Section) -> None:
    cert_key = "cert_file" if settings.cert_file is not None else "cert"
    key_key = "key_file" if settings.key_file is not None else "key"
    cert_text = _read_pem(settings.cert_file, settings.cert, where, cert_key)
    key_text = _read_pem(settings.key_file, settings.key, where, key_key)
    if "-----BEGIN CERTIFICATE-----" not in cert_text:
        raise _refused(where, cert_key, f"{_name(settings.cert_file)}holds no PEM certificate")
    if "PRIVATE KEY-----" not in key_text:
        raise _refused(where, key_key, f"{_name(settings.key_file)}holds no PEM private key")
    with _pem_file(cert_text) as cert_path, _pem_file(key_text) as key_path:
        try:
            context.load_cert_chain(cert_path, key_path)
        except ssl.SSLError as exc:
            if exc.reason == "KEY_VALUES_MISMATCH":
                raise _refused(where, "", f"{cert_key} {_name(settings.cert_file)}and "
                                          f"{key_key} {_name(settings.key_file)}do not match "
                                          "(the key is not the certificate's)") from None
            raise _refused(where, "", f"cannot load {cert_key} and {key_key}: "
                                      f"{exc.reason or exc}") from None


def _set_client_auth(context: ssl.SSLContext, settings: TlsSettings, where: Section,
                     notes: list[str]) -> None:
    auth = settings.client_auth_type
    has_ca = settings.client_ca_file is not None or settings.client_ca is not None
    if auth in ("NoClientCert", "RequestClientCert"):
        context.verify_mode = ssl.CERT_NONE
        if auth == "RequestClientCert":
            notes.append(f"{_KEY}.client_auth_type: RequestClientCert: client certificates "
                            f"are not requested (they would not be verified or used)")
        return
    if auth == "RequireAnyClientCert":
        if not has_ca:
            raise _refused(
                where, "client_auth_type",
                "RequireAnyClientCert without client_ca_file cannot be honoured: Python's ssl "
                "module verifies every client certificate it accepts. Set client_ca_file "
                "(certificates are then verified against it) or use RequireAndVerifyClientCert")
        notes.append(f"{_KEY}.client_auth_type: RequireAnyClientCert: certificates are "
                        f"also verified against the client CA (one from another CA is refused)")
    context.verify_mode = (ssl.CERT_OPTIONAL if auth == "VerifyClientCertIfGiven"
                           else ssl.CERT_REQUIRED)
    if has_ca:
        _load_client_ca(context, settings, where)
    else:
        # Go verifies against the system's roots when no client CA is given.
        context.load_default_certs(ssl.Purpose.CLIENT_AUTH)
        notes.append(f"{_KEY}.client_auth_type: {auth} without client_ca_file: client "
                        f"certificates are verified against the system's CAs")


def _load_client_ca(context: ssl.SSLContext, settings: TlsSettings, where: Section) -> None:
    key = "client_ca_file" if settings.client_ca_file is not None else "client_ca"
    text = _read_pem(settings.client_ca_file, settings.client_ca, where, key)
    try:
        context.load_verify_locations(cadata=text)
    except (ssl.SSLError, ValueError) as exc:
        reason = getattr(exc, "reason", None) or exc
        raise _refused(where, key, f"{_name(settings.client_ca_file)}holds no usable CA "
                                   f"certificate ({reason})") from None


def _read_pem(path: Path | None, inline: str | None, where: Section, name: str) -> str:
    if path is None:
        return inline or ""
    try:
        return read_text(path, encoding="ascii")  # PEM is ASCII
    except UnreadableFile as exc:
        raise _refused(where, name, str(exc)) from None


def _name(path: Path | None) -> str:
    return f"{path} " if path is not None else "(inline) "


@contextlib.contextmanager
def _pem_file(text: str) -> Iterator[str]:
    """Return a path that holds `text` for `load_cert_chain`, which reads only files. It is an
    anonymous in-memory file where the kernel has them, so that a key given inline never reaches
    a disk."""
    data = text.encode("ascii", errors="replace")
    if hasattr(os, "memfd_create"):
        fd = os.memfd_create("pem", os.MFD_CLOEXEC)
        try:
            os.write(fd, data)
            yield f"/proc/self/fd/{fd}"
        finally:
            os.close(fd)
        return
    with tempfile.NamedTemporaryFile(mode="wb", suffix=".pem") as f:  # mode 0600
        f.write(data)
        f.flush()
        yield f.name


def san_allowed(peer_cert: dict[str, object] | None, allowed: tuple[str, ...]) -> bool:
    """Return whether a verified client certificate (as `getpeercert()` returns it) has a Subject
    Alternative Name equal to an entry of `client_allowed_sans`: DNS, e-mail, IP or URI."""
    if not peer_cert:
        return False
    entries = peer_cert.get("subjectAltName", ())
    assert isinstance(entries, tuple)
    for kind, value in entries:
        if kind == "IP Address":
            if any(_same_ip(value, a) for a in allowed):
                return True
        elif kind in ("DNS", "email", "URI") and value in allowed:
            return True
    return False


def _same_ip(presented: str, wanted: str) -> bool:
    """Return whether two IP addresses are the same address, since ssl writes IPv6 otherwise than
    Go does (`2001:DB8:0:0:...`)."""
    try:
        return ipaddress.ip_address(presented.strip()) == ipaddress.ip_address(wanted)
    except ValueError:
        return False

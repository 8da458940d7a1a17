"""The web configuration file (`--web.config.file`): the Prometheus exporter-toolkit's format.

The keys, defaults and checks are the toolkit's, so a file written for dcgm-exporter or
node_exporter is read the same way: unknown keys are errors, relative paths are relative to
the file's own directory, only five security headers may be set, and every password must be
a bcrypt hash. This module only reads and checks the text; `tls.py` turns the TLS part into
an `ssl.SSLContext`, `auth.py` checks passwords.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from exporter.durations import parse_duration
from exporter.yamlfiles import (
    MapOf,
    Schema,
    Section,
    Sequence,
    YamlError,
    read_yaml,
    read_yaml_text,
)

ClientAuthType = Literal["NoClientCert", "RequestClientCert", "RequireAnyClientCert",
                         "VerifyClientCertIfGiven", "RequireAndVerifyClientCert"]
CLIENT_AUTH_TYPES: tuple[ClientAuthType, ...] = (
    "NoClientCert", "RequestClientCert", "RequireAnyClientCert", "VerifyClientCertIfGiven",
    "RequireAndVerifyClientCert")
_CLIENT_AUTH_ALIASES: dict[str, ClientAuthType] = {
    "": "NoClientCert",
    "RequireClientCert": "RequireAnyClientCert",  # the toolkit's older spelling
}
TlsVersionName = Literal["TLS10", "TLS11", "TLS12", "TLS13"]
TLS_VERSIONS: tuple[TlsVersionName, ...] = ("TLS10", "TLS11", "TLS12", "TLS13")

SETTABLE_HEADERS: Mapping[str, tuple[str, ...]] = {
    "Strict-Transport-Security": (),
    "X-Content-Type-Options": ("nosniff",),
    "X-Frame-Options": ("deny", "sameorigin"),
    "X-XSS-Protection": (),
    "Content-Security-Policy": (),
}
"""The only response headers the file may set, with their allowed values (empty: any)."""

_BCRYPT_HASH = re.compile(r"^\$2[abxy]\$(\d\d)\$[./A-Za-z0-9]{53}$")
_BCRYPT_COSTS = range(4, 32)

_TLS_SCHEMA: Mapping[str, Schema] = {
    "cert": "str", "key": "str", "client_ca": "str", "cert_file": "str", "key_file": "str",
    "client_auth_type": "str", "client_ca_file": "str", "client_allowed_sans": Sequence("str"),
    "min_version": "str", "max_version": "str", "cipher_suites": Sequence("str"),
    "prefer_server_cipher_suites": "bool", "curve_preferences": Sequence("str"),
}
SCHEMA: Mapping[str, Schema] = {
    "tls_server_config": _TLS_SCHEMA,
    "http_server_config": {"http2": "bool", "headers": MapOf("str")},
    "basic_auth_users": MapOf("str"),
    "rate_limit": {"interval": "text", "burst": "int"},
}
"""The file's keys and the type of each, as the toolkit's Go structs declare them."""
_TLS_ENABLING_KEYS = ("cert", "key", "client_ca", "cert_file", "key_file", "client_ca_file",
                      "client_auth_type")
"""Any of these set turns TLS on; the other TLS keys alone leave the server on plain HTTP."""


class WebConfigError(ValueError):
    """The file cannot be used; the message names the file and the key."""


@dataclass(frozen=True, slots=True)
class TlsSettings:
    """`tls_server_config`, paths made absolute. Exactly one of each file/inline pair is set."""

    cert_file: Path | None = None
    key_file: Path | None = None
    cert: str | None = None
    """PEM text given inline instead of `cert_file`."""
    key: str | None = None
    client_ca_file: Path | None = None
    client_ca: str | None = None
    client_auth_type: ClientAuthType = "NoClientCert"
    client_allowed_sans: tuple[str, ...] | None = None
    """None when absent: an empty list is a list that no certificate matches, as upstream."""
    min_version: TlsVersionName = "TLS12"
    max_version: TlsVersionName = "TLS13"
    cipher_suites: tuple[str, ...] = ()
    """Go's names (TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256, ...), in preference order."""
    prefer_server_cipher_suites: bool = True
    curve_preferences: tuple[str, ...] = ()
    """Go's names: CurveP256, CurveP384, CurveP521, X25519."""
    section: Section = field(kw_only=True, compare=False, repr=False)
    """`tls_server_config` as the file gave it, so that the errors of what is checked when the
    context is built name the line of their key."""

    def files(self) -> tuple[Path, ...]:
        """Return the files this part reads: a change to any of them is a reason to reload."""
        return tuple(p for p in (self.cert_file, self.key_file, self.client_ca_file)
                     if p is not None)


@dataclass(frozen=True, slots=True)
class HttpSettings:
    """`http_server_config`: the HTTP/2 setting and the headers added to every response."""

    http2: bool | None = None
    """As the file gives it (None: absent). Accepted for compatibility and warned about: this
    server speaks HTTP/1.1 only (see docs/security.md)."""
    headers: tuple[tuple[str, str], ...] = ()
    """Added to every response, in file order."""


@dataclass(frozen=True, slots=True)
class RateLimit:
    """A token bucket over all requests: one token every `interval_s`, at most `burst`."""

    interval_s: float
    burst: int


@dataclass(frozen=True, slots=True)
class WebConfig:
    """The web config file as read and checked: TLS, headers, users and rate limit."""

    path: Path
    tls: TlsSettings | None = None
    """None: no TLS key in the file, plain HTTP (as upstream)."""
    http: HttpSettings = field(default_factory=HttpSettings)
    users: Mapping[str, str] = field(default_factory=dict)
    """User name -> bcrypt hash; empty: no basic auth."""
    rate_limit: RateLimit | None = None

    def files(self) -> tuple[Path, ...]:
        """Every file the configuration consists of: the file itself, then what it names."""
        return (self.path, *(self.tls.files() if self.tls is not None else ()))

    def warnings(self) -> tuple[str, ...]:
        """Return the settings accepted as upstream's but not acted on, one line each."""
        if self.http.http2 is None:
            return ()
        return ("http_server_config.http2 is accepted and has no effect: this server speaks "
                "HTTP/1.1 only (ALPN offers http/1.1)",)


def load_web_config(path: Path) -> WebConfig:
    """Return the web config read from `path` and checked; WebConfigError names the file,
    the line and the key at fault."""
    try:
        text = read_yaml_text(path)
    except YamlError as exc:
        raise WebConfigError(f"web config {exc}") from None
    return parse_web_config(text, path)


def parse_web_config(text: str, path: Path) -> WebConfig:
    """Return the web config `text` (read from `path`) checked as the toolkit checks it;
    WebConfigError (`web config FILE:LINE: key: message`) where it cannot be used."""
    try:
        top = read_yaml(path, text, SCHEMA)
        return WebConfig(path=path,
                         tls=_tls(top.section("tls_server_config"), path.parent),
                         http=_http(top.section("http_server_config")),
                         users=_users(top.section("basic_auth_users")),
                         rate_limit=_rate_limit(top.section("rate_limit")))
    except YamlError as exc:
        raise WebConfigError(f"web config {exc}") from None


def _file(tls: Section, name: str, base: Path) -> Path | None:
    text = tls.text(name)
    return base / text if text else None  # an absolute path stays as it is


def _tls(tls: Section, base: Path) -> TlsSettings | None:
    if not any(tls.value(name) for name in _TLS_ENABLING_KEYS):
        return None  # e.g. only min_version: still plain HTTP, as upstream
    cert_file, key_file = _file(tls, "cert_file", base), _file(tls, "key_file", base)
    cert, key = tls.text("cert") or None, tls.text("key") or None
    for inline, path, name in ((cert, cert_file, "cert"), (key, key_file, "key")):
        if inline is None and path is None:
            raise tls.error("", f"missing one of {name} or {name}_file")
        if inline is not None and path is not None:
            raise tls.error("", f"both {name} and {name}_file are set; give one")
    client_ca_file = _file(tls, "client_ca_file", base)
    client_ca = tls.text("client_ca") or None
    if client_ca is not None and client_ca_file is not None:
        raise tls.error("", "both client_ca and client_ca_file are set; give one")
    auth_text = tls.text("client_auth_type") or ""
    auth = _CLIENT_AUTH_ALIASES.get(auth_text, auth_text)
    if auth not in CLIENT_AUTH_TYPES:
        raise tls.error("client_auth_type", f"invalid value {auth_text!r} (expected one "
                                            f"of: {', '.join(CLIENT_AUTH_TYPES)})")
    client_auth: ClientAuthType = auth
    if (client_ca or client_ca_file) and client_auth == "NoClientCert":
        raise tls.error("client_auth_type", "client CAs are configured but "
                                            "client_auth_type is NoClientCert")
    sans = tls.texts("client_allowed_sans")
    if sans is not None and client_auth not in ("RequireAnyClientCert",
                                                "RequireAndVerifyClientCert"):
        raise tls.error("client_allowed_sans", "requires client_auth_type "
                                               "RequireAnyClientCert or "
                                               "RequireAndVerifyClientCert")
    min_version = _version(tls, "min_version", "TLS12")
    max_version = _version(tls, "max_version", "TLS13")
    if TLS_VERSIONS.index(min_version) > TLS_VERSIONS.index(max_version):
        raise tls.error("min_version", f"{min_version} is above max_version {max_version}")
    prefer_server = tls.flag("prefer_server_cipher_suites")
    return TlsSettings(
        cert_file=cert_file, key_file=key_file, cert=cert, key=key,
        client_ca_file=client_ca_file, client_ca=client_ca, client_auth_type=client_auth,
        client_allowed_sans=None if sans is None else tuple(sans),
        min_version=min_version, max_version=max_version,
        cipher_suites=tuple(tls.texts("cipher_suites") or ()),
        prefer_server_cipher_suites=True if prefer_server is None else prefer_server,
        curve_preferences=tuple(tls.texts("curve_preferences") or ()),
        section=tls,
    )


def _version(tls: Section, name: str, default: TlsVersionName) -> TlsVersionName:
    text = tls.text(name)
    if text is None:
        return default
    if text not in TLS_VERSIONS:
        raise tls.error(name, f"unknown TLS version {text!r} (expected one of: "
                              f"{', '.join(TLS_VERSIONS)})")
    return text


def _http(http: Section) -> HttpSettings:
    headers_given = http.section("headers")
    headers = []
    for name in headers_given:
        allowed = SETTABLE_HEADERS.get(name)
        if allowed is None:
            raise headers_given.error(name, f"HTTP header {name!r} can not be configured "
                                            f"(allowed: {', '.join(SETTABLE_HEADERS)})")
        text = headers_given.text(name) or ""
        if allowed and text not in allowed:
            raise headers_given.error(name, f"invalid value {text!r} (expected one of: "
                                            f"{', '.join(allowed)})")
        if text:  # blank: unset, as upstream
            headers.append((name, text))
    return HttpSettings(http2=http.flag("http2"), headers=tuple(headers))


def _users(users: Section) -> dict[str, str]:
    hashes = {}
    for name in users:
        text = users.text(name) or ""
        match = _BCRYPT_HASH.match(text)
        if match is None:
            raise users.error(name, "not a bcrypt hash (expected $2y$<cost>$ and 53 "
                                    "characters, as `htpasswd -nBC 10 \"\"` prints)")
        if int(match.group(1)) not in _BCRYPT_COSTS:
            raise users.error(name, f"bcrypt cost {match.group(1)} is outside 04-31")
        hashes[name] = text
    return hashes


def _rate_limit(limit: Section) -> RateLimit | None:
    if not limit.values:
        return None
    interval_text = (limit.text("interval") or "0").strip()
    try:
        interval = 0.0 if interval_text == "0" else parse_duration(interval_text)
    except ValueError as exc:
        raise limit.error("interval", str(exc)) from None
    burst = limit.integer("burst") or 0
    if burst < 0:
        raise limit.error("burst", f"expected a whole number >= 0, got {burst!r}")
    if interval == 0:
        return None  # 0 disables the limiter, as upstream
    return RateLimit(interval_s=interval, burst=burst)

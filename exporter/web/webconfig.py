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
from typing import Literal, cast

from exporter.durations import parse_duration
from exporter.textfiles import UnreadableFile, located, read_text

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

_TOP_KEYS = ("tls_server_config", "http_server_config", "basic_auth_users", "rate_limit")
_TLS_KEYS = ("cert", "key", "client_ca", "cert_file", "key_file", "client_auth_type",
             "client_ca_file", "client_allowed_sans", "min_version", "max_version",
             "cipher_suites", "prefer_server_cipher_suites", "curve_preferences")
_TLS_ENABLING_KEYS = ("cert", "key", "client_ca", "cert_file", "key_file", "client_ca_file",
                      "client_auth_type")
"""Any of these set turns TLS on; the other TLS keys alone leave the server on plain HTTP."""
_HTTP_KEYS = ("http2", "headers")
_RATE_LIMIT_KEYS = ("interval", "burst")


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

    def files(self) -> tuple[Path, ...]:
        """The files this part reads: a change to any of them is a reason to reload."""
        return tuple(p for p in (self.cert_file, self.key_file, self.client_ca_file)
                     if p is not None)


@dataclass(frozen=True, slots=True)
class HttpSettings:
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
        """Settings accepted as upstream's but not acted on, one line each."""
        if self.http.http2 is None:
            return ()
        return ("http_server_config.http2 is accepted and has no effect: this server speaks "
                "HTTP/1.1 only (ALPN offers http/1.1)",)


def load_web_config(path: Path) -> WebConfig:
    """Reads and checks the file; WebConfigError names the file and the key at fault."""
    try:
        text = read_text(path)
    except UnreadableFile as exc:
        raise WebConfigError(f"web config {exc}") from None
    return parse_web_config(text, path)


def parse_web_config(text: str, path: Path) -> WebConfig:
    import yaml  # here: serve without a web config never loads it

    where = _Where(path)
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise WebConfigError(f"web config {path}: not valid YAML: {exc}") from None
    top = where.mapping(document, "", _TOP_KEYS)
    tls = _tls(where, top.get("tls_server_config"), path.parent)
    http = _http(where, top.get("http_server_config"))
    users = _users(where, top.get("basic_auth_users"))
    rate_limit = _rate_limit(where, top.get("rate_limit"))
    return WebConfig(path=path, tls=tls, http=http, users=users, rate_limit=rate_limit)


@dataclass(frozen=True, slots=True)
class _Where:
    """Builds errors that name the file and the key path."""

    path: Path

    def error(self, key: str, message: str) -> WebConfigError:
        return WebConfigError("web config " + located(self.path, None, key, message))

    def mapping(self, value: object, key: str, allowed: tuple[str, ...]) -> dict[str, object]:
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise self.error(key or "the file", "expected a mapping of keys")
        for name in value:
            if name not in allowed:
                full = f"{key}.{name}" if key else str(name)
                raise self.error(full, f"unknown key (expected one of: {', '.join(allowed)})")
        return cast("dict[str, object]", value)

    def text(self, value: object, key: str) -> str | None:
        if value is None:
            return None
        if not isinstance(value, str):
            raise self.error(key, f"expected a string, got {value!r}")
        return value

    def flag(self, value: object, key: str, default: bool) -> bool:
        if value is None:
            return default
        if not isinstance(value, bool):
            raise self.error(key, f"expected true or false, got {value!r}")
        return value

    def strings(self, value: object, key: str) -> tuple[str, ...] | None:
        if value is None:
            return None
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise self.error(key, "expected a list of strings")
        return tuple(value)

    def file(self, value: object, key: str, base: Path) -> Path | None:
        text = self.text(value, key)
        if not text:
            return None
        return base / text  # an absolute path stays as it is


def _tls(where: _Where, value: object, base: Path) -> TlsSettings | None:
    section = "tls_server_config"
    raw = where.mapping(value, section, _TLS_KEYS)
    if not any(raw.get(name) for name in _TLS_ENABLING_KEYS):
        return None  # e.g. only min_version: still plain HTTP, as upstream
    k = {name: f"{section}.{name}" for name in _TLS_KEYS}
    cert_file = where.file(raw.get("cert_file"), k["cert_file"], base)
    key_file = where.file(raw.get("key_file"), k["key_file"], base)
    cert = where.text(raw.get("cert"), k["cert"]) or None
    key = where.text(raw.get("key"), k["key"]) or None
    for inline, path, name in ((cert, cert_file, "cert"), (key, key_file, "key")):
        if inline is None and path is None:
            raise where.error(section, f"missing one of {name} or {name}_file")
        if inline is not None and path is not None:
            raise where.error(section, f"both {name} and {name}_file are set; give one")
    client_ca_file = where.file(raw.get("client_ca_file"), k["client_ca_file"], base)
    client_ca = where.text(raw.get("client_ca"), k["client_ca"]) or None
    if client_ca is not None and client_ca_file is not None:
        raise where.error(section, "both client_ca and client_ca_file are set; give one")
    auth_text = where.text(raw.get("client_auth_type"), k["client_auth_type"]) or ""
    auth = _CLIENT_AUTH_ALIASES.get(auth_text, auth_text)
    if auth not in CLIENT_AUTH_TYPES:
        raise where.error(k["client_auth_type"], f"invalid value {auth_text!r} (expected one "
                                                 f"of: {', '.join(CLIENT_AUTH_TYPES)})")
    client_auth: ClientAuthType = auth
    if (client_ca or client_ca_file) and client_auth == "NoClientCert":
        raise where.error(k["client_auth_type"], "client CAs are configured but "
                                                 "client_auth_type is NoClientCert")
    sans = where.strings(raw.get("client_allowed_sans"), k["client_allowed_sans"])
    if sans is not None and client_auth not in ("RequireAnyClientCert",
                                                "RequireAndVerifyClientCert"):
        raise where.error(k["client_allowed_sans"], "requires client_auth_type "
                                                    "RequireAnyClientCert or "
                                                    "RequireAndVerifyClientCert")
    min_version = _version(where, raw.get("min_version"), k["min_version"], "TLS12")
    max_version = _version(where, raw.get("max_version"), k["max_version"], "TLS13")
    if TLS_VERSIONS.index(min_version) > TLS_VERSIONS.index(max_version):
        raise where.error(k["min_version"], f"{min_version} is above max_version "
                                            f"{max_version}")
    return TlsSettings(
        cert_file=cert_file, key_file=key_file, cert=cert, key=key,
        client_ca_file=client_ca_file, client_ca=client_ca, client_auth_type=client_auth,
        client_allowed_sans=sans, min_version=min_version, max_version=max_version,
        cipher_suites=where.strings(raw.get("cipher_suites"), k["cipher_suites"]) or (),
        prefer_server_cipher_suites=where.flag(raw.get("prefer_server_cipher_suites"),
                                               k["prefer_server_cipher_suites"], True),
        curve_preferences=where.strings(raw.get("curve_preferences"),
                                        k["curve_preferences"]) or (),
    )


def _version(where: _Where, value: object, key: str,
             default: TlsVersionName) -> TlsVersionName:
    text = where.text(value, key)
    if text is None:
        return default
    if text not in TLS_VERSIONS:
        raise where.error(key, f"unknown TLS version {text!r} (expected one of: "
                               f"{', '.join(TLS_VERSIONS)})")
    return text


def _http(where: _Where, value: object) -> HttpSettings:
    section = "http_server_config"
    raw = where.mapping(value, section, _HTTP_KEYS)
    http2 = None if raw.get("http2") is None else \
        where.flag(raw.get("http2"), f"{section}.http2", True)
    headers_raw = raw.get("headers")
    if headers_raw is None:
        return HttpSettings(http2=http2)
    if not isinstance(headers_raw, dict):
        raise where.error(f"{section}.headers", "expected a mapping of header names to values")
    headers = []
    for name, header_value in headers_raw.items():
        key = f"{section}.headers.{name}"
        allowed = SETTABLE_HEADERS.get(str(name))
        if allowed is None:
            raise where.error(key, f"HTTP header {name!r} can not be configured (allowed: "
                                   f"{', '.join(SETTABLE_HEADERS)})")
        text = where.text(header_value, key) or ""
        if allowed and text not in allowed:
            raise where.error(key, f"invalid value {text!r} (expected one of: "
                                   f"{', '.join(allowed)})")
        if text:  # blank: unset, as upstream
            headers.append((str(name), text))
    return HttpSettings(http2=http2, headers=tuple(headers))


def _users(where: _Where, value: object) -> dict[str, str]:
    section = "basic_auth_users"
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise where.error(section, "expected a mapping of user names to bcrypt hashes")
    users = {}
    for name, hashed in value.items():
        if not isinstance(name, str | int) or isinstance(name, bool):
            raise where.error(section, f"user name {name!r} is not a string")
        key = f"{section}.{name}"
        text = where.text(hashed, key) or ""
        match = _BCRYPT_HASH.match(text)
        if match is None:
            raise where.error(key, "not a bcrypt hash (expected $2y$<cost>$ and 53 "
                                   "characters, as `htpasswd -nBC 10 \"\"` prints)")
        if int(match.group(1)) not in _BCRYPT_COSTS:
            raise where.error(key, f"bcrypt cost {match.group(1)} is outside 04-31")
        users[str(name)] = text
    return users


def _rate_limit(where: _Where, value: object) -> RateLimit | None:
    section = "rate_limit"
    raw = where.mapping(value, section, _RATE_LIMIT_KEYS)
    if not raw:
        return None
    interval_raw = raw.get("interval", 0)
    try:
        interval = 0.0 if interval_raw in (0, "0") else parse_duration(str(interval_raw))
    except ValueError as exc:
        raise where.error(f"{section}.interval", str(exc)) from None
    burst = raw.get("burst", 0)
    if not isinstance(burst, int) or isinstance(burst, bool) or burst < 0:
        raise where.error(f"{section}.burst", f"expected a whole number >= 0, got {burst!r}")
    if interval == 0:
        return None  # 0 disables the limiter, as upstream
    return RateLimit(interval_s=interval, burst=burst)

"""The web config parser: any document either parses, or is refused with a WebConfigError
of one line naming the file and a line of it; never another exception. Documents are drawn
both as arbitrary text and as YAML mappings built from the real keys with values of every
shape, so the search reaches past the YAML parser into the key checks."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml
from hypothesis import given
from hypothesis import strategies as st

from exporter.web.webconfig import WebConfig, WebConfigError, parse_web_config

PATH = Path("/etc/gpu-exporter/web-config.yml")
"""Never read: relative certificate paths resolve against its folder, and files that do not
exist must be refused by name."""
_REFUSAL = re.compile(rf"^web config {re.escape(str(PATH))}:(\d+): ")

_SCALARS = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False),
                     st.text(max_size=20))
_VALUES: st.SearchStrategy[Any] = st.recursive(
    _SCALARS, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                       st.dictionaries(st.text(max_size=12), inner,
                                                       max_size=3)),
    max_leaves=8)
_TLS_KEYS = ("cert_file", "key_file", "cert", "key", "client_ca_file", "client_ca",
             "client_auth_type", "client_allowed_sans", "min_version", "max_version",
             "cipher_suites", "curve_preferences", "prefer_server_cipher_suites")
_SECTIONS = {
    "tls_server_config": st.dictionaries(st.sampled_from(_TLS_KEYS), _VALUES, max_size=4),
    "http_server_config": st.dictionaries(st.sampled_from(("headers", "http2")), _VALUES,
                                          max_size=2),
    "basic_auth_users": st.dictionaries(st.text(max_size=8), _VALUES, max_size=2),
    "rate_limit": _VALUES,
}
_DOCUMENTS = st.fixed_dictionaries({}, optional=_SECTIONS).map(
    lambda d: yaml.safe_dump(d, allow_unicode=True))


def _parses_or_names_the_file(text: str) -> None:
    try:
        config = parse_web_config(text, PATH)
    except WebConfigError as exc:
        message = str(exc)
        assert "\n" not in message, message
        match = _REFUSAL.match(message)
        assert match, f"refusal without file:line: {message}"
        assert 1 <= int(match.group(1)) <= max(1, text.count("\n") + 2), message
        return
    assert isinstance(config, WebConfig)


@given(st.text(max_size=300))
def test_any_text_parses_or_is_refused_naming_the_file(text: str) -> None:
    _parses_or_names_the_file(text)


@given(_DOCUMENTS)
def test_documents_of_the_real_keys_parse_or_are_refused_naming_the_file(text: str) -> None:
    _parses_or_names_the_file(text)

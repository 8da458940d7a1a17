"""The fake API server as a pod's in-cluster client meets it: HTTPS with the cluster's CA,
and 401 for any request without the service account's bearer token."""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests.support.apiserver import FakeApiServer
from tests.support.pki import make_pki


def test_https_with_a_required_token(tmp_path: Path) -> None:
    pki = make_pki(tmp_path)
    cert, key = pki.ca.server().write(tmp_path, "apiserver")
    server = FakeApiServer(tls=(cert, key), token="t0ken").start()
    try:
        assert server.url.startswith("https://127.0.0.1:")
        context = ssl.create_default_context(cafile=str(pki.ca_file()))

        def pods(authorization: str | None) -> int:
            request = urllib.request.Request(f"{server.url}/api/v1/pods")
            if authorization is not None:
                request.add_header("Authorization", authorization)
            try:
                with urllib.request.urlopen(request, timeout=10, context=context) as response:
                    assert json.load(response)["kind"] == "List"
                    status: int = response.status
                    return status
            except urllib.error.HTTPError as exc:
                return exc.code

        assert pods("Bearer t0ken") == 200
        assert pods("bearer t0ken") == 200  # the scheme's case does not matter
        assert pods("Bearer other") == 401
        assert pods(None) == 401
        assert server.state.unauthorized == 2
        assert len(server.state.requests) == 2  # only the requests let in
        untrusted = ssl.create_default_context(cafile=str(pki.other_ca.write(tmp_path, "o")))
        with pytest.raises(urllib.error.URLError, match="CERTIFICATE_VERIFY_FAILED"):
            urllib.request.urlopen(f"{server.url}/api/v1/pods", timeout=10, context=untrusted)
    finally:
        server.stop()

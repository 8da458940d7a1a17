"""The writer over HTTPS as a kubeconfig describes it: the cluster's CA, a bearer token; a
wrong token is a counted failure, never a write."""

from __future__ import annotations

import functools
import json
from pathlib import Path

from exporter.nodefaults.apihttp import ApiHttp, credentials
from exporter.nodefaults.config import NodeFaultsConfig
from exporter.nodefaults.writer import NodeFaultWriter
from tests.nodefaults.writer_helpers import FELL_OFF, NODE, snapshot
from tests.support.apiserver import FakeApiServer
from tests.support.apiserver_nodes import node
from tests.support.pki import make_pki
from tests.support.wait import wait_until


def _kubeconfig(path: Path, url: str, ca: Path, token: str) -> str:
    path.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": url,
                                               "certificate-authority": str(ca)}}],
        "users": [{"name": "u", "user": {"token": token}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}]}))
    return str(path)


def _client(kubeconfig: str) -> ApiHttp:
    return ApiHttp(credentials(kubeconfig), timeout_s=5.0)


def test_https_with_the_clusters_ca_and_token(tmp_path: Path) -> None:
    pki = make_pki(tmp_path)
    cert, key = pki.ca.server().write(tmp_path, "apiserver")
    api = FakeApiServer(tls=(cert, key), token="t0ken").start()
    api.state.store.add(node(NODE))
    writers: list[NodeFaultWriter] = []
    try:
        for token in ("wrong", "t0ken"):
            kubeconfig = _kubeconfig(tmp_path / f"kubeconfig-{token}", api.url,
                                     pki.ca_file(), token)
            writer = NodeFaultWriter(
                NodeFaultsConfig(node_condition=True, node_name=NODE),
                functools.partial(_client, kubeconfig), backoff_s=(0.05, 0.2))
            writers.append(writer)
            writer.restore_to(lambda _: None)
            writer.offer(snapshot((FELL_OFF,)))
            writer.start()
        refused, accepted = writers
        wait_until(lambda: refused.counts[("condition", "failure")] >= 1,
                   what="the wrong token refused")
        assert not refused.api_up
        wait_until(lambda: accepted.counts[("condition", "success")] == 1,
                   what="the condition written over HTTPS")
        conditions = api.state.store.nodes[NODE]["status"]["conditions"]
        assert [c["status"] for c in conditions if c["type"] == "GPUHardwareReady"] == ["False"]
        assert api.state.unauthorized >= 1
    finally:
        for writer in writers:
            writer.close()
        api.stop()

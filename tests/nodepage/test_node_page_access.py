"""The node page behind the web config's rules, and how it is built: once per poll, from
what the poll recorded, escaped, with no secret of the web config in it."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from exporter.devices.model import Entity, Inventory, Readings
from exporter.fields.csv import parse_collectors
from exporter.k8s.types import Attribution, PodRef
from exporter.nodepage import build
from exporter.nodepage import page as page_module
from exporter.nodepage.page import NodePage
from exporter.sampling.snapshot import HostLabel, Snapshot
from exporter.sampling.stats import PollStats
from exporter.selfmetrics import KUBELET_UP, NVML_UP
from exporter.web.reload import Applied, LiveWebConfig
from exporter.web.webconfig import parse_web_config
from tests.support.pki import Pki
from tests.web.conftest import REFUSED, Client, Response, ServedInThread

HOSTILE = '<script>alert("x")</script>'
GPU = Entity(0, "GPU-11111111-aaaa", "00000000:83:00.0", "nvidia0", f"NVIDIA {HOSTILE}")


def _snapshot(taken_at: float = 1000.0) -> Snapshot:
    return Snapshot(
        inventory=Inventory((GPU,), (), "590.48.01"),
        readings=Readings(values={(0, -1): {"DCGM_FI_DEV_GPU_TEMP": 41.0}}),
        collectors=parse_collectors("DCGM_FI_DEV_GPU_TEMP, gauge, t\n", "c.csv"),
        host=HostLabel("Hostname", "node-a"),
        attribution=Attribution(owners={GPU.key: PodRef(f"pod-{HOSTILE}", "ns", "main")}),
        taken_at=taken_at)


def _record(page: NodePage, taken_at: float = 1000.0) -> None:
    page.record(_snapshot(taken_at), PollStats(collect_interval_s=15.0),
                [NVML_UP.single(1.0), KUBELET_UP.single(1.0)])


def _ok(answer: Response | str) -> Response:
    assert isinstance(answer, Response), answer
    return answer


def test_page_and_json_need_what_metrics_needs(pki: Pki, serve: type[ServedInThread]) -> None:
    pki.ca.server().write(pki.folder, "server")
    pki.ca_file()
    config = pki.folder / "web.yml"
    config.write_text("tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n"
                      "  client_auth_type: RequireAndVerifyClientCert\n"
                      "  client_ca_file: ca.crt\n")
    served = serve(LiveWebConfig.load(config))
    _record(served.server.node_page)
    client_cert = pki.ca.client("prometheus").write(pki.folder, "client")
    stranger = pki.other_ca.client("stranger").write(pki.folder, "stranger")
    for path in ("/metrics", "/", "/api/node"):
        assert _ok(Client(served.port, pki.ca_file(), client_cert).get(path)).status == 200
        assert Client(served.port, pki.ca_file()).get(path) == REFUSED, path
        assert Client(served.port, pki.ca_file(), stranger).get(path) == REFUSED, path
        assert _ok(Client(served.port).get(path)).status == 400, path  # plain HTTP


def test_json_is_the_same_view_with_readiness(serve: type[ServedInThread]) -> None:
    served = serve(None)
    _record(served.server.node_page)
    answer = _ok(Client(served.port).get("/api/node"))
    assert answer.status == 200
    assert answer.headers["Content-Type"] == "application/json; charset=utf-8"
    body = json.loads(answer.body)
    assert set(body) == {"ready", "reason", "served_at", "poll_age_s", "node"}
    assert set(body["node"]) == {"exporter", "gpus", "web"}
    assert (body["ready"], body["reason"]) == (True, "ok: fixed")
    (gpu,) = body["node"]["gpus"]
    assert (gpu["gpu"], gpu["uuid"], gpu["temperature_c"], gpu["power_w"]) == (
        0, GPU.uuid, 41.0, None)
    assert gpu["holders"][0]["pod"] == f"pod-{HOSTILE}"
    assert body["node"]["exporter"]["host"] == "node-a"
    assert body["node"]["web"]["TLS"] == "off (plain HTTP)"


def test_text_from_outside_is_escaped(serve: type[ServedInThread]) -> None:
    served = serve(None)
    _record(served.server.node_page)
    answer = _ok(Client(served.port).get("/"))
    assert answer.status == 200
    page = answer.body.decode()
    assert "<script" not in page
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;" in page
    assert "default-src 'none'" in answer.headers["Content-Security-Policy"]


def test_each_poll_is_built_once_and_only_when_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    built: list[Snapshot | None] = []
    real = build.node_view

    def counting(snapshot: Snapshot | None, *args: object) -> object:
        built.append(snapshot)
        return real(snapshot, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(page_module, "node_view", counting)
    page = NodePage(clock=lambda: 1001.0)
    _record(page)
    _record(page, 1015.0)
    assert built == []  # recording a poll builds nothing: a poll nobody views costs nothing
    for _ in range(3):
        page.html((True, "ok"))
        page.json((True, "ok"))
    assert len(built) == 1
    _record(page, 1030.0)
    page.html((True, "ok"))
    assert [s.taken_at if s else None for s in built] == [1015.0, 1030.0]


@pytest.mark.parametrize(("now", "expected"), [
    (1001.0, 15),  # the next poll is due at 1015: reload just after it
    (1014.0, 2),
    (1016.0, 16),  # late: the poll is stuck; look again an interval on
])
def test_the_page_reloads_just_after_the_next_poll(now: float, expected: int) -> None:
    page = NodePage(clock=lambda: now)
    _record(page)
    text = page.html((True, "ok")).text or ""
    match = re.search(r'http-equiv="refresh" content="(\d+)"', text)
    assert match is not None
    assert int(match.group(1)) == expected


def test_the_web_config_is_shown_without_secrets(tmp_path: Path) -> None:
    key = "-----BEGIN PRIVATE KEY-----\\n" + "A" * 40 + "\\n-----END PRIVATE KEY-----"
    digest = "$2y$10$" + "b" * 53
    config = parse_web_config(
        "tls_server_config:\n  cert_file: server.crt\n"
        f'  key: "{key}"\n'
        "  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: ca.crt\n"
        "  client_allowed_sans: [prometheus.monitoring.svc]\n"
        f"basic_auth_users:\n  root-admin: '{digest}'\n  night-shift: '{digest}'\n"
        "rate_limit:\n  interval: 1s\n  burst: 5\n"
        "http_server_config:\n  headers:\n    X-Frame-Options: deny\n",
        tmp_path / "web.yml")
    applied = Applied(config, None, None, None)
    rows = dict(applied.rows())
    text = json.dumps(rows)
    assert "PRIVATE KEY" not in text
    assert "A" * 40 not in text
    assert digest not in text
    assert "root-admin" not in text
    assert "night-shift" not in text
    assert rows["basic auth"] == "on (2 users)"
    assert rows["client certificates"] == "RequireAndVerifyClientCert"
    assert rows["client CA"] == str(tmp_path / "ca.crt")
    assert rows["allowed client SANs"] == "prometheus.monitoring.svc"
    assert rows["rate limit"] == "1 per 1 s, burst 5"
    assert rows["header X-Frame-Options"] == "deny"
    assert rows["TLS"] == "TLS12 to TLS13"


def test_a_policy_in_the_web_config_replaces_the_pages_own(
        tmp_path: Path, serve: type[ServedInThread]) -> None:
    config = tmp_path / "web.yml"
    config.write_text("http_server_config:\n  headers:\n"
                      "    Content-Security-Policy: \"default-src 'none'\"\n")
    served = serve(LiveWebConfig.load(config))
    _record(served.server.node_page)
    answer = _ok(Client(served.port).get("/"))
    assert answer.status == 200
    # As on every path: the administrator's policy wins (the page is then unstyled).
    assert answer.headers["Content-Security-Policy"] == "default-src 'none'"

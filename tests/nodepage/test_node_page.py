"""The node page as a person sees it: the exporter run on simulated nodes, `/` opened in
headless Chromium, the drawing measured and checked against the same poll's `/metrics`.

Screenshots are kept in test-artifacts/ (node-page-*.png) to be looked at.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import re
import ssl
import time
import urllib.request
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import bcrypt
import pytest
from prometheus_client.parser import text_string_to_metric_families

from exporter.devices.enumerate import enumerate_devices
from exporter.devices.filter import ALL_DEVICES
from exporter.simulated.node.profiles import H200_CAPTURE_LAYOUT, H200_SEVEN_SMALL
from tests.support.chromium import BrowserTab, browser_page, chromium_port
from tests.support.exporter_process import ExporterProcess, http_get
from tests.support.paths import ROOT
from tests.support.pki import make_pki
from tests.support.wait import wait_until

ARTIFACTS = ROOT / "test-artifacts"
H200 = ["--backend", "sim", "--sim.profile", "h200-mig", "--sim.kubelet"]
A100 = ["--backend", "sim", "--sim.profile", "a100-timesliced", "--sim.kubelet",
        "--kubernetes.process-attribution"]
STILL = ["-c", "60s"]
"""Rarely a poll in the test's time; a test that needs the page and /metrics to describe the
same poll still checks that they do (see `_poll_stamp`)."""

Series = list[tuple[str, dict[str, str], float]]
T = TypeVar("T")

CARDS_JS = """JSON.stringify(Array.from(document.querySelectorAll('article.gpu')).map(a => ({
  gpu: +a.dataset.gpu, state: a.dataset.state, text: a.innerText,
  blocks: Array.from(a.querySelectorAll('.mig .gi')).map(b => ({
    gi: b.dataset.gi === undefined ? null : +b.dataset.gi, slices: +b.dataset.slices,
    profile: b.dataset.profile || null, kind: b.classList[2] || '',
    width: b.getBoundingClientRect().width, who: b.title})),
  gap: (() => { const m = a.querySelector('.mig');
                return m ? parseFloat(getComputedStyle(m).columnGap) : 0; })(),
  instanceHolders: Object.fromEntries(Array.from(
    a.querySelectorAll('table.instances tr[data-gi]')).map(tr => [tr.dataset.gi,
      Array.from(tr.querySelectorAll('li')).map(li => li.dataset.namespace + '/' +
                                                     li.dataset.pod)])),
  holders: Array.from(a.querySelectorAll(':scope > .holders li')).map(li => ({
    who: li.dataset.namespace + '/' + li.dataset.pod, text: li.innerText}))
})))"""


def _series(text: str) -> Series:
    return [(s.name, s.labels, s.value)
            for fam in text_string_to_metric_families(text) for s in fam.samples]


def _in_chromium(url: str, look: Callable[[BrowserTab], Awaitable[T]], *,
                 flags: Sequence[str] = (), headers: dict[str, str] | None = None,
                 javascript: bool = True) -> T:
    async def run(port: int) -> T:
        async with browser_page(port, headers=headers, javascript=javascript) as tab:
            await tab.open(url)
            return await look(tab)

    with chromium_port(flags) as port:
        return asyncio.run(run(port))


async def _cards(tab: BrowserTab) -> list[dict[str, Any]]:
    import json

    cards: list[dict[str, Any]] = json.loads(await tab.value(CARDS_JS))
    return cards


def _attributed(proc: ExporterProcess) -> str:
    proc.wait_ready()

    def attributed() -> str | None:
        text = proc.metrics()
        return text if "gpu_exporter_kubelet_up 1" in text else None
    return wait_until(attributed, 30.0, what="kubelet attribution up")


def _value(series: Series, name: str, gpu: int) -> float | None:
    """The GPU's own value of a field on /metrics (not a MIG instance's)."""
    found = [v for n, lb, v in series
             if n == name and lb.get("gpu") == str(gpu) and "GPU_I_ID" not in lb]
    return found[0] if found else None


def _poll_stamp(series: Series) -> float | None:
    """Return the time of the poll a /metrics body describes."""
    found = [v for n, _, v in series if n == "gpu_exporter_last_poll_success_timestamp_seconds"]
    return found[0] if found else None


def _holders_on_metrics(series: Series, gpu: int, gi: int | None) -> set[str]:
    """Who /metrics says holds the device: the pod labels of its series (one holder), or
    its allocation rows (several)."""
    want = {"gpu": str(gpu), **({"GPU_I_ID": str(gi)} if gi is not None else {})}

    def on(labels: dict[str, str]) -> bool:
        return all(labels.get(k) == v for k, v in want.items()) and (
            gi is not None or "GPU_I_ID" not in labels)
    owners = {f"{lb['namespace']}/{lb['pod']}" for name, lb, _ in series
              if name == "DCGM_FI_DEV_GPU_TEMP" or name == "DCGM_FI_DEV_FB_USED"
              if on(lb) and "pod" in lb}
    rows = {f"{lb['namespace']}/{lb['pod']}" for name, lb, _ in series
            if name == "gpu_exporter_pod_gpu_allocation" and on(lb)}
    return owners | rows


def test_h200_mig_node_draws_each_instance_to_scale_with_its_pods(
        exporter: type[ExporterProcess]) -> None:
    proc = exporter([*H200, *STILL])
    _attributed(proc)

    async def look(tab: BrowserTab) -> tuple[list[dict[str, Any]], bool, list[str]]:
        await tab.screenshot(ARTIFACTS / "node-page-h200-mig.png")
        stale = await tab.value("document.getElementById('stale') !== null")
        return await _cards(tab), stale, tab.errors()

    def within_one_poll() -> tuple[Series, list[dict[str, Any]], bool, list[str]] | None:
        # The page and /metrics must describe the same poll: on a loaded machine the test
        # can outlast the poll interval, so a read is kept only when no poll came between
        # the /metrics read before the page and the one after it.
        before = _series(proc.metrics())
        cards, stale, errors = _in_chromium(proc.base + "/", look)
        after = _series(proc.metrics())
        if _poll_stamp(before) is None or _poll_stamp(before) != _poll_stamp(after):
            return None
        return before, cards, stale, errors

    series, cards, stale, errors = wait_until(
        within_one_poll, 300.0, 0.1, what="the page and /metrics read within one poll")
    assert errors == []
    assert not stale
    assert [c["gpu"] for c in cards] == list(range(8))
    assert all(c["state"] == "ok" for c in cards)
    # The simulated node's layouts: GPU 0 as captured, GPU 1 as 7x 1g.18gb, 2-7 whole.
    for gpu, layout in ((0, H200_CAPTURE_LAYOUT), (1, H200_SEVEN_SMALL)):
        blocks = [b for b in cards[gpu]["blocks"] if b["gi"] is not None]
        assert [(b["gi"], b["profile"], b["slices"]) for b in blocks] == [
            (gi.gi_id, gi.profile, gi.slices) for gi in layout]
        drawn = cards[gpu]["blocks"]
        assert sum(b["slices"] for b in drawn) == 7
        # To scale: every block is as wide as its slices (plus the gaps between them).
        unit = (drawn[0]["width"] + cards[gpu]["gap"]) / drawn[0]["slices"]
        assert unit > 20
        for b in drawn:
            assert abs((b["width"] + cards[gpu]["gap"]) / b["slices"] - unit) < 1.5, b
        for gi in layout:
            shown = set(cards[gpu]["instanceHolders"][str(gi.gi_id)])
            assert shown == _holders_on_metrics(series, gpu, gi.gi_id), (gpu, gi.gi_id)
            assert shown
    # GI 2 is split into a 1c and a 2c compute instance held by two pods.
    gi2 = next(b for b in cards[0]["blocks"] if b["gi"] == 2)
    assert gi2["kind"] == "shared"
    assert "1c+2c" in cards[0]["text"]
    for card in cards[2:]:
        assert card["blocks"] == []
        shown = {h["who"] for h in card["holders"]}
        assert shown == _holders_on_metrics(series, card["gpu"], None)
        # Activity: GPM's where this poll has it (not yet on the first poll: GPM needs
        # two samples), else NVML's GPU_UTIL, labelled which, as /metrics has it.
        gpm = _value(series, "DCGM_FI_PROF_GR_ENGINE_ACTIVE", card["gpu"])
        util = _value(series, "DCGM_FI_DEV_GPU_UTIL", card["gpu"])
        expected = f"{gpm * 100:.0f} % GPM" if gpm is not None else f"{util:.0f} % GPU_UTIL"
        assert expected in card["text"], card["text"]
        assert re.search(r"\d+ / 700 W", card["text"])
    # GPU 6 is the free one: no pod holds it.
    assert "no pod" in cards[6]["text"]


def test_the_page_follows_each_poll(exporter: type[ExporterProcess]) -> None:
    """The page reloads itself and each reload shows the poll then current: the polls it
    shows only move forward, and within a deadline it has shown three different polls (told
    apart by the millisecond stamp of `<time datetime>`, not the second the page prints)
    with power readings that changed between them."""
    proc = exporter([*H200, "-c", "1s"])
    proc.wait_ready()
    polls_wanted = 3

    async def look(tab: BrowserTab) -> list[tuple[str, str]]:
        seen: list[tuple[str, str]] = []
        deadline = time.monotonic() + 30.0
        while True:
            polled = await tab.value("document.querySelector('#poll dd time').dateTime")
            power = await tab.value("Array.from(document.querySelectorAll('article.gpu'))"
                                    ".map(a => a.innerText.match(/\\d+ \\/ 700 W/)).join()")
            seen.append((polled, power))
            if len({shown for shown, _ in seen}) >= polls_wanted:
                return seen
            if time.monotonic() >= deadline:
                raise AssertionError(f"the page showed fewer than {polls_wanted} polls "
                                     f"in 30 s of reloading itself: {seen}")
            await tab.reloaded()

    seen = _in_chromium(proc.base + "/", look)
    polls = [polled for polled, _ in seen]
    assert polls == sorted(polls), f"the page went back to an older poll: {polls}"
    assert len({power for _, power in seen}) > 1, seen


def test_a100_time_sliced_node_lists_every_holder_with_its_use(
        exporter: type[ExporterProcess]) -> None:
    proc = exporter([*A100, *STILL])
    series = _series(_attributed(proc))

    async def look(tab: BrowserTab) -> tuple[list[dict[str, Any]], list[str]]:
        await tab.screenshot(ARTIFACTS / "node-page-a100-time-sliced.png")
        return await _cards(tab), tab.errors()

    cards, errors = _in_chromium(proc.base + "/", look)
    assert errors == []
    assert [c["gpu"] for c in cards] == [0, 1, 2, 3]
    used = {(lb["gpu"], f"{lb['namespace']}/{lb['pod']}"): v for name, lb, v in series
            if name == "gpu_exporter_pod_gpu_memory_used_bytes"}
    for card in cards:
        # no GPM before Hopper: NVML's utilisation (its counterpart from the second poll
        # on), and the card says so
        assert re.search(r"% (GPU_UTIL|NVML)\n", card["text"]), card["text"]
        assert "% GPM" not in card["text"]
        holders = {h["who"]: h["text"] for h in card["holders"]}
        assert set(holders) == _holders_on_metrics(series, card["gpu"], None)
        assert len(holders) == 3
        for who, text in holders.items():
            memory = used[(str(card["gpu"]), who)]
            assert f"{memory / 2 ** 30:.1f} GiB" in text, text
            assert re.search(r"SM \d+ %", text)


def test_a_lost_gpu_is_marked_lost(exporter: type[ExporterProcess]) -> None:
    proc = exporter([*H200, "-c", "1s", "--sim.fault", "lost,gpu=3,at=2s"])
    proc.wait_ready()
    wait_until(lambda: "gpu_exporter_gpu_lost_total 1" in proc.metrics(), 30.0,
               what="GPU 3 lost")

    async def look(tab: BrowserTab) -> tuple[list[dict[str, Any]], list[str]]:
        await tab.screenshot(ARTIFACTS / "node-page-lost-gpu.png")
        return await _cards(tab), tab.errors()

    cards, errors = _in_chromium(proc.base + "/", look)
    assert errors == []
    states = {c["gpu"]: c["state"] for c in cards}
    assert states == {**{i: "ok" for i in range(8)}, 3: "lost"}
    assert "Lost" in cards[3]["text"]
    assert "power" not in cards[3]["text"]  # no values shown for it


def test_a_stale_poll_shows_a_banner(exporter: type[ExporterProcess]) -> None:
    proc = exporter([*H200, "-c", "500ms", "--sim.fault", "nvml-down,at=3s"])
    proc.wait_ready()
    wait_until(lambda: proc.get("/ready")[0] == 503, 30.0, what="/ready saying stale")

    async def look(tab: BrowserTab) -> tuple[str, float, str, list[str]]:
        await tab.screenshot(ARTIFACTS / "node-page-stale.png")
        banner = await tab.value("document.getElementById('stale').innerText")
        height = await tab.value(
            "document.getElementById('stale').getBoundingClientRect().height")
        devices = await tab.value("document.getElementById('no-devices').innerText")
        return banner, height, devices, tab.errors()

    banner, height, devices, errors = _in_chromium(proc.base + "/", look)
    assert errors == []
    assert "stale" in banner
    assert height > 10
    assert "NVML is down" in devices


def test_the_page_needs_no_javascript(exporter: type[ExporterProcess]) -> None:
    proc = exporter([*H200, *STILL])
    proc.wait_ready()
    status, headers, body = proc.get("/")
    assert status == 200
    assert b"<script" not in body
    policy = headers["Content-Security-Policy"]
    assert "default-src 'none'" in policy
    assert "script-src" not in policy  # falls back to 'none'
    assert "unsafe-inline" not in policy

    async def look(tab: BrowserTab) -> tuple[int, list[str]]:
        return await tab.value("document.querySelectorAll('article.gpu').length"), \
            tab.errors()

    count, errors = _in_chromium(proc.base + "/", look, javascript=False)
    assert count == 8
    assert errors == []


def _spki_hash(cert_pem: bytes) -> str:
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization

    public = x509.load_pem_x509_certificate(cert_pem).public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    return base64.b64encode(hashlib.sha256(public).digest()).decode()


def _https_status(url: str, ca: Path, auth: str | None) -> int:
    context = ssl.create_default_context(cafile=str(ca))
    request = urllib.request.Request(url, headers={"Authorization": auth} if auth else {})
    try:
        with urllib.request.urlopen(request, timeout=10, context=context) as answer:
            return int(answer.status)
    except urllib.error.HTTPError as exc:
        return exc.code


def test_the_page_under_tls_and_basic_auth(exporter: type[ExporterProcess],
                                           tmp_path: Path) -> None:
    pki = make_pki(tmp_path)
    server = pki.ca.server()
    server.write(tmp_path, "server")
    password = "n0de-page"
    digest = bcrypt.hashpw(password.encode(), bcrypt.gensalt(5)).decode()
    config = tmp_path / "web.yml"
    config.write_text("tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n"
                      f"basic_auth_users:\n  night-shift: {digest}\n")
    proc = exporter([*H200, *STILL, "--web.config.file", str(config)])
    proc.wait_ready()
    https = f"https://127.0.0.1:{proc.port}"
    auth = "Basic " + base64.b64encode(f"night-shift:{password}".encode()).decode()
    ca = pki.ca_file()
    for path in ("/", "/api/node", "/metrics"):
        assert _https_status(https + path, ca, None) == 401, path
        assert _https_status(https + path, ca, "Basic " + base64.b64encode(
            b"night-shift:wrong").decode()) == 401, path
        assert _https_status(https + path, ca, auth) == 200, path
        assert http_get(proc.base + path)[0] == 400, path  # plain HTTP on the TLS port

    async def look(tab: BrowserTab) -> tuple[int, str, list[str]]:
        await tab.screenshot(ARTIFACTS / "node-page-tls.png")
        count = await tab.value("document.querySelectorAll('article.gpu').length")
        web = await tab.value("document.getElementById('web').innerText")
        return count, web, tab.errors()

    count, web, errors = _in_chromium(
        https + "/", look, headers={"Authorization": auth},
        flags=[f"--ignore-certificate-errors-spki-list={_spki_hash(server.cert_pem)}"])
    assert errors == []
    assert count == 8
    assert "TLS12 to TLS13" in web
    assert "on (1 user)" in web
    assert "night-shift" not in web
    assert digest not in web


def _mig_pod(gpu: int, gi: int) -> tuple[str, str]:
    """(namespace, pod) the simulated kubelet gives the compute instance of GPU `gpu`'s
    GPU instance `gi`."""
    from exporter.simulated.kubelet import plan_allocations
    from exporter.simulated.node import SimNvml

    lib = SimNvml("h200-mig")
    lib.nvmlInit()
    inventory = enumerate_devices(lib, ALL_DEVICES).inventory
    instance = inventory.instance(gpu, gi)
    assert instance is not None
    (mig,) = instance.mig_devices
    for pod in plan_allocations(inventory):
        if any(mig.uuid in c_dev.device_ids for c in pod.containers for c_dev in c.devices):
            return pod.namespace, pod.name
    raise AssertionError(f"no pod holds GPU {gpu} GI {gi}")


@pytest.mark.parametrize(("namespace", "pod", "gpu", "gi"), [
    ("research", "notebook-alice-0", 7, None),
    (None, None, 1, 9),
])
def test_a_sidecar_page_lists_only_its_pods_gpus(
        exporter: type[ExporterProcess], namespace: str | None, pod: str | None, gpu: int,
        gi: int | None) -> None:
    if pod is None:
        namespace, pod = _mig_pod(gpu, gi or 0)
    assert namespace is not None
    node = exporter([*H200, *STILL])
    everything = _series(_attributed(node))
    sidecar = exporter([*H200, *STILL, "--scope", "pod"],
                       env={"POD_NAME": pod, "POD_NAMESPACE": namespace})
    mine = _series(_attributed(sidecar))

    async def look(tab: BrowserTab) -> tuple[list[dict[str, Any]], str, list[str]]:
        await tab.screenshot(ARTIFACTS / f"node-page-sidecar-gpu{gpu}.png")
        return await _cards(tab), await tab.value("document.documentElement.outerHTML"), \
            tab.errors()

    cards, page, errors = _in_chromium(sidecar.base + "/", look)
    assert errors == []
    assert [c["gpu"] for c in cards] == [gpu]
    _, _, api = sidecar.get("/api/node")
    if gi is None:
        assert cards[0]["state"] == "ok"
        assert {h["who"] for h in cards[0]["holders"]} == {f"{namespace}/{pod}"}
    else:
        assert cards[0]["state"] == "partial"
        blocks = cards[0]["blocks"]
        assert [(b["gi"], b["kind"]) for b in blocks] == [(gi, "exclusive"), (None, "hidden")]
        assert cards[0]["instanceHolders"] == {str(gi): [f"{namespace}/{pod}"]}
        assert "power" not in cards[0]["text"]  # the GPU's own values are not this pod's
    # Nothing of another tenant: no other GPU's UUID, no other pod, on the page or in JSON.
    own = {lb["UUID"] for _, lb, _ in mine if "UUID" in lb}
    others = {lb["UUID"] for _, lb, _ in everything if "UUID" in lb} - own
    pods = {lb["pod"] for _, lb, _ in everything if "pod" in lb} - {pod}
    assert others
    assert pods
    for text in (page, api.decode()):
        for secret in (*others, *pods):
            assert secret not in text, secret
        assert "nvmlDeviceGet" not in text  # node-wide NVML error counts

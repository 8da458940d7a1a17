"""The container runtime source of `--container-labels`: what an inspect document says about
a container's GPUs (Docker's `DeviceRequests`, which podman's compat API cannot express, from
tests/fixtures/container-runtime), the label value, the join with the inventory, and the
API client against a real HTTP server on a Unix socket (timeouts, a container gone between
list and inspect, a failed refresh keeping the last answer)."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from exporter.devices.model import Entity, Inventory, MigDevice
from exporter.k8s.container_runtime import (
    ALL_GPUS,
    MAX_LABEL_BYTES,
    ContainerRuntimeSource,
    RuntimeApi,
    RuntimeApiError,
    containers_by_entity,
    entity_keys,
    gpu_ids,
    label_value,
    parse_inspect,
)
from tests.support.paths import ROOT

FIXTURE = ROOT / "tests" / "fixtures" / "container-runtime" / "docker-gpus.json"


def _gpu(index: int) -> Entity:
    return Entity(index, f"GPU-0000000{index}-aaaa-bbbb-cccc-dddddddddddd",
                  f"00000000:0{index}:00.0", f"nvidia{index}", "NVIDIA H100 80GB HBM3")


MIG_UUID = "MIG-11111111-2222-3333-4444-555555555555"
INVENTORY = Inventory(
    gpus=tuple(_gpu(i) for i in range(4)),
    instances=(
        Entity(3, _gpu(3).uuid, _gpu(3).pci_bus_id, "nvidia3", "NVIDIA H100 80GB HBM3",
               gpu_instance_id=1, gpu_instance_profile="3g.40gb",
               mig_devices=(MigDevice(MIG_UUID, 1, 0, "NVIDIA H100 MIG 3g.40gb"),)),
        Entity(3, _gpu(3).uuid, _gpu(3).pci_bus_id, "nvidia3", "NVIDIA H100 80GB HBM3",
               gpu_instance_id=2, gpu_instance_profile="3g.40gb"),
    ))


def _recorded() -> dict[str, Any]:
    text = FIXTURE.read_text().replace("@UUID2@", _gpu(2).uuid)
    return dict(json.loads(text))


def test_device_requests_as_docker_records_them() -> None:
    docs = _recorded()["inspect"]
    by_name = {parse_inspect(d).label: gpu_ids(d) for d in docs.values()}
    assert by_name == {
        "all-gpus": (ALL_GPUS,),                  # --gpus all: Count -1
        "two-gpus": ("1", _gpu(2).uuid),          # explicit DeviceIDs, as given
        "count-only": (),                         # --gpus 2: which two is not said; the
                                                  # env is not consulted either
        "driver-only": ("3",),                    # driver nvidia, no capabilities
        "other-vendor": ("nvidia0",),             # not NVIDIA's: the env decides
        "f0123456789a": (),                       # no name: the short id; `void` is none
    }


@pytest.mark.parametrize(("env", "ids"), [
    (["NVIDIA_VISIBLE_DEVICES=all"], (ALL_GPUS,)),
    (["NVIDIA_VISIBLE_DEVICES=0, GPU-x ,0"], ("0", "GPU-x")),
    (["NVIDIA_VISIBLE_DEVICES=none"], ()),
    (["NVIDIA_VISIBLE_DEVICES="], ()),
    (["NVIDIA_VISIBLE_DEVICES=void"], ()),
    (["NVIDIA_VISIBLE_DEVICESX=0", "PATH=/bin"], ()),
    ([], ()),
])
def test_nvidia_visible_devices(env: list[str], ids: tuple[str, ...]) -> None:
    assert gpu_ids({"Config": {"Env": env}, "HostConfig": {"DeviceRequests": None}}) == ids


def test_documents_of_the_wrong_shape_name_no_gpu() -> None:
    wrong: list[dict[str, Any]] = [{}, {"Config": None, "HostConfig": []},
                                   {"HostConfig": {"DeviceRequests": [1]}},
                                   {"Config": {"Env": [3, None]}}]
    for doc in wrong:
        assert gpu_ids(doc) == ()
    assert parse_inspect([]).label == ""


def test_the_label_value() -> None:
    assert label_value("/trainer", "abc") == "trainer"
    assert label_value("", "0123456789abcdef") == "0123456789ab"
    assert label_value("/", "0123456789abcdef") == "0123456789ab"
    assert label_value("/a\x00b\tc\x7fd\x85e", "id") == "a_b_c_d_e"
    long = "é" * 100  # 200 bytes of UTF-8
    capped = label_value(long, "id")
    assert len(capped.encode()) <= MAX_LABEL_BYTES
    assert capped == "é" * 64  # never half a character
    assert label_value("x" * 300, "id") == "x" * 128


def test_ids_join_the_inventory() -> None:
    keys = {token: entity_keys((token,), INVENTORY) for token in (
        "0", "nvidia1", _gpu(2).uuid, "GPU-unknown", "7", f"MIG-{_gpu(3).uuid}/2/0",
        MIG_UUID, "MIG-unknown", ALL_GPUS, "3")}
    assert keys["0"] == [(0, -1)]
    assert keys["nvidia1"] == [(1, -1)]
    assert keys[_gpu(2).uuid] == [(2, -1)]
    assert keys["GPU-unknown"] == keys["7"] == keys["MIG-unknown"] == []
    assert keys[f"MIG-{_gpu(3).uuid}/2/0"] == [(3, 2)]  # one GPU instance
    assert keys[MIG_UUID] == [(3, 1)]
    # A whole GPU covers its MIG instances' series, which carry its UUID.
    assert keys["3"] == [(3, -1), (3, 1), (3, 2)]
    assert keys[ALL_GPUS] == [(0, -1), (1, -1), (2, -1), (3, -1), (3, 1), (3, 2)]


def test_each_container_labels_an_entity_once() -> None:
    docs = _recorded()["inspect"]
    held = containers_by_entity([parse_inspect(d) for d in docs.values()], INVENTORY)
    assert held == {
        (0, -1): ("all-gpus", "other-vendor"),
        (1, -1): ("all-gpus", "two-gpus"),
        (2, -1): ("all-gpus", "two-gpus"),
        (3, -1): ("all-gpus", "driver-only"),
        (3, 1): ("all-gpus", "driver-only"),
        (3, 2): ("all-gpus", "driver-only"),
    }


class _FakeRuntime:
    """A Docker-compatible API on a Unix socket (aiohttp, in a thread), answering with the
    recorded documents; `delay_s` stalls every answer, `gone` inspects answer 404."""

    def __init__(self, socket_path: Path) -> None:
        self.socket_path = socket_path
        self.recorded = _recorded()
        self.delay_s = 0.0
        self.gone: set[str] = set()
        self.calls: list[str] = []
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._runner: web.AppRunner | None = None

    async def _handle(self, request: web.Request) -> web.Response:
        self.calls.append(request.path)
        await asyncio.sleep(self.delay_s)
        if request.path == "/containers/json":
            return web.json_response(self.recorded["containers"])
        container_id = request.match_info["id"]
        if container_id in self.gone or container_id not in self.recorded["inspect"]:
            return web.json_response({"message": "no such container"}, status=404)
        return web.json_response(self.recorded["inspect"][container_id])

    async def _start(self) -> None:
        app = web.Application()
        app.router.add_get("/containers/json", self._handle)
        app.router.add_get("/containers/{id}/json", self._handle)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        await web.UnixSite(self._runner, str(self.socket_path)).start()

    def start(self) -> _FakeRuntime:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(10)
        return self

    def stop(self) -> None:
        if self._runner is not None:
            asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(10)
            self._runner = None
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)


@pytest.fixture
def runtime(socket_dir: Path) -> Iterator[_FakeRuntime]:
    served = _FakeRuntime(socket_dir / "docker.sock").start()
    yield served
    served.stop()


def test_the_api_lists_then_inspects_each(runtime: _FakeRuntime) -> None:
    containers = RuntimeApi(runtime.socket_path).containers()
    assert [c.label for c in containers] == [
        "all-gpus", "two-gpus", "count-only", "driver-only", "other-vendor", "f0123456789a"]
    assert runtime.calls[0] == "/containers/json"
    assert len(runtime.calls) == 7


def test_a_container_gone_before_its_inspect_is_skipped(runtime: _FakeRuntime) -> None:
    runtime.gone.add("a" * 64)
    labels = [c.label for c in RuntimeApi(runtime.socket_path).containers()]
    assert "all-gpus" not in labels
    assert "two-gpus" in labels


def test_a_refresh_is_bounded_by_2s_in_all(runtime: _FakeRuntime) -> None:
    runtime.delay_s = 0.6  # each answer in time, seven of them not
    started = time.monotonic()
    with pytest.raises(RuntimeApiError, match="no answer within 2s"):
        RuntimeApi(runtime.socket_path).containers()
    # Each answer bounded alone, the seven would take 4.2 s.
    assert time.monotonic() - started < 3.5


def test_no_socket_is_an_error_not_a_crash(socket_dir: Path) -> None:
    with pytest.raises(RuntimeApiError, match="/containers/json"):
        RuntimeApi(socket_dir / "absent.sock").containers()


async def test_the_source_caches_one_interval_and_keeps_the_last_answer(
        runtime: _FakeRuntime) -> None:
    now = [100.0]
    source = ContainerRuntimeSource(runtime.socket_path, cache_s=10.0, clock=lambda: now[0])
    first = await source.refresh(INVENTORY)
    assert first.containers[(1, -1)] == ("all-gpus", "two-gpus")
    calls = len(runtime.calls)
    now[0] += 5.0
    assert (await source.refresh(INVENTORY)).containers == first.containers
    assert len(runtime.calls) == calls  # cached
    runtime.stop()  # the runtime goes away
    now[0] += 10.0
    stale = await source.refresh(INVENTORY)
    assert stale.containers == first.containers  # the last answer, kept
    assert not stale.owners
    assert not stale.sharers  # nothing else of an attribution
    assert stale.visible is None


async def test_before_any_answer_no_series_is_copied(socket_dir: Path) -> None:
    source = ContainerRuntimeSource(socket_dir / "absent.sock", cache_s=1.0)
    assert not (await source.refresh(INVENTORY)).containers

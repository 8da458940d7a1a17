"""Container labels outside Kubernetes (`--container-labels`): which running container holds
which GPU, read from a Docker-compatible runtime API (Docker, Podman's compat service) on a
Unix socket, as dcgm-exporter 4.8.3 reads it.

`GET /containers/json` lists the running containers and `GET /containers/<id>/json`
inspects each. A container's GPUs are its `HostConfig.DeviceRequests` of driver `nvidia` or
capability `gpu`: explicit `DeviceIDs` as given, `Count: -1` for all GPUs, a request for a
count only names no GPU and labels nothing. Without such a request, its
`NVIDIA_VISIBLE_DEVICES` (`all`; `none`, `void` and empty name none). An id is a GPU UUID,
an index (`0`, `nvidia0`), a MIG device (`MIG-GPU-<uuid>/<gi>/<ci>` or a MIG UUID): a whole
GPU covers its MIG instances' series too (they carry its UUID), a MIG device only its GPU
instance's. The label value is the container's name without its leading `/` (else the
first 12 characters of its id), control characters replaced by `_`, at most 128 bytes.

The reads run once per poll, in a worker thread (never on the event loop, never on a
scrape), bounded by 2 s in all; the answer is kept for one collect interval. When a refresh
fails, the last answer stays (logged once per outage); before any answer, no series is
copied.
"""

from __future__ import annotations

import asyncio
import http.client
import json
import logging
import socket
import time
import unicodedata
import urllib.parse
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from exporter.devices.model import EntityKey, Inventory
from exporter.k8s.types import Attribution
from exporter.series import Family

log = logging.getLogger(__name__)

RUNTIME_TIMEOUT_S = 2.0
"""For one refresh: the list and every inspect together (dcgm-exporter's)."""
MAX_RESPONSE_BYTES = 10 << 20
MAX_LABEL_BYTES = 128
SHORT_ID_LENGTH = 12
ALL_GPUS = "all"


class RuntimeApiError(Exception):
    """The runtime API could not be read: the message says what failed."""


@dataclass(frozen=True, slots=True)
class Container:
    """What one inspect says about a container's GPUs."""

    label: str
    """The `container` label's value (sanitised); empty: the container is skipped."""
    gpu_ids: tuple[str, ...]
    """Device ids as the runtime gives them, or (ALL_GPUS,)."""


# --- reading the API (blocking: run in a thread) -----------------------------------------

class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, socket_path: str, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout)
        self._socket_path = socket_path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        try:
            sock.connect(self._socket_path)
        except OSError:
            sock.close()
            raise
        self.sock = sock


class RuntimeApi:
    """One refresh's calls, on one connection, within one deadline."""

    def __init__(self, socket_path: Path, timeout_s: float = RUNTIME_TIMEOUT_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._socket_path = str(socket_path)
        self._timeout_s = timeout_s
        self._clock = clock

    def containers(self) -> list[Container]:
        """Return every running container with its GPUs; raise RuntimeApiError when the API
        fails."""
        deadline = self._clock() + self._timeout_s
        connection = _UnixConnection(self._socket_path, self._timeout_s)
        try:
            listed = self._get(connection, "/containers/json", deadline)
            if not isinstance(listed, list):
                raise RuntimeApiError("/containers/json: not a JSON list")
            found = []
            for item in listed:
                if not isinstance(item, dict) or not isinstance(item.get("Id"), str) or \
                        not item["Id"]:
                    continue
                path = f"/containers/{urllib.parse.quote(item['Id'], safe='')}/json"
                inspected = self._get(connection, path, deadline, missing_ok=True)
                if inspected is None:
                    continue  # The container went away between the list and the inspect.
                found.append(parse_inspect(inspected, item))
            return found
        finally:
            connection.close()

    def _get(self, connection: _UnixConnection, path: str, deadline: float,
             missing_ok: bool = False) -> Any:
        left = deadline - self._clock()
        if left <= 0:
            raise RuntimeApiError(f"{path}: no answer within {self._timeout_s:g}s")
        if connection.sock is not None:
            connection.sock.settimeout(left)
        connection.timeout = left
        try:
            connection.request("GET", path, headers={"Accept": "application/json"})
            response = connection.getresponse()
            body = response.read(MAX_RESPONSE_BYTES + 1)
        except TimeoutError:
            raise RuntimeApiError(f"{path}: no answer within {self._timeout_s:g}s") from None
        except (OSError, http.client.HTTPException) as exc:
            connection.close()
            raise RuntimeApiError(f"{path}: {exc}") from None
        if response.will_close:
            connection.close()
        if response.status == 404 and missing_ok:
            return None
        if not 200 <= response.status < 300:
            raise RuntimeApiError(f"{path}: HTTP {response.status}")
        if len(body) > MAX_RESPONSE_BYTES:
            raise RuntimeApiError(f"{path}: answer over {MAX_RESPONSE_BYTES} bytes")
        try:
            return json.loads(body)
        except ValueError as exc:
            raise RuntimeApiError(f"{path}: not JSON: {exc}") from None


# --- what an inspect says -----------------------------------------------------------------

def parse_inspect(inspected: Any, listed: dict[str, Any] | None = None) -> Container:
    """Return the container that its inspect document describes; `listed` is its row of the
    container list, used for a name the inspect lacks. Fields of the wrong type count as absent."""
    doc = inspected if isinstance(inspected, dict) else {}
    row = listed or {}
    container_id = _text(doc.get("Id")) or _text(row.get("Id"))
    name = _text(doc.get("Name"))
    names = row.get("Names")
    if not name and isinstance(names, list) and names:
        name = _text(names[0])
    return Container(label_value(name, container_id), gpu_ids(doc))


def label_value(name: str, container_id: str) -> str:
    """Return the container label: the name without its leading `/`, else the short id, with
    control characters replaced by `_` and cut to at most MAX_LABEL_BYTES bytes of UTF-8 (never
    inside a character)."""
    value = name.removeprefix("/").strip() or container_id.strip()[:SHORT_ID_LENGTH]
    value = "".join("_" if unicodedata.category(c) == "Cc" else c for c in value.strip())
    encoded = value.encode()
    if len(encoded) <= MAX_LABEL_BYTES:
        return value
    return encoded[:MAX_LABEL_BYTES].decode(errors="ignore")


def gpu_ids(inspected: dict[str, Any]) -> tuple[str, ...]:
    """Return the device ids the container was given: its NVIDIA device requests, else its
    NVIDIA_VISIBLE_DEVICES; `(ALL_GPUS,)` when it was given all of them."""
    explicit: list[str] = []
    every = count_only = False
    host = inspected.get("HostConfig")
    requests = host.get("DeviceRequests") if isinstance(host, dict) else None
    for request in requests if isinstance(requests, list) else ():
        if not isinstance(request, dict) or not _is_nvidia(request):
            continue
        ids = request.get("DeviceIDs")
        if isinstance(ids, list) and ids:
            explicit += [i for i in (_text(x).strip() for x in ids) if i]
            continue
        count = request.get("Count")
        if isinstance(count, int) and count < 0:
            every = True
        elif isinstance(count, int) and count > 0:
            count_only = True  # The document does not say which GPUs the runtime picked.
    if explicit:
        return tuple(dict.fromkeys(explicit))
    if every:
        return (ALL_GPUS,)
    if count_only:
        return ()
    config = inspected.get("Config")
    env = config.get("Env") if isinstance(config, dict) else None
    return _visible_devices(env if isinstance(env, list) else [])


def _is_nvidia(request: dict[str, Any]) -> bool:
    if _text(request.get("Driver")).lower() == "nvidia":
        return True
    groups = request.get("Capabilities")
    return any(isinstance(group, list) and any(_text(c).lower() == "gpu" for c in group)
               for group in (groups if isinstance(groups, list) else ()))


def _visible_devices(env: Iterable[Any]) -> tuple[str, ...]:
    for entry in env:
        value = _text(entry)
        if not value.startswith("NVIDIA_VISIBLE_DEVICES="):
            continue
        tokens = [t.strip() for t in value.partition("=")[2].split(",")]
        if any(t.lower() == ALL_GPUS for t in tokens):
            return (ALL_GPUS,)
        return tuple(dict.fromkeys(t for t in tokens if t.lower() not in ("", "none", "void")))
    return ()


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


# --- joined with the inventory ------------------------------------------------------------

def entity_keys(ids: tuple[str, ...], inventory: Inventory) -> list[EntityKey]:
    """Return the entities whose series a container's device ids cover; unknown ids cover none."""
    gpus: list[int] = []
    keys: list[EntityKey] = []
    for token in ids:
        if token == ALL_GPUS:
            gpus += [g.gpu for g in inventory.gpus]
        elif token.startswith("GPU-"):
            by_uuid = inventory.by_uuid(token)
            gpus += [by_uuid.gpu] if by_uuid is not None else []
        elif token.startswith("MIG-"):
            keys += _mig_key(token, inventory)
        else:
            index = token.removeprefix("nvidia")
            if index.isdigit() and inventory.by_index(int(index)) is not None:
                gpus.append(int(index))
    # A whole GPU covers its own series and its MIG instances' series, which carry its UUID.
    for gpu_index in gpus:
        keys.append((gpu_index, -1))
        keys += [i.key for i in inventory.instances if i.gpu == gpu_index]
    return list(dict.fromkeys(keys))


def _mig_key(token: str, inventory: Inventory) -> list[EntityKey]:
    payload = token.partition("::")[0].removeprefix("MIG-")
    if payload.startswith("GPU-"):  # MIG-GPU-<uuid>/<gi>/<ci>
        parts = payload.split("/")
        gpu = inventory.by_uuid(parts[0])
        if gpu is None or len(parts) < 2 or not parts[1].isdigit():
            return []
        instance = inventory.instance(gpu.gpu, int(parts[1]))
        return [instance.key] if instance is not None else []
    owner = inventory.mig_owner(token.partition("::")[0])
    return [owner[0].key] if owner is not None else []


def containers_by_entity(containers: Iterable[Container], inventory: Inventory
                         ) -> dict[EntityKey, tuple[str, ...]]:
    """Return, for each entity, the labels of the containers holding it, each once, in the order
    of the container list."""
    held: dict[EntityKey, dict[str, None]] = {}
    for container in containers:
        if not container.label:
            continue
        for key in entity_keys(container.gpu_ids, inventory):
            held.setdefault(key, {})[container.label] = None
    return {key: tuple(labels) for key, labels in sorted(held.items())}


# --- the attribution source ---------------------------------------------------------------

class ContainerRuntimeSource:
    """The `AttributionSource` of `--container-labels`: the runtime's containers, read at
    most once per collect interval, joined with each poll's inventory."""

    def __init__(self, socket_path: Path, cache_s: float,
                 api: RuntimeApi | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._api = api or RuntimeApi(socket_path)
        self._socket_path = socket_path
        self._cache_s = cache_s
        self._clock = clock
        self._containers: list[Container] | None = None
        self._read_at: float | None = None
        self._failing = False

    async def refresh(self, inventory: Inventory) -> Attribution:
        """Return this poll's attribution, reading the runtime's containers again only when the
        cached answer is older than the collect interval."""
        now = self._clock()
        # Polls start one interval apart give or take a little: a tenth of slack keeps a
        # poll that starts a moment early from reusing an answer one interval old.
        if self._read_at is None or now - self._read_at >= 0.9 * self._cache_s:
            try:
                self._containers = await asyncio.to_thread(self._api.containers)
                self._read_at = now
                if self._failing:
                    log.info("container runtime API %s answers again", self._socket_path)
                self._failing = False
            except RuntimeApiError as exc:
                self._note_failure(str(exc))
            except Exception as exc:  # never let the poll loop die because of the runtime
                self._note_failure(repr(exc))
        if self._containers is None:
            return Attribution()
        return Attribution(containers=containers_by_entity(self._containers, inventory))

    def _note_failure(self, why: str) -> None:
        if not self._failing:
            kept = ("keeping the last containers" if self._containers is not None
                    else "no container labels until it answers")
            log.warning("container runtime API %s: %s (%s)", self._socket_path, why, kept)
        self._failing = True

    def families(self) -> list[Family]:
        """Return no families: this source has no metrics of its own."""
        return []

    async def close(self) -> None:
        """Do nothing: each refresh opens and closes its own connection."""
        return None

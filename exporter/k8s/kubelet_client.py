"""Client of the kubelet pod-resources API v1 over its unix socket (grpc.aio).

One long-lived channel, reused across polls. The kubelet rate-limits this endpoint for every
client on the node together (100 qps, burst 10), so every call is bounded by a deadline,
concurrent callers share one call in flight, and failures back off exponentially instead of
retrying. The kubelet re-creates its socket on restart: a changed file identity (or repeated
UNAVAILABLE) rebuilds the channel. An absent socket is an ordinary, reported failure.
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
import stat
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import grpc
import grpc.aio

from exporter.k8s.attribution import Allocation
from exporter.k8s.proto import ContainerDevices, PodResources, pb, pb_grpc

log = logging.getLogger(__name__)

MAX_RECEIVE_BYTES = 16 * 1024 * 1024
"""What Go consumers of this API allow; grpcio's 4 MiB default is too small on big nodes."""

CHANNEL_OPTIONS: tuple[tuple[str, Any], ...] = (
    ("grpc.max_receive_message_length", MAX_RECEIVE_BYTES),
    # A channel made right after the socket re-appears can inherit the global subchannel
    # pool's back-off and fail UNAVAILABLE; a local pool avoids that.
    ("grpc.use_local_subchannel_pool", 1),
)

SOCKET_ABSENT = "SOCKET_ABSENT"
NOT_A_SOCKET = "NOT_A_SOCKET"
"""Error codes of our own, beside gRPC's status code names."""

_REBUILD_AFTER_UNAVAILABLE = 2


SocketIdentity = tuple[int, int, int]
"""(device, inode, change time): which socket file this is. A re-created socket often gets
the freed inode number back, so the change time is part of it."""


def _identity(st: os.stat_result) -> SocketIdentity:
    return (st.st_dev, st.st_ino, st.st_ctime_ns)


class KubeletCallError(Exception):
    """A call to the kubelet failed; `code` is the gRPC status name and `detail` its message."""

    def __init__(self, code: str, detail: str) -> None:
        super().__init__(f"{code}: {detail}")
        self.code = code
        self.detail = detail


class BackingOff(Exception):
    """No call was made: the previous failure's back-off has not expired yet."""

    def __init__(self, remaining_s: float, last_error: KubeletCallError | None) -> None:
        super().__init__(f"backing off for {remaining_s:.1f}s more")
        self.remaining_s = remaining_s
        self.last_error = last_error


@dataclass(frozen=True, slots=True)
class Backoff:
    """How long to wait before calling the kubelet again after failures: doubling from the initial
    delay up to the maximum, with jitter."""

    initial_s: float = 1.0
    max_s: float = 60.0
    jitter: float = 0.2
    """Fraction of randomisation, so that exporters on many nodes don't retry in step."""

    def delay(self, failures: int) -> float:
        """Return the wait in seconds after this many failures in a row."""
        base = min(self.max_s, self.initial_s * 2 ** max(0, failures - 1))
        return float(base * (1 + random.uniform(-self.jitter, self.jitter)))


def _is_get_disabled(err: grpc.aio.AioRpcError) -> bool:
    code = err.code()
    if code == grpc.StatusCode.UNIMPLEMENTED:
        return True
    details = (err.details() or "").lower()
    return code == grpc.StatusCode.UNKNOWN and "get method disabled" in details


def allocations_of(
    pods: list[PodResources], accept: Callable[[str], bool] = lambda _name: True
) -> list[Allocation]:
    """Flatten pod resources into one entry per (container, resource, device id), keeping
    only resources `accept` says yes to (a crowded node lists many non-GPU devices)."""
    out: list[Allocation] = []
    for pod in pods:
        for container in pod.containers:
            for dev in container.devices:
                if not accept(dev.resource_name):
                    continue
                for device_id in dev.device_ids:
                    out.append(
                        Allocation(
                            pod.namespace, pod.name, container.name, dev.resource_name, device_id
                        )
                    )
    return out


class PodResourcesClient:
    """Fetches pod resources; call `fetch()` once per poll cycle."""

    def __init__(
        self,
        socket_path: str,
        *,
        timeout_s: float = 2.0,
        backoff: Backoff | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.socket_path = socket_path
        self.timeout_s = timeout_s
        self.backoff = backoff or Backoff()
        self._clock = clock
        self._channel: grpc.aio.Channel | None = None
        self._stub: Any | None = None
        self._socket_identity: SocketIdentity | None = None
        self._failures = 0
        self._unavailable_in_row = 0
        self._retry_at = 0.0
        self._last_error: KubeletCallError | None = None
        self._failed_identity: SocketIdentity | None = None
        self._in_flight: asyncio.Future[list[PodResources]] | None = None
        self.get_disabled = False
        """Set once Get answered UNIMPLEMENTED or "Get method disabled"; List is used then."""
        self.channels_built = 0

    # -- channel life cycle -------------------------------------------------------------

    def _socket_stat(self) -> SocketIdentity:
        try:
            st = os.stat(self.socket_path)
        except FileNotFoundError as exc:
            raise KubeletCallError(SOCKET_ABSENT, f"{self.socket_path} does not exist") from exc
        except OSError as exc:
            raise KubeletCallError(SOCKET_ABSENT, f"{self.socket_path}: {exc.strerror}") from exc
        if not stat.S_ISSOCK(st.st_mode):
            raise KubeletCallError(NOT_A_SOCKET, f"{self.socket_path} is not a unix socket")
        return _identity(st)

    async def _drop_channel(self) -> None:
        channel, self._channel, self._stub = self._channel, None, None
        self._socket_identity = None
        if channel is not None:
            await channel.close(grace=None)

    async def _ensure_stub(self) -> Any:
        identity = self._socket_stat()
        if self._stub is not None and identity != self._socket_identity:
            log.info("kubelet socket %s was re-created; reconnecting", self.socket_path)
            await self._drop_channel()
            # A new socket means a (re)started kubelet: forget the old one's back-off/quirks.
            self._failures = 0
            self._retry_at = 0.0
            self.get_disabled = False
        if self._stub is None:
            self._channel = grpc.aio.insecure_channel(
                f"unix://{self.socket_path}", options=list(CHANNEL_OPTIONS)
            )
            self._stub = pb_grpc.PodResourcesListerStub(self._channel)
            self._socket_identity = identity
            self.channels_built += 1
        return self._stub

    async def close(self) -> None:
        """Close the channel to the kubelet."""
        await self._drop_channel()

    # -- calls --------------------------------------------------------------------------

    def backoff_remaining(self) -> float:
        """Return how many seconds are left before the next call may be made (0 when none is
        running)."""
        return max(0.0, self._retry_at - self._clock())

    async def fetch(self, pod: tuple[str, str] | None = None) -> list[PodResources]:
        """Return the resources of all pods, or with `pod=(namespace, name)` only that pod's.

        Raise `KubeletCallError` on failure and `BackingOff` while a back-off runs. Concurrent
        callers share the call in flight."""
        if self._in_flight is not None:
            return await asyncio.shield(self._in_flight)
        remaining = self.backoff_remaining()
        if remaining > 0 and not self._socket_changed():
            raise BackingOff(remaining, self._last_error)
        loop = asyncio.get_running_loop()
        future: asyncio.Future[list[PodResources]] = loop.create_future()
        self._in_flight = future
        try:
            result = await self._fetch_once(pod)
        except asyncio.CancelledError:
            future.cancel()
            raise
        except Exception as exc:
            future.set_exception(exc)
            # Nobody else may be waiting; mark the exception retrieved.
            future.exception()
            raise
        else:
            future.set_result(result)
            return result
        finally:
            self._in_flight = None

    def _current_identity(self) -> SocketIdentity | None:
        try:
            st = os.stat(self.socket_path)
        except OSError:
            return None
        return _identity(st)

    def _socket_changed(self) -> bool:
        """Return whether the socket differs from the one the last failure happened on, since a
        restarted kubelet is worth trying at once, back-off or not."""
        current = self._current_identity()
        return current is not None and current != self._failed_identity

    async def _fetch_once(self, pod: tuple[str, str] | None) -> list[PodResources]:
        try:
            stub = await self._ensure_stub()
            pods = await self._call(stub, pod)
        except KubeletCallError as err:
            await self._record_failure(err)
            raise
        self._failures = 0
        self._unavailable_in_row = 0
        self._retry_at = 0.0
        self._last_error = None
        return pods

    async def _call(
        self, stub: Any, pod: tuple[str, str] | None
    ) -> list[PodResources]:
        try:
            if pod is not None and not self.get_disabled:
                namespace, name = pod
                try:
                    reply = await stub.Get(
                        pb.GetPodResourcesRequest(pod_name=name, pod_namespace=namespace),
                        timeout=self.timeout_s,
                    )
                    return [reply.pod_resources]
                except grpc.aio.AioRpcError as err:
                    if not _is_get_disabled(err):
                        raise
                    log.info(
                        "kubelet Get is unavailable (%s: %s); using List filtered to this pod",
                        err.code().name,
                        err.details(),
                    )
                    self.get_disabled = True
            listed = await stub.List(pb.ListPodResourcesRequest(), timeout=self.timeout_s)
        except grpc.aio.AioRpcError as err:
            raise KubeletCallError(err.code().name, err.details() or "") from err
        pods = list(listed.pod_resources)
        if pod is not None:
            namespace, name = pod
            pods = [p for p in pods if p.namespace == namespace and p.name == name]
        return pods

    async def allocatable(self) -> list[ContainerDevices]:
        """Return the devices the kubelet can allocate, per resource (`doctor` shows them)."""
        stub = await self._ensure_stub()
        try:
            reply = await stub.GetAllocatableResources(
                pb.AllocatableResourcesRequest(), timeout=self.timeout_s
            )
        except grpc.aio.AioRpcError as err:
            raise KubeletCallError(err.code().name, err.details() or "") from err
        return list(reply.devices)

    async def _record_failure(self, err: KubeletCallError) -> None:
        self._last_error = err
        self._failed_identity = self._current_identity()
        if err.code in (SOCKET_ABSENT, NOT_A_SOCKET):
            # Nothing to connect to; checking again is one stat(), and the socket should be
            # used as soon as it appears, so no back-off here.
            await self._drop_channel()
            return
        self._failures += 1
        if err.code == grpc.StatusCode.UNAVAILABLE.name:
            self._unavailable_in_row += 1
            if self._unavailable_in_row >= _REBUILD_AFTER_UNAVAILABLE:
                log.info("kubelet unavailable %d times in a row; rebuilding the channel",
                         self._unavailable_in_row)
                self._unavailable_in_row = 0
                await self._drop_channel()
        else:
            self._unavailable_in_row = 0
        self._retry_at = self._clock() + self.backoff.delay(self._failures)

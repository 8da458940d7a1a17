"""The attribution source the sampler awaits once per poll: kubelet allocations joined with
the inventory, plus the self-metrics that explain empty or missing pod labels.

`refresh` never raises and is bounded by its own deadline; on any failure it keeps the last
allocations the kubelet gave (re-joined with the current inventory), so a kubelet restart or a
rate-limit answer neither blanks nor freezes labels for longer than the outage.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from collections.abc import Callable
from typing import Protocol

from exporter.devices.model import Inventory
from exporter.k8s.attribution import (
    MALFORMED_ID,
    UNKNOWN_DEVICE,
    Allocation,
    AttributionResult,
    DeviceResolver,
    attribute,
)
from exporter.k8s.client import (
    BackingOff,
    Backoff,
    KubeletCallError,
    PodResourcesClient,
    allocations_of,
)
from exporter.k8s.config import KubernetesConfig
from exporter.k8s.types import NO_ATTRIBUTION, Attribution
from exporter.series import Family, Labels, Sample

log = logging.getLogger(__name__)


_MALFORMED_MEMORY = 4096


class AttributionSource(Protocol):
    async def refresh(self, inventory: Inventory) -> Attribution: ...
    def families(self) -> list[Family]: ...
    async def close(self) -> None: ...


class PodMetadata(Protocol):
    """What enrichment offers (see `exporter.k8s.enrich`)."""

    def start(self) -> None: ...
    def labels_for(self, namespace: str, pod: str) -> Labels: ...
    def families(self) -> list[Family]: ...
    def close(self) -> None: ...


class KubeletSource:
    def __init__(
        self,
        config: KubernetesConfig,
        *,
        backoff: Backoff | None = None,
        metadata: PodMetadata | None = None,
        client: PodResourcesClient | None = None,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self.config = config
        self.client = client or PodResourcesClient(
            config.pod_resources_socket, timeout_s=config.refresh_timeout_s, backoff=backoff
        )
        self._wall_clock = wall_clock
        self._resolver = DeviceResolver()
        self._pod_scope: tuple[str, str] | None = None
        self._scope_misconfigured = False
        if config.scope == "pod":
            if config.pod_name and config.pod_namespace:
                self._pod_scope = (config.pod_namespace, config.pod_name)
            else:
                # Without our identity nothing can be shown safely: show nothing.
                self._scope_misconfigured = True
                log.error("--scope pod needs POD_NAME and POD_NAMESPACE; exposing no devices")
        self._allocations: list[Allocation] | None = None
        self._result = AttributionResult(self._empty_attribution())
        self._up = False
        self._last_success: float | None = None
        self._errors: Counter[str] = Counter()
        self._malformed_seen: set[Allocation] = set()
        self._parse_errors_total = 0
        self._lock = asyncio.Lock()
        self._metadata = metadata
        self._metadata_started = False

    def _empty_attribution(self) -> Attribution:
        return Attribution(visible=frozenset()) if self.config.scope == "pod" else NO_ATTRIBUTION

    # -- the AttributionSource protocol ---------------------------------------------------

    async def refresh(self, inventory: Inventory) -> Attribution:
        # Single-flight: a caller arriving during a refresh waits for it and gets its result.
        if self._lock.locked():
            async with self._lock:
                return self._result.attribution
        async with self._lock:
            try:
                deadline = 2 * self.config.refresh_timeout_s + 0.5
                await asyncio.wait_for(self._refresh(inventory), timeout=deadline)
            except TimeoutError:
                self._fail(KubeletCallError("DEADLINE_EXCEEDED", "refresh deadline exceeded"))
            except Exception:  # never let the poll loop die because of the kubelet
                log.exception("kubelet attribution refresh failed")
                self._errors["INTERNAL"] += 1
                self._up = False
            return self._result.attribution

    def families(self) -> list[Family]:
        result = self._result
        unattributed = Counter(u.reason for u in result.unattributed)
        families = [
            Family(
                "gpu_exporter_kubelet_up",
                "gauge",
                "1 if the last call to the kubelet pod-resources API succeeded.",
                (Sample((), 1.0 if self._up else 0.0),),
            ),
        ]
        if self._last_success is not None:
            families.append(
                Family(
                    "gpu_exporter_kubelet_last_refresh_success_timestamp_seconds",
                    "gauge",
                    "Unix time of the last successful pod-resources refresh.",
                    (Sample((), self._last_success),),
                )
            )
        families += [
            Family(
                "gpu_exporter_kubelet_refresh_errors",
                "counter",
                "Failed pod-resources refreshes, by gRPC status code (or SOCKET_ABSENT).",
                tuple(
                    Sample((("code", code),), float(n)) for code, n in sorted(self._errors.items())
                ),
            ),
            Family(
                "gpu_exporter_unattributed_devices",
                "gauge",
                "Devices allocated under an accepted resource name that could not be mapped "
                "to a GPU or MIG instance (unknown_device: not in this exporter's inventory; "
                "malformed_id: the device id could not be parsed).",
                tuple(
                    Sample((("reason", reason),), float(unattributed[reason]))
                    for reason in (MALFORMED_ID, UNKNOWN_DEVICE)
                ),
            ),
            Family(
                "gpu_exporter_device_id_parse_errors",
                "counter",
                "Distinct (container, device id) allocations whose device id could not be "
                "parsed; each is logged once.",
                (Sample((), float(self._parse_errors_total)),),
            ),
            Family(
                "gpu_exporter_pod_gpu_allocation",
                "gauge",
                "1 for each container holding a shared GPU or MIG instance (time-sliced "
                "replicas, several containers); join device metrics on gpu/UUID/GPU_I_ID.",
                tuple(Sample(labels, 1.0) for labels in result.allocation_rows),
            ),
        ]
        if self._metadata is not None:
            families += self._metadata.families()
        return families

    async def close(self) -> None:
        await self.client.close()
        if self._metadata is not None:
            await asyncio.to_thread(self._metadata.close)

    # -- internals --------------------------------------------------------------------------

    async def _refresh(self, inventory: Inventory) -> None:
        if self._scope_misconfigured:
            return
        self._start_metadata()
        try:
            pods = await self.client.fetch(self._pod_scope)
        except BackingOff:
            pass  # keep what we had; the failure was counted when it happened
        except KubeletCallError as err:
            self._fail(err)
        else:
            self._allocations = allocations_of(pods)
            self._up = True
            self._last_success = self._wall_clock()
        if self._allocations is not None:
            self._result = self._join(self._allocations, inventory)

    def _fail(self, err: KubeletCallError) -> None:
        self._errors[err.code] += 1
        if self._up or sum(self._errors.values()) == 1:
            log.warning("kubelet pod-resources refresh failed: %s (keeping last allocations)", err)
        self._up = False

    def _join(self, allocations: list[Allocation], inventory: Inventory) -> AttributionResult:
        extra = self._metadata.labels_for if self._metadata is not None else _no_labels
        result = attribute(
            allocations,
            inventory,
            self._resolver,
            extra_resource_names=self.config.resource_names,
            pod_scope=self._pod_scope,
            extra_labels=extra,
        )
        for alloc, err in result.parse_errors:
            if alloc not in self._malformed_seen:
                if len(self._malformed_seen) >= _MALFORMED_MEMORY:
                    self._malformed_seen.clear()  # bounded memory under endless pod churn
                self._malformed_seen.add(alloc)
                self._parse_errors_total += 1
                log.warning(
                    "ignoring malformed device id %r of %s/%s container %s (resource %s): %s",
                    err.shown, alloc.namespace, alloc.pod, alloc.container, alloc.resource,
                    err.reason,
                )
        return result

    def _start_metadata(self) -> None:
        if self._metadata_started:
            return
        self._metadata_started = True
        if self._metadata is None and self.config.pod_labels:
            try:
                from exporter.k8s.enrich import PodMetadataWatcher  # kubernetes only if asked

                self._metadata = PodMetadataWatcher.from_config(self.config)
            except Exception:
                log.exception("pod label enrichment disabled: could not set up the API client")
                return
        if self._metadata is not None:
            self._metadata.start()


def _no_labels(namespace: str, pod: str) -> Labels:
    return ()


def build_source(config: KubernetesConfig) -> AttributionSource:
    """The attribution source for these settings (the caller checks `config.enabled`)."""
    return KubeletSource(config)

"""The attribution source the sampler awaits once per poll: kubelet allocations joined with
the inventory, plus the self-metrics that explain empty or missing pod labels.

`refresh` never raises and is bounded by its own deadline; on any failure it keeps the last
allocations the kubelet gave (re-joined with the current inventory), so a kubelet restart or a
rate-limit answer neither blanks nor freezes labels for longer than the outage.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import replace
from typing import Protocol

from exporter.devices.model import Entity, EntityKey, Inventory
from exporter.devices.process_reads import ProcessReads
from exporter.k8s.attribution import (
    MALFORMED_ID,
    UNKNOWN_DEVICE,
    Allocation,
    AttributionResult,
    DeviceResolver,
    attribute,
    resource_accepted,
)
from exporter.k8s.config import KubernetesConfig
from exporter.k8s.dra import DraClaims
from exporter.k8s.kubelet_client import (
    BackingOff,
    Backoff,
    KubeletCallError,
    PodResourcesClient,
    allocations_of,
)
from exporter.k8s.process_use import ContainerUsage, ProcessUsage
from exporter.k8s.proto import PodResources
from exporter.k8s.types import NO_ATTRIBUTION, Attribution, AttributionSource
from exporter.k8s.virtual_gpus import split
from exporter.selfmetrics import (
    DEVICE_ID_PARSE_ERRORS,
    KUBELET_LAST_REFRESH_SUCCESS,
    KUBELET_REFRESH_ERRORS,
    KUBELET_UP,
    POD_GPU_ALLOCATION,
    POD_GPU_MEMORY_USED,
    POD_GPU_SM_UTILIZATION,
    UNATTRIBUTED_DEVICES,
    UNATTRIBUTED_GPU_PROCESSES,
)
from exporter.series import Family, Labels, Sample

log = logging.getLogger(__name__)


_MALFORMED_MEMORY = 4096


class PodMetadata(Protocol):
    """What enrichment offers (see `exporter.k8s.pod_metadata`)."""

    def start(self) -> None:
        """Start following the pods."""
        ...
    def labels_for(self, namespace: str, pod: str) -> Labels:
        """Return the labels that series attributed to this pod get."""
        ...
    def container_of(self, pod_uid: str, container_id: str) -> tuple[str, str, str] | None:
        """Return the namespace, pod and container name of a running container, by pod UID and
        runtime id, or None when it is unknown."""
        ...
    def families(self) -> list[Family]:
        """Return the metric families about following the pods."""
        ...
    def close(self) -> None:
        """Stop following the pods."""
        ...


class KubeletSource:
    """The attribution source of Kubernetes: the kubelet's allocations, joined each poll with the
    inventory and, when asked, with pod labels, DRA claims and per-process use."""

    def __init__(
        self,
        config: KubernetesConfig,
        *,
        backoff: Backoff | None = None,
        metadata: PodMetadata | None = None,
        client: PodResourcesClient | None = None,
        process_reads: ProcessReads | None = None,
        proc_root: str = "/proc",
        wall_clock: Callable[[], float] = time.time,
        dra: DraClaims | None = None,
    ) -> None:
        self.config = config
        self._dra = dra if dra is not None else (
            DraClaims.from_config(config) if config.dra else None)
        self.client = client or PodResourcesClient(
            config.pod_resources_socket, timeout_s=config.refresh_timeout_s, backoff=backoff
        )
        self._wall_clock = wall_clock
        self._resolver = DeviceResolver(config.gpu_id_type)
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
        self._metadata_task: asyncio.Task[None] | None = None
        self._process_reads = process_reads
        self._proc_root = proc_root
        self._processes: ProcessUsage | None = None
        self._usage: list[ContainerUsage] = []
        if config.process_attribution and process_reads is None:
            log.warning("--kubernetes.process-attribution needs the NVML backend; disabled")
        if config.virtual_gpus and process_reads is None:
            log.warning("--kubernetes-virtual-gpus: each holder's FB_USED and GPU_UTIL come "
                        "from NVML's process list, which needs the NVML backend; left out")

    def _empty_attribution(self) -> Attribution:
        return Attribution(visible=frozenset()) if self.config.scope == "pod" else NO_ATTRIBUTION

    # -- the AttributionSource protocol ---------------------------------------------------

    async def refresh(self, inventory: Inventory) -> Attribution:
        """Return this poll's attribution; a caller arriving while a refresh runs waits for it and
        gets its result, and a failed refresh is counted and keeps the last allocations."""
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
        """Return the kubelet metric families (whether it answers, the last success, refresh errors,
        unattributed devices) and those of the sources it uses."""
        result = self._result
        unattributed = Counter(u.reason for u in result.unattributed)
        families = [KUBELET_UP.single(1.0 if self._up else 0.0)]
        if self._last_success is not None:
            families.append(KUBELET_LAST_REFRESH_SUCCESS.single(self._last_success))
        families += [
            KUBELET_REFRESH_ERRORS.family(
                KUBELET_REFRESH_ERRORS.sample(float(n), code=code)
                for code, n in sorted(self._errors.items())
            ),
            UNATTRIBUTED_DEVICES.family(
                UNATTRIBUTED_DEVICES.sample(float(unattributed[reason]), reason=reason)
                for reason in (MALFORMED_ID, UNKNOWN_DEVICE)
            ),
            DEVICE_ID_PARSE_ERRORS.single(float(self._parse_errors_total)),
            POD_GPU_ALLOCATION.family(Sample(labels, 1.0) for labels in result.allocation_rows),
        ]
        if self._metadata is not None:
            families += self._metadata.families()
        if self._processes is not None and self.config.process_attribution:
            families += self._usage_families()
        if self._dra is not None:
            families += self._dra.families()
        return families

    async def close(self) -> None:
        """Close the kubelet client, the DRA watch and the pod metadata watch."""
        await self.client.close()
        if self._dra is not None:
            await asyncio.to_thread(self._dra.close)
        if self._metadata_task is not None:
            if not self._metadata_task.done():
                self._metadata_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._metadata_task
        if self._metadata is not None:
            await asyncio.to_thread(self._metadata.close)

    # -- internals --------------------------------------------------------------------------

    async def _refresh(self, inventory: Inventory) -> None:
        if self._scope_misconfigured:
            return
        self._start_metadata()
        if self._dra is not None:
            self._dra.start()  # Starts once; the ResourceSlice watch runs in its own thread.
        try:
            pods = await self.client.fetch(self._pod_scope)
        except BackingOff:
            pass  # Keep what we had; the failure was counted when it happened.
        except KubeletCallError as err:
            self._fail(err)
        else:
            if not self._up and self._errors:
                log.info("kubelet pod-resources API answers again")
            # A large node's answer takes tens of ms to flatten: not on the event loop,
            # where scrapes are served.
            self._allocations = await asyncio.to_thread(self._flatten, pods)
            self._up = True
            self._last_success = self._wall_clock()
        if self._allocations is not None and self._last_success is not None and \
                self._wall_clock() - self._last_success > self.config.allocations_max_age_s:
            log.warning("no kubelet answer for %.0fs: dropping pod labels rather than showing "
                        "stale owners", self._wall_clock() - self._last_success)
            self._allocations = None
            self._result = AttributionResult(self._empty_attribution())
        if self._allocations is not None:
            # Split with the last process figures first: a process read cut short by the
            # refresh deadline leaves this poll with those, not with none.
            self._result = self._split(self._join(self._allocations, inventory))
        if self._processes is not None:
            await self._sample_processes()
            self._result = self._split(self._result)

    def _flatten(self, pods: list[PodResources]) -> list[Allocation]:
        allocations = allocations_of(pods, self._accepts)
        if self._dra is not None:
            allocations += self._dra.allocations(pods)
        return allocations

    def _accepts(self, resource: str) -> bool:
        return resource_accepted(resource, self.config.resource_names)

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
            virtual_gpus=self.config.virtual_gpus,
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

    def _split(self, result: AttributionResult) -> AttributionResult:
        """Return the result with each sharer's own FB_USED and GPU_UTIL, when virtual GPUs are
        on."""
        attribution = result.attribution
        if not self.config.virtual_gpus or not attribution.sharers:
            return result
        uses = self._processes.entities if self._processes is not None else None
        return replace(result, attribution=replace(
            attribution, split=split(attribution.sharers, uses)))

    async def _sample_processes(self) -> None:
        assert self._processes is not None
        owned = set(self._result.attribution.owners)
        shared: dict[EntityKey, Entity] = {}
        for _, found in self._result.resolved:
            if found.entity.key not in owned:
                shared[found.entity.key] = found.entity
        # With a read still stuck in the driver this keeps the last figures.
        await self._processes.refresh(list(shared.values()))
        usage = self._processes.usage
        if self._pod_scope is not None:
            usage = [u for u in usage if (u.container[0], u.container[1]) == self._pod_scope]
        self._usage = usage

    def _usage_families(self) -> list[Family]:
        extra = self._metadata.labels_for if self._metadata is not None else _no_labels
        memory: list[Sample] = []
        sm: list[Sample] = []
        for u in self._usage:
            namespace, pod, container = u.container
            labels: Labels = (("gpu", str(u.entity.gpu)), ("UUID", u.entity.uuid))
            if u.entity.gpu_instance_id is not None:
                labels += (("GPU_I_ID", str(u.entity.gpu_instance_id)),)
            labels += (("pod", pod), ("namespace", namespace), ("container", container),
                       *extra(namespace, pod))
            if u.memory_bytes is not None:
                memory.append(Sample(labels, u.memory_bytes))
            if u.sm_ratio is not None:
                sm.append(Sample(labels, u.sm_ratio))
        families = [POD_GPU_MEMORY_USED.family(memory), POD_GPU_SM_UTILIZATION.family(sm)]
        if self._pod_scope is None and self._processes is not None:
            families.append(UNATTRIBUTED_GPU_PROCESSES.single(float(self._processes.unattributed)))
        return families

    def _start_metadata(self) -> None:
        """Start enrichment once, in the background. Setting up the API client (importing the
        kubernetes package takes most of a second, then credentials are read) must neither block
        the event loop that serves scrapes nor count against a poll's deadline."""
        if self._metadata_started:
            return
        self._metadata_started = True
        wants_watch = self.config.wants_pod_metadata or (
            self.config.wants_process_reads and self._process_reads is not None
        )
        if self._metadata is not None:
            self._use_metadata(self._metadata)
        elif wants_watch:
            self._metadata_task = asyncio.create_task(self._build_metadata())

    async def _build_metadata(self) -> None:
        try:
            metadata = await asyncio.to_thread(_watcher_from_config, self.config)
        except Exception:
            log.exception("pod metadata from the API server disabled (pod labels, and the "
                          "containers of GPU processes for process attribution and virtual "
                          "GPUs): could not set up the API client")
            return
        self._use_metadata(metadata)

    def _use_metadata(self, metadata: PodMetadata) -> None:
        metadata.start()
        if self.config.wants_process_reads and self._process_reads is not None:
            self._processes = ProcessUsage(
                self._process_reads, metadata.container_of, self._proc_root
            )
        self._metadata = metadata

    async def wait_metadata(self, limit_s: float) -> bool:
        """Wait, for a bounded time, until enrichment is set up, and return whether it is (tests
        use this)."""
        if self._metadata_task is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(self._metadata_task), limit_s)
        return self._metadata is not None


def _watcher_from_config(config: KubernetesConfig) -> PodMetadata:
    from exporter.k8s.pod_metadata import PodMetadataWatcher  # kubernetes only when asked for

    return PodMetadataWatcher.from_config(config)


def _no_labels(namespace: str, pod: str) -> Labels:  # noqa: ARG001 (a labels_for)
    return ()


def build_source(config: KubernetesConfig, process_reads: ProcessReads | None = None,
                 metadata: PodMetadata | None = None, proc_root: str = "/proc"
                 ) -> AttributionSource:
    """Return the attribution source for these settings; the caller checks `config.enabled`.

    `process_reads` (the device layer's per-process reads, run on the poll thread) is needed only
    for `--kubernetes.process-attribution` and `--kubernetes-virtual-gpus`. `metadata` replaces
    the API-server watch (the simulated node uses it for its pods); with None, the watch is used
    when the settings need one. `proc_root` is where the processes' cgroup files are read."""
    return KubeletSource(config, process_reads=process_reads, metadata=metadata,
                         proc_root=proc_root)

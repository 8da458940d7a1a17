"""The ResourceSlices of NVIDIA's DRA driver on this node: which GPU or MIG device a claimed
(pool, device name) is.

The kubelet reports a DRA allocation as `ClaimResource{driver_name, pool_name, device_name}`;
only the driver's ResourceSlices (`resource.k8s.io/v1`) say which physical device that name
is. NVIDIA's driver (`gpu.nvidia.com`, NVIDIA/k8s-dra-driver-gpu) publishes one pool per node,
named after the node, with devices named

- `gpu-<minor>` for a full GPU: attributes `type: gpu`, `uuid: GPU-…`, `productName`,
  `brand`, `architecture`, versions, `resource.kubernetes.io/pciBusID` (releases 25.3 also
  had `index` and `minor`);
- `gpu-<parent minor>-mig-<profile without dots>-<profile id>-<placement start>` for a MIG
  device (25.3/25.8: `gpu-<minor>-mig-<profile id>-<start>-<size>`): `type: mig`,
  `parentUUID`, `profile` (`1g.10gb`), and `uuid: MIG-…` for MIG devices that exist (static
  MIG). Devices offered for dynamic MIG have no `uuid` (the MIG device is created only when
  a claim is prepared), and `type: vfio` devices are passed through to VMs: neither can be
  mapped to an NVML device here.

The mapping therefore relies on the `uuid` attribute alone, never on the device name's
format. An attribute is `{string|int|bool|version: value}` under `spec.devices[].attributes`
(v1beta1 nested it under `basic`; both are read). When a pool's slices carry different
`spec.pool.generation`s, only the newest generation counts, as for the scheduler.

Required RBAC (ClusterRole):

    rules:
      - apiGroups: ["resource.k8s.io"]
        resources: ["resourceslices"]
        verbs: ["get", "list", "watch"]
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from exporter.k8s.apiclient import api_client
from exporter.k8s.apiwatch import WatchCall, WatchLoop
from exporter.k8s.config import DRA_GPU_DRIVER

DeviceRef = tuple[str, str]
"""(pool name, device name), as a ClaimResource names a device."""


@dataclass(frozen=True, slots=True)
class SliceDevice:
    """One device a ResourceSlice offers: its kind, its UUID and, for a MIG device, its profile."""

    kind: str
    """The driver's `type` attribute: gpu, mig, vfio (empty when absent)."""
    uuid: str | None
    """`GPU-…` or `MIG-…`; None when the slice gives none (dynamic MIG, vfio)."""
    profile: str | None = None
    """MIG profile (`1g.10gb`)."""


def _attribute(attributes: Mapping[str, Any], name: str) -> str | None:
    # A name without a domain is in the driver's own domain: both spellings are the same.
    value = attributes.get(name) or attributes.get(f"{DRA_GPU_DRIVER}/{name}")
    if not isinstance(value, Mapping):
        return None
    for kind in ("string", "version", "int", "bool"):
        if value.get(kind) is not None:
            return str(value[kind])
    return None


@dataclass(frozen=True, slots=True)
class ParsedSlice:
    """The devices of one ResourceSlice, with its pool and the pool's generation."""

    pool: str
    generation: int
    devices: Mapping[str, SliceDevice]


def parse_slice(obj: Mapping[str, Any]) -> ParsedSlice | None:
    """Return the devices of one ResourceSlice object (as JSON), or None when the slice belongs
    to another driver."""
    spec = obj.get("spec") or {}
    if spec.get("driver") != DRA_GPU_DRIVER:
        return None
    pool = spec.get("pool") or {}
    devices: dict[str, SliceDevice] = {}
    for device in spec.get("devices") or []:
        name = device.get("name")
        if not name:
            continue
        attributes = device.get("attributes") or (device.get("basic") or {}).get(
            "attributes") or {}
        devices[str(name)] = SliceDevice(
            kind=_attribute(attributes, "type") or "",
            uuid=_attribute(attributes, "uuid"),
            profile=_attribute(attributes, "profile"),
        )
    generation = pool.get("generation")
    return ParsedSlice(str(pool.get("name") or ""),
                       generation if isinstance(generation, int) else 0, devices)


class SliceIndex:
    """The devices offered by the slices seen, by pool and device name; safe to read from any
    thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._slices: dict[str, ParsedSlice] = {}
        self._devices: Mapping[DeviceRef, SliceDevice] = {}

    def lookup(self, pool: str, device: str) -> SliceDevice | None:
        """Return the device with this name in this pool, or None when no slice seen offers it."""
        return self._devices.get((pool, device))

    def __len__(self) -> int:
        """Return how many devices the slices seen offer."""
        return len(self._devices)

    def replace(self, slices: Mapping[str, ParsedSlice]) -> None:
        """Replace every slice seen with these, as a new list of the slices gives them."""
        with self._lock:
            self._slices = dict(slices)
            self._publish()

    def put(self, name: str, parsed: ParsedSlice | None) -> None:
        """Add or replace one slice (None removes it)."""
        with self._lock:
            if parsed is None:
                self._slices.pop(name, None)
            else:
                self._slices[name] = parsed
            self._publish()

    def _publish(self) -> None:
        newest: dict[str, int] = {}
        for parsed in self._slices.values():
            newest[parsed.pool] = max(newest.get(parsed.pool, parsed.generation),
                                      parsed.generation)
        devices: dict[DeviceRef, SliceDevice] = {}
        for parsed in self._slices.values():
            if parsed.generation == newest[parsed.pool]:
                for name, device in parsed.devices.items():
                    devices[(parsed.pool, name)] = device
        # Readers see the old or the new map, never a half-built one.
        self._devices = devices


class ResourceSliceWatch(WatchLoop):
    """Keeps a SliceIndex current from one list + watch of this node's ResourceSlices."""

    def __init__(
        self,
        node_name: str,
        index: SliceIndex | None = None,
        *,
        api_factory: Callable[[], Any] = api_client,
        retry_s: float = 5.0,
        watch_timeout_s: int = 300,
    ) -> None:
        super().__init__(f"resourceslices-{node_name}", api_factory=api_factory,
                         retry_s=retry_s, watch_timeout_s=watch_timeout_s)
        self.node_name = node_name
        self.index = index if index is not None else SliceIndex()
        self._resource_api: Any = None

    def _setup(self, api: Any) -> None:
        from kubernetes import client as k8s_client

        if not hasattr(k8s_client, "ResourceV1Api"):
            raise RuntimeError("the kubernetes client package predates resource.k8s.io/v1 "
                               "(need kubernetes >= 34)")
        self._resource_api = k8s_client.ResourceV1Api(api)

    def _list_call(self) -> WatchCall:
        # Other drivers' slices on this node are few; the driver is filtered here.
        return self._resource_api.list_resource_slice, {
            "field_selector": f"spec.nodeName={self.node_name}"}

    def _read(self) -> str | None:
        func, kwargs = self._list_call()
        response = func(**kwargs, _preload_content=False, _request_timeout=30)
        body = json.loads(response.data)
        slices: dict[str, ParsedSlice] = {}
        for item in body.get("items") or []:
            parsed = parse_slice(item)
            if parsed is not None:
                slices[str((item.get("metadata") or {}).get("name", ""))] = parsed
        self.index.replace(slices)
        return str((body.get("metadata") or {}).get("resourceVersion") or "") or None

    def _watch_call(self) -> WatchCall:
        return self._list_call()

    def _apply(self, kind: str, obj: Mapping[str, Any]) -> None:
        name = str((obj.get("metadata") or {}).get("name", ""))
        self.index.put(name, None if kind == "DELETED" else parse_slice(obj))

"""Pod UID and allow-listed pod labels from the Kubernetes API server.

Imported only when series need pod metadata (`--kubernetes.pod-labels`, dcgm-exporter's
pod labels or pod UID) or process attribution needs pod UIDs, so the `kubernetes` package
stays out of every other code path (`exporter.k8s.source` builds the watcher off the event
loop). One list + watch of this node's pods runs in a background thread and keeps an
in-memory map; scrapes and polls only read that map (never a request per scrape).

Required RBAC (a ClusterRole bound to the exporter's ServiceAccount):

    rules:
      - apiGroups: [""]
        resources: ["pods"]
        verbs: ["get", "list", "watch"]

With `--scope pod` only the sidecar's own pod is watched (`metadata.name=$POD_NAME` in
`$POD_NAMESPACE`), so a namespaced Role with the same rule is enough. `doctor` checks the
rule with `exporter.k8s.pod_access`; credentials come from `exporter.k8s.apiclient`.

Labels added to series of attributed devices (after `pod`, and on allocation rows): see
`exporter.k8s.pod_labels` (`pod_uid`, `label_<key>` with `--kubernetes.pod-labels`, the bare
sanitised key with dcgm-exporter's pod labels). A pod label whose name would replace one of
the series' own labels is dropped, logged once and counted in
`gpu_exporter_pod_labels_dropped_total`.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Mapping
from typing import Any

from exporter.k8s.apiclient import api_client
from exporter.k8s.apiwatch import WatchCall, WatchLoop
from exporter.k8s.config import KubernetesConfig
from exporter.k8s.pod_labels import PodLabelRules
from exporter.k8s.pod_map import PodMap, ReadsPodMap
from exporter.selfmetrics import KUBERNETES_API_ERRORS, KUBERNETES_API_UP
from exporter.series import Family

log = logging.getLogger(__name__)


class PodMetadataWatcher(ReadsPodMap, WatchLoop):
    """Keeps the pod map (`exporter.k8s.pod_map`) current from one list + watch of the pods
    (`exporter.k8s.apiwatch.WatchLoop`: relist after a failure or 410, polling if the watch is
    refused)."""

    def __init__(
        self,
        api: Any,
        rules: PodLabelRules,
        *,
        node_name: str | None = None,
        pod: tuple[str, str] | None = None,
        watch_timeout_s: int = 300,
        retry_s: float = 5.0,
    ) -> None:
        if node_name is None and pod is None:
            raise ValueError("enrichment needs NODE_NAME (or, with --scope pod, POD_NAME)")
        super().__init__("pod metadata", api_factory=lambda: api, retry_s=retry_s,
                         watch_timeout_s=watch_timeout_s)
        self._client = api
        self._core: Any = None
        self._map = PodMap(rules)
        self._node_name = node_name
        self._pod = pod

    @classmethod
    def from_config(
        cls, config: KubernetesConfig, *, kubeconfig: str | None = None
    ) -> PodMetadataWatcher:
        """Return a watcher of the pods the Kubernetes settings need: this node's, or only the
        exporter's own pod with `--scope pod`."""
        pod = None
        if config.scope == "pod" and config.pod_name and config.pod_namespace:
            pod = (config.pod_namespace, config.pod_name)
        # Process attribution and virtual GPUs alone use the watch for UIDs and container ids
        # only: the rules then add nothing to series.
        return cls(api_client(kubeconfig), PodLabelRules.from_config(config),
                   node_name=config.node_name, pod=pod)

    # -- reading --------------------------------------------------------------------------

    def families(self) -> list[Family]:
        """Return the watcher's metric families: whether the API server answers, its errors, and the
        pod map's own."""
        return [
            KUBERNETES_API_UP.single(1.0 if self.up else 0.0),
            KUBERNETES_API_ERRORS.single(float(self.errors)),
            *self._map.families(),
        ]

    def close(self) -> None:
        """Stop the watch and close the API client."""
        super().close()
        with contextlib.suppress(Exception):
            self._client.close()  # also when the thread never started

    # -- the watch ------------------------------------------------------------------------

    def _setup(self, api: Any) -> None:
        from kubernetes import client as k8s_client

        self._core = k8s_client.CoreV1Api(api)

    def _watch_call(self) -> WatchCall:
        if self._pod is not None:
            namespace, name = self._pod
            return self._core.list_namespaced_pod, {
                "namespace": namespace,
                "field_selector": f"metadata.name={name}",
            }
        return self._core.list_pod_for_all_namespaces, {
            "field_selector": f"spec.nodeName={self._node_name}"
        }

    def _read(self) -> str | None:
        func, kwargs = self._watch_call()
        resp = func(**kwargs, _preload_content=False, _request_timeout=30)
        body = json.loads(resp.data)
        self._map.replace_all(body.get("items") or [])
        return str((body.get("metadata") or {}).get("resourceVersion") or "") or None

    def _apply(self, kind: str, obj: Mapping[str, Any]) -> None:
        if kind in ("ADDED", "MODIFIED"):
            self._map.upsert(obj)
        elif kind == "DELETED":
            self._map.remove(obj)


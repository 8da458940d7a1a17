"""Pod UID and allow-listed pod labels from the Kubernetes API server.

Imported only when series need pod metadata (`--kubernetes.pod-labels`, dcgm-exporter's
pod labels or pod UID) or process attribution needs pod UIDs, so the `kubernetes` package
stays out of every other code path. One list + watch of this node's pods runs in a
background thread and keeps an in-memory map; scrapes and polls only read that map (never a
request per scrape).

Required RBAC (a ClusterRole bound to the exporter's ServiceAccount):

    rules:
      - apiGroups: [""]
        resources: ["pods"]
        verbs: ["get", "list", "watch"]

With `--scope pod` only the sidecar's own pod is watched (`metadata.name=$POD_NAME` in
`$POD_NAMESPACE`), so a namespaced Role with the same rule is enough.

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
import os
from collections.abc import Mapping
from typing import Any

from kubernetes import client as k8s_client
from kubernetes import config as k8s_config

from exporter.k8s.apiwatch import WatchCall, WatchLoop
from exporter.k8s.config import KubernetesConfig
from exporter.k8s.pod_labels import PodLabelRules
from exporter.k8s.pod_map import PodMap
from exporter.selfmetrics import KUBERNETES_API_ERRORS, KUBERNETES_API_UP
from exporter.series import Family, Labels

log = logging.getLogger(__name__)


def api_client(kubeconfig: str | None = None) -> Any:
    """In-cluster credentials when running in a pod, else a kubeconfig (KUBECONFIG)."""
    configuration = k8s_client.Configuration()
    if kubeconfig is None and os.environ.get("KUBERNETES_SERVICE_HOST"):
        k8s_config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
    else:
        # Read KUBECONFIG now: the client library reads it only once, at its import.
        kubeconfig = kubeconfig or os.environ.get("KUBECONFIG")
        k8s_config.load_kube_config(  # type: ignore[no-untyped-call]
            config_file=kubeconfig, client_configuration=configuration
        )
    return k8s_client.ApiClient(configuration)


class PodMetadataWatcher(WatchLoop):
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
        pod = None
        if config.scope == "pod" and config.pod_name and config.pod_namespace:
            pod = (config.pod_namespace, config.pod_name)
        # Process attribution and virtual GPUs alone use the watch for UIDs and container ids
        # only: the rules then add nothing to series.
        return cls(api_client(kubeconfig), PodLabelRules.from_config(config),
                   node_name=config.node_name, pod=pod)

    # -- reading --------------------------------------------------------------------------

    def labels_for(self, namespace: str, pod: str) -> Labels:
        return self._map.labels_for(namespace, pod)

    def container_of(self, pod_uid: str, container_id: str) -> tuple[str, str, str] | None:
        """(namespace, pod, container) of a running container, by pod UID and runtime id."""
        return self._map.container_of(pod_uid, container_id)

    def families(self) -> list[Family]:
        return [
            KUBERNETES_API_UP.single(1.0 if self.up else 0.0),
            KUBERNETES_API_ERRORS.single(float(self.errors)),
            *self._map.families(),
        ]

    def close(self) -> None:
        super().close()
        with contextlib.suppress(Exception):
            self._client.close()  # also when the thread never started

    # -- the watch ------------------------------------------------------------------------

    def _setup(self, api: Any) -> None:
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


def check_access(
    config: KubernetesConfig, *, kubeconfig: str | None = None
) -> tuple[bool, str]:
    """One list of this node's (or this pod's) pods, as `doctor` runs it: (ok, explanation)."""
    try:
        api = api_client(kubeconfig)
    except Exception as exc:
        return False, (
            f"no API server credentials ({exc}); run in a pod with a ServiceAccount token or "
            "set KUBECONFIG"
        )
    try:
        core = k8s_client.CoreV1Api(api)
        if config.scope == "pod" and config.pod_name and config.pod_namespace:
            core.list_namespaced_pod(
                config.pod_namespace,
                field_selector=f"metadata.name={config.pod_name}",
                _preload_content=False,
                _request_timeout=10,
            )
            what = f"pod {config.pod_namespace}/{config.pod_name}"
        elif config.node_name:
            core.list_pod_for_all_namespaces(
                field_selector=f"spec.nodeName={config.node_name}",
                limit=1,
                _preload_content=False,
                _request_timeout=10,
            )
            what = f"pods on node {config.node_name}"
        else:
            return False, "NODE_NAME is not set; set it from spec.nodeName (downward API)"
    except k8s_client.ApiException as exc:
        if exc.status in (401, 403):
            return False, (
                f"API server refused listing pods (HTTP {exc.status}); grant the "
                "ServiceAccount get/list/watch on pods (ClusterRole + ClusterRoleBinding)"
            )
        return False, f"API server answered HTTP {exc.status}: {exc.reason}"
    except Exception as exc:
        return False, f"API server unreachable: {exc}"
    finally:
        api.close()
    return True, f"API server reachable; may list {what}"

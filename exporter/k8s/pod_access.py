"""Whether this node's credentials may list the pods the metadata watch follows: doctor's
API-server check.

It makes the same selection as `exporter.k8s.pod_metadata` (this node's pods, or in pod
scope the sidecar's own pod), once, with a short timeout, and explains a refusal in terms of
the RBAC rule to grant.
"""

from __future__ import annotations

from exporter.k8s.apiclient import api_client
from exporter.k8s.config import KubernetesConfig


def check_access(
    config: KubernetesConfig, *, kubeconfig: str | None = None
) -> tuple[bool, str]:
    """List this node's pods (or this pod) once, as `doctor` does, and return whether that worked
    with an explanation."""
    from kubernetes import client as k8s_client

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

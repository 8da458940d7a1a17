"""Credentials for the Kubernetes API server: in-cluster when running in a pod, else a
kubeconfig.

Every reader of the API server gets its client here: the pod metadata watch
(`exporter.k8s.pod_metadata`), the ConfigMap and ResourceSlice watches (through
`exporter.k8s.apiwatch`), doctor's access check (`exporter.k8s.pod_access`) and the node
fault writer (`exporter.nodefaults.apihttp`, which takes the address and credentials). The
`kubernetes` package is imported inside the function, so importing this module costs the
serve path nothing; the watches call it from their own thread.
"""

from __future__ import annotations

import os
from typing import Any


def api_client(kubeconfig: str | None = None) -> Any:
    """In-cluster credentials when running in a pod, else a kubeconfig (KUBECONFIG)."""
    from kubernetes import client as k8s_client
    from kubernetes import config as k8s_config

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

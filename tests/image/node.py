"""A simulated GPU node for containers of the real image (the GPU Operator's, the sidecar's,
the chart's DaemonSet's), and the GPU Operator's container on it.

The node is a temporary directory standing for its `/`: the kubelet's pod-resources socket
under `var/lib/kubelet/pod-resources/` (a real gRPC server, tests/deploy/operator_node.py's
allocations: GPU 0 held by inference/llm-0, GPU 1 time-sliced, GPU 2 claimed through DRA),
with the modes the kubelet gives it (directory 0750, socket root's), and the simulated
`libnvidia-ml.so.1` with three H200s, injected where the NVIDIA toolkit puts the driver's.
"""

from __future__ import annotations

import dataclasses
import shutil
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from tests.deploy.operator_node import (
    KUBELET_SOCKET,
    NODE_NAME,
    POD_NAME,
    POD_NAMESPACE,
    SCENARIO,
    SimNode,
)
from tests.deploy.operator_render import Obj, Policy, render_exporter_daemonset, under
from tests.support.container import ContainerSpec
from tests.support.nvml_injection import nvml_injection
from tests.support.pod_container import ApiAccess, Stores, container_spec

DOWNWARD = {"spec.nodeName": NODE_NAME, "metadata.name": POD_NAME,
            "metadata.namespace": POD_NAMESPACE}


@dataclass
class ContainerNode:
    root: Path
    kubelet: SimNode | None
    nvml_lib: Path

    @classmethod
    def start(cls, nvml_lib: Path, kubelet: bool = True) -> ContainerNode:
        # A short root: the socket path under it must fit a unix socket address.
        root = Path(tempfile.mkdtemp(prefix="gin-", dir="/tmp"))
        root.chmod(0o755)
        sim = SimNode.start(root) if kubelet else None
        if sim is not None:
            under(root, KUBELET_SOCKET).parent.chmod(0o750)  # as the kubelet creates it
        return cls(root, sim, nvml_lib)

    def stop(self) -> None:
        if self.kubelet is not None:
            self.kubelet.stop()
        shutil.rmtree(self.root, ignore_errors=True)

    def spec(self, pod: Obj, container: Obj, image: str, *,
             configmaps: Stores | None = None, secrets: Stores | None = None,
             api: ApiAccess | None = None, downward: Mapping[str, str] = DOWNWARD,
             nvml: bool = True) -> ContainerSpec:
        """`container` of `pod` on this node, from `image`, the NVIDIA toolkit's injection
        included unless `nvml` is False (a node without the NVIDIA runtime); `api`: the
        cluster's API server, None for a node whose pods reach none
        (tests/support/pod_container.py)."""
        binds, env = nvml_injection(self.nvml_lib, SCENARIO, self.root) if nvml else ((), {})
        return container_spec(pod, container, image=image, node_root=self.root,
                              files=Path(tempfile.mkdtemp(dir=self.root)),
                              downward=downward, configmaps=configmaps, secrets=secrets,
                              api=api, extra_env=env, extra_binds=binds)


def operator_container(node: ContainerNode, policy: Policy, image: str, *,
                       configmaps: Mapping[str, Mapping[str, str]] | None = None,
                       nvml: bool = True) -> ContainerSpec:
    """What the GPU Operator runs for `policy` (its DaemonSet asset, transformed as the
    operator does), with the read-only root and no capabilities instead of `privileged`."""
    daemonset = render_exporter_daemonset(policy)
    pod = daemonset["spec"]["template"]["spec"]
    spec = node.spec(pod, pod["containers"][0], image, configmaps=configmaps, nvml=nvml)
    return dataclasses.replace(spec, privileged=False, read_only=True, cap_drop_all=True)

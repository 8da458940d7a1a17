"""The built image as deploy/sidecar runs it, and as a non-root user.

The sidecar's container spec is read from deploy/sidecar/deployment.yaml and run as written:
its args (`serve --scope pod -k`), the downward-API env naming its pod, its security context
(read-only root, every capability dropped, no privilege escalation), its in-memory /tmp and
the pod-resources directory. The pod is inference/llm-0, which holds GPU 0 of the node.

The manifest runs the sidecar as uid 0 because the kubelet lets only uid 0 reach its
pod-resources socket (directory 0750, socket writable by root only), and `--scope pod` needs
that socket to know its own devices. As uid 65532 the same container stops at start with
one line saying so; the image itself runs as 65532 wherever the socket is not needed.
"""

from __future__ import annotations

import copy
import dataclasses
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.deploy.operator_node import EXCLUSIVE_POD, GPU_UUIDS, NODE_NAME
from tests.support.container import ContainerSpec, run_once, running
from tests.support.paths import ROOT
from tests.support.wait import wait_until

from .node import ContainerNode

pytestmark = pytest.mark.timeout(1800)  # the first test may build the image

MANIFEST = ROOT / "deploy" / "sidecar" / "deployment.yaml"
NAMESPACE, POD, _ = EXCLUSIVE_POD
DOWNWARD = {"spec.nodeName": NODE_NAME, "metadata.name": POD, "metadata.namespace": NAMESPACE}
NONROOT = 65532


def sidecar_pod() -> tuple[dict[str, Any], dict[str, Any]]:
    """(the pod spec, its exporter sidecar) from the manifest."""
    deployment = yaml.safe_load(MANIFEST.read_text())
    pod = deployment["spec"]["template"]["spec"]
    (sidecar,) = [c for c in pod["initContainers"] if c["name"] == "gpu-exporter"]
    return pod, sidecar


def sidecar_spec(node: ContainerNode, image: str, **security: Any) -> ContainerSpec:
    pod, sidecar = sidecar_pod()
    sidecar = copy.deepcopy(sidecar)
    sidecar["securityContext"].update(security)
    return node.spec(pod, sidecar, image, downward=DOWNWARD)


def test_the_manifest_says_what_the_image_runs_with() -> None:
    _, sidecar = sidecar_pod()
    security = sidecar["securityContext"]
    assert security["readOnlyRootFilesystem"] is True
    assert security["capabilities"] == {"drop": ["ALL"]}
    assert security["allowPrivilegeEscalation"] is False
    assert security["runAsUser"] == 0  # the pod-resources socket's only user
    assert sidecar["args"] == ["serve", "--scope", "pod", "-k"]


def test_the_sidecar_publishes_only_its_pods_gpu(node: ContainerNode, built_image: str
                                                 ) -> None:
    spec = sidecar_spec(node, built_image)
    assert (spec.read_only, spec.cap_drop_all, spec.no_new_privileges, spec.user) == \
        (True, True, True, "0:0")
    assert spec.tmpfs == {"/tmp": "size=16m"}
    with running(spec) as container:
        container.answered("/health", budget_s=30)

        def labelled() -> str | None:
            status, text = container.get("/metrics")
            assert status == 200, text
            return text if f'pod="{POD}"' in text else None

        text = wait_until(labelled, timeout=30, interval=0.2, what="the pod's labels")
        uuids = set(re.findall(r'UUID="([^"]+)"', text))
        assert uuids == {GPU_UUIDS[0]}
        assert set(re.findall(r'\bpod="([^"]+)"', text)) == {POD}
        assert "Traceback" not in container.logs()


def test_the_image_runs_as_uid_65532_without_capabilities(node: ContainerNode,
                                                          built_image: str) -> None:
    # Node scope without pod mapping (no socket needed): every GPU, as distroless's nonroot.
    spec = dataclasses.replace(
        sidecar_spec(node, built_image, runAsUser=NONROOT, runAsGroup=NONROOT),
        args=("serve", "-c", "1000"))
    with running(spec) as container:
        container.answered("/health", budget_s=30)
        status, text = container.get("/metrics")
        assert status == 200
        assert set(re.findall(r'UUID="([^"]+)"', text)) == set(GPU_UUIDS)
        assert str(NONROOT) in (Path(f"/proc/{container.host_pid()}/status").read_text()
                                .split("Uid:")[1].split("\n")[0])


def test_pod_scope_as_uid_65532_stops_with_one_line(node: ContainerNode, built_image: str
                                                   ) -> None:
    spec = sidecar_spec(node, built_image, runAsUser=NONROOT, runAsGroup=NONROOT)
    code, output = run_once(spec, timeout=120)
    assert code == 2
    assert output.strip().splitlines() == [
        "gpu-exporter: --kubernetes.pod-resources-socket "
        "/var/lib/kubelet/pod-resources/kubelet.sock: permission denied on the path for uid "
        "65532; the kubelet lets only uid 0 reach it: run as root (runAsUser: 0, no capability "
        "needed)"]

"""Set-ups that cannot work end in one line naming what is wrong and a non-zero exit.

dcgm-exporter's distroless image exited with status 1 and printed nothing
(NVIDIA/dcgm-exporter#612). Each case here is the GPU Operator's container (as in
test_operator_image.py) with one thing broken, run to its end: the output is exactly one
line, and the exit status is not 0.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from tests.deploy.operator_render import helm_default_policy
from tests.support.container import Bind, ContainerSpec, run_once

from .node import ContainerNode, operator_container

pytestmark = pytest.mark.timeout(1800)  # the first test may build the image

POLICY = helm_default_policy().with_our_image()
CONFIGMAP = "team-dcgm-metrics"


def one_line(spec: ContainerSpec) -> tuple[int, str]:
    code, output = run_once(spec, timeout=120)
    lines = output.strip().splitlines()
    assert len(lines) == 1, output
    return code, lines[0]


def test_no_nvml_library(node: ContainerNode, built_image: str) -> None:
    # The pod runs without the NVIDIA runtime: nothing injects libnvidia-ml.so.1.
    code, line = one_line(operator_container(node, POLICY, built_image, nvml=False))
    assert code == 1
    assert line.startswith("gpu-exporter: NVML (libnvidia-ml.so.1) is not installed on this "
                           "machine: no NVIDIA driver is present or the container was not "
                           "started with the NVIDIA runtime.")


def test_a_socket_path_that_is_wrong(node: ContainerNode, built_image: str) -> None:
    policy = POLICY.with_exporter(
        args=["--pod-resources-kubelet-socket", "/var/lib/kubelet/pod-resource/kubelet.sock"])
    code, line = one_line(operator_container(node, policy, built_image))
    assert code == 2
    assert line == (
        "gpu-exporter: --kubernetes.pod-resources-socket "
        "/var/lib/kubelet/pod-resource/kubelet.sock: the directory /var/lib/kubelet/"
        "pod-resource does not exist; mount the kubelet's pod-resources directory there "
        "(hostPath /var/lib/kubelet/pod-resources, type Directory) or point the flag at the "
        "socket inside it")


def test_the_pod_resources_directory_not_mounted(node: ContainerNode, built_image: str
                                                 ) -> None:
    spec = operator_container(node, POLICY, built_image)
    spec = dataclasses.replace(spec, binds=tuple(
        b for b in spec.binds if b.target != "/var/lib/kubelet/pod-resources"))
    code, line = one_line(spec)
    assert code == 2
    assert line.startswith("gpu-exporter: --kubernetes.pod-resources-socket "
                           "/var/lib/kubelet/pod-resources/kubelet.sock: the directory "
                           "/var/lib/kubelet/pod-resources does not exist")


def test_a_type_dcgm_exporter_no_longer_takes_in_the_csv(node: ContainerNode,
                                                         built_image: str) -> None:
    csv = "DCGM_FI_DEV_GPU_TEMP, gauge, GPU temperature (C).\n" \
          "DCGM_FI_DEV_POWER_USAGE, histogram, Refused since dcgm-exporter 4.8.3.\n"
    spec = operator_container(node, POLICY.with_exporter(config={"name": CONFIGMAP}),
                              built_image, configmaps={CONFIGMAP: {"dcgm-metrics.csv": csv}})
    code, line = one_line(spec)
    assert code == 2
    assert line == ("gpu-exporter: /etc/dcgm-exporter/dcgm-metrics.csv:2: unsupported "
                    "prometheus type 'histogram' for DCGM_FI_DEV_POWER_USAGE; supported types "
                    "are counter, gauge, untyped and label")


def test_a_bad_web_config(node: ContainerNode, built_image: str, tmp_path: Path) -> None:
    web_config = tmp_path / "web-config.yml"
    web_config.write_text("tls_server_config:\n  cert_file: /etc/tls/tls.crt\n")
    web_config.chmod(0o644)
    spec = operator_container(node, POLICY.with_exporter(
        args=["--web-config-file", "/etc/web/web-config.yml"]), built_image)
    spec = dataclasses.replace(spec, binds=(*spec.binds,
                                            Bind(web_config, "/etc/web/web-config.yml")))
    code, line = one_line(spec)
    assert code == 2
    assert line == ("gpu-exporter: --web.config.file: web config /etc/web/web-config.yml:1: "
                    "tls_server_config: missing one of key or key_file")

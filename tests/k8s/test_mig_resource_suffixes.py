"""The device plugin v0.20's MIG resources with profile suffixes are attributed.

k8s-device-plugin v0.20.0 (which the GPU Operator v26.7.0 deploys) advertises a MIG
profile with a suffix as a resource of its own: `nvidia.com/mig-1g.18gb+me` beside
`nvidia.com/mig-1g.18gb`. A pod holding one gets its MIG instance's series like any other.
The suffixes are read from the plugin's own test of its resource patterns and changelog.
"""

from __future__ import annotations

import re

import pytest

from exporter.devices.enumerate import enumerate_devices
from exporter.devices.filter import ALL_DEVICES
from exporter.simulated.kubelet import SimKubeletHandle, pod_resources
from exporter.simulated.node import SimNvml
from tests.support.exporter_process import ExporterProcess
from tests.support.paths import fixture_file
from tests.support.wait import wait_until

_PROFILE = r"\dg\.\d+gb"


def plugin_suffixes() -> list[str]:
    """Every suffix after a MIG profile name in the plugin's pattern test (`-me`, `+me.all`,
    `+gfx`) and its changelog (`+me`), in the order first met."""
    test = fixture_file("k8s-device-plugin", "api", "config", "v1",
                        "resources_test.go").read_text(encoding="utf-8")
    changelog = fixture_file("k8s-device-plugin", "CHANGELOG.md").read_text(encoding="utf-8")
    found = re.findall(rf'input:\s*"{_PROFILE}([-+][\w.]+)"', test)
    found += re.findall(rf"`{_PROFILE}([-+][\w.]+)`", changelog)
    found += re.findall(rf"\b{_PROFILE}([-+][\w.]+) profile", changelog)
    return list(dict.fromkeys(found))


def test_the_plugin_names_the_four_suffixes() -> None:
    assert sorted(plugin_suffixes()) == sorted(["-me", "+me.all", "+gfx", "+me"])


@pytest.mark.parametrize("id_type", ["uid", "device-name"])
def test_each_suffixed_mig_resource_gets_its_instance(
        exporter: type[ExporterProcess], kubelet: SimKubeletHandle, socket_path: str,
        id_type: str) -> None:
    """Under either GPU id type: MIG devices are named by their UUIDs in both."""
    lib = SimNvml("h200-mig")
    lib.nvmlInit()
    inventory = enumerate_devices(lib, ALL_DEVICES).inventory
    instances = list(inventory.instances)
    # Each suffix as the plugin's profile names write it, and with `+` as `.` (the spelling
    # Kubernetes' resource-name rules allow, which older plugins used for `+me`).
    spelled = [""] + [s for suffix in plugin_suffixes()
                      for s in dict.fromkeys((suffix, suffix.replace("+", ".")))]
    assert len(instances) >= len(spelled)
    held = {f"holder-{n}": (inst, f"nvidia.com/mig-{inst.gpu_instance_profile}{suffix}")
            for n, (suffix, inst) in enumerate(zip(spelled, instances, strict=False))}
    kubelet.servicer.set_pods([
        pod_resources("inference", pod, {"server": [(resource, [inst.mig_devices[0].uuid])]})
        for pod, (inst, resource) in held.items()])
    proc = exporter(["--backend", "sim", "--sim.profile", "h200-mig", "-c", "200ms", "-k",
                     "--pod-resources-kubelet-socket", socket_path,
                     "--kubernetes-gpu-id-type", id_type])
    proc.wait_ready()

    def attributed() -> str | None:
        text = proc.metrics()
        return text if all(f'pod="{pod}"' in text for pod in held) else None

    text = wait_until(attributed, 30, what="every pod's MIG instance attributed")
    assert len(held) == len(spelled)
    for pod, (inst, resource) in held.items():
        lines = [line for line in text.splitlines()
                 if line.startswith("DCGM_FI_DEV_FB_USED{") and f'pod="{pod}"' in line]
        assert len(lines) == 1, (resource, lines)
        assert f'UUID="{inst.uuid}"' in lines[0], (resource, lines[0])
        assert f'GPU_I_ID="{inst.gpu_instance_id}"' in lines[0], (resource, lines[0])

"""The demo end to end: `serve --sim.kubelet` on the simulated node, scraped over HTTP."""

from __future__ import annotations

import os
import shlex
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from exporter.devices.enumerate import enumerate_devices
from exporter.devices.filter import ALL_DEVICES
from exporter.devices.model import Inventory
from exporter.k8s.inference_labels import ROLE
from tests.support.exporter_process import ExporterProcess
from tests.support.paths import ROOT
from tests.support.wait import wait_until

Series = list[tuple[str, dict[str, str], float]]


def scrape_after_kubelet(proc: ExporterProcess, timeout: float = 30.0) -> tuple[str, Series]:
    proc.wait_ready()

    def attributed() -> str | None:
        text = proc.metrics()
        return text if "gpu_exporter_kubelet_up 1" in text else None

    text = wait_until(attributed, timeout, what="kubelet attribution up")
    series = [(s.name, s.labels, s.value)
              for fam in text_string_to_metric_families(text) for s in fam.samples]
    return text, series


def h200_inventory() -> Inventory:
    from exporter.simulated.node import SimNvml

    lib = SimNvml("h200-mig")
    lib.nvmlInit()
    return enumerate_devices(lib, ALL_DEVICES).inventory


SIM = ["--backend", "sim", "--sim.profile", "h200-mig", "--sim.kubelet", "-c", "200ms"]


def test_demo_node_scope(exporter: type[ExporterProcess]) -> None:
    inventory = h200_inventory()
    _, series = scrape_after_kubelet(exporter(SIM))
    fb = {(int(labels["gpu"]), int(labels.get("GPU_I_ID", -1))): labels
          for name, labels, _ in series if name == "DCGM_FI_DEV_FB_USED"}
    # Single-compute-instance GPU instances are each one pod's; the 3g.71gb instance split
    # between two pods and the time-sliced GPU 7 carry no pod; GPU 6 is idle.
    for inst in inventory.instances:
        labels = fb[inst.key]
        if len(inst.mig_devices) == 1:
            assert labels["namespace"] == "inference"
            assert labels["container"] == "server"
        else:
            assert "pod" not in labels
    assert "pod" not in fb[(7, -1)]
    assert "pod" not in fb[(6, -1)]
    assert fb[(2, -1)]["namespace"] == "inference"
    rows = [labels for name, labels, _ in series if name == "gpu_exporter_pod_gpu_allocation"]
    notebooks = sorted(r["pod"] for r in rows if r["gpu"] == "7")
    assert notebooks == ["notebook-alice-0", "notebook-bob-0", "notebook-carol-0"]
    assert len([r for r in rows if r.get("GPU_I_ID") == "2"]) == 2


def test_demo_pod_scope_leaks_nothing(exporter: type[ExporterProcess]) -> None:
    inventory = h200_inventory()
    mine = inventory.by_index(7)
    assert mine is not None
    proc = exporter([*SIM, "--scope", "pod"],
                    env={"POD_NAME": "notebook-alice-0", "POD_NAMESPACE": "research"})
    text, series = scrape_after_kubelet(proc)
    uuids = {labels["UUID"] for _, labels, _ in series if "UUID" in labels}
    pods = {labels["pod"] for _, labels, _ in series if "pod" in labels}
    assert uuids == {mine.uuid}
    assert pods == {"notebook-alice-0"}
    status, _, page = proc.get("/")
    assert status == 200
    for other in [g.uuid for g in inventory.gpus if g.gpu != 7] + [
        m.uuid for i in inventory.instances for m in i.mig_devices
    ] + ["notebook-bob-0", "notebook-carol-0", "llm-inference", "inference\""]:
        assert other not in text, other
        assert other not in page.decode(), other


def run_sh_demo_args() -> list[str]:
    """The arguments `scripts/run.sh` gives `serve` on a machine without a driver."""
    text = (ROOT / "scripts" / "run.sh").read_text().replace("\\\n", " ")
    line = next(line for line in text.splitlines()
                if line.startswith("exec ") and "--backend sim" in line)
    words = shlex.split(line)
    return [w for w in words[words.index("serve") + 1:] if w != "$@"]


def test_demo_with_inference_preset_shows_role_and_queue(
        exporter: type[ExporterProcess], tmp_path: Path) -> None:
    """`./scripts/run.sh`'s demo: role and queue labels on /metrics with no cluster. The
    simulated pod metadata needs neither an API server nor the `kubernetes` package: one that
    fails on import is put first on the path."""
    blocker = tmp_path / "kubernetes"
    blocker.mkdir()
    (blocker / "__init__.py").write_text("raise ImportError('no kubernetes in the demo')\n")
    path = os.pathsep.join(p for p in (str(tmp_path), os.environ.get("PYTHONPATH")) if p)
    proc = exporter([*run_sh_demo_args(), "-c", "200ms"],
                    env={"PYTHONPATH": path, "KUBECONFIG": str(tmp_path / "absent")})
    text, series = scrape_after_kubelet(proc)
    fb = [labels for name, labels, _ in series if name == "DCGM_FI_DEV_FB_USED"]
    held = [labels for labels in fb if "pod" in labels]
    assert held
    assert all("kai_scheduler_queue" in labels for labels in held)
    assert {ROLE.value_of(labels) for labels in held} == {"prefill", "decode"}
    assert {labels["kai_scheduler_queue"] for labels in held} == {"chat", "search"}
    assert {labels.get("llm_d_ai_role") for labels in held} >= {"prefill", "decode"}
    assert {labels.get("nvidia_com_dynamo_sub_component_type") for labels in held} >= {
        "prefill", "decode"}
    assert "gpu_exporter_kubernetes_api_up 1" in text
    assert "no kubernetes in the demo" not in proc.output()


def test_demo_virtual_gpus_split_per_holder(exporter: type[ExporterProcess]) -> None:
    """`--kubernetes-virtual-gpus` on the time-sliced demo node: each embedder's FB_USED is its
    own process's framebuffer, read through the device layer and joined to its pod through
    the simulated /proc and API server; the holders never add up to more than the GPU.
    Process attribution, on beside it, reads the same processes."""
    from exporter.simulated.kubelet import plan_allocations
    from exporter.simulated.node import SimNvml
    from exporter.simulated.node.process_table import plan_processes
    from exporter.simulated.node.profiles import get_profile

    lib = SimNvml("a100-timesliced")
    lib.nvmlInit()
    inventory = enumerate_devices(lib, ALL_DEVICES).inventory
    # The simulated library's truth: process N of a GPU, in the pod holding replica N, holds
    # its fixed share of the GPU's used framebuffer.
    shares = {(gpu, n): p.memory_share
              for gpu, procs in plan_processes(get_profile("a100-timesliced"), 0).items()
              for n, p in enumerate(procs)}
    holder: dict[tuple[int, str], int] = {}
    for pod in plan_allocations(inventory, shared_by=lib.shared_by):
        for container in pod.containers:
            for device in container.devices:
                for device_id in device.device_ids:
                    uuid, _, replica = device_id.partition("::")
                    index = next(g.gpu for g in inventory.gpus if g.uuid == uuid)
                    holder[(index, pod.name)] = int(replica)

    proc = exporter(["--backend", "sim", "--sim.profile", "a100-timesliced", "--sim.kubelet",
                     "--kubernetes-virtual-gpus", "--kubernetes.process-attribution",
                     "-c", "200ms"])
    proc.wait_ready()

    def split() -> Series | None:
        text = proc.metrics()
        series = [(s.name, s.labels, s.value)
                  for fam in text_string_to_metric_families(text) for s in fam.samples
                  if s.name in ("DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_GPU_UTIL",
                                "gpu_exporter_pod_gpu_memory_used_bytes")]
        held = [s for s in series if "pod" in s[1]]
        return series if len(held) == 3 * len(holder) else None

    series = wait_until(split, 30, what="a split for every holder")
    for name in ("DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_GPU_UTIL"):
        for gpu in inventory.gpus:
            mine = [(labels, v) for n, labels, v in series
                    if n == name and labels["gpu"] == str(gpu.gpu)]
            (device,) = [v for labels, v in mine if "pod" not in labels]
            held = {labels["pod"]: (labels, v) for labels, v in mine if "pod" in labels}
            assert len(held) == 3
            # Each holder's value is rounded to the exposition's six decimals, at most half
            # a millionth each way: the sum may pass the device by that much.
            assert sum(v for _, v in held.values()) <= device + len(held) * 0.5e-6 + 1e-9
            for pod, (labels, v) in held.items():
                assert labels["vgpu"] == str(holder[(gpu.gpu, pod)])
                if name == "DCGM_FI_DEV_FB_USED":
                    # Read a few milliseconds after the device's figure: equal within the
                    # framebuffer's movement in between.
                    share = shares[(gpu.gpu, holder[(gpu.gpu, pod)])]
                    assert v == pytest.approx(share * device, abs=0.02 * device + 2)
                    (attributed,) = [b for n, labels, b in series
                                     if n == "gpu_exporter_pod_gpu_memory_used_bytes"
                                     and labels["pod"] == pod]
                    assert v == pytest.approx(attributed / 2**20, abs=0.02 * device + 2)

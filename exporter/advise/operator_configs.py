"""The advice as the files the GPU Operator applies: the MIG Manager's mig-parted config (one
named config per distinct node layout) and the device plugin's time-slicing ConfigMap, each
with the `kubectl label` lines that select them as comments."""

from __future__ import annotations

from collections import Counter
from typing import Any

from exporter.advise.demand import TIME_SLICING
from exporter.advise.plan import MIG, Advice, NodePlan
from exporter.advise.render import (
    GPU_RESOURCE,
    mig_label_line,
    real_nodes,
    sharing_label_line,
    utc,
)
from exporter.partitions.migparted_layout import PCI_DEVICE_IDS

DISABLED = "all-disabled"
CONFIGMAP = "gpu-exporter-time-slicing"
NAMESPACE = "gpu-operator"


def _yaml(data: Any) -> str:
    """Return `data` as YAML in block style, with text of several lines (a config inside a
    ConfigMap) written as a literal block, as one would write it by hand."""
    import yaml

    class Dumper(yaml.SafeDumper):
        pass

    def text(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
        return dumper.represent_scalar("tag:yaml.org,2002:str", value,
                                       style="|" if "\n" in value else None)

    Dumper.add_representer(str, text)
    return str(yaml.dump(data, Dumper=Dumper, sort_keys=False, default_flow_style=False,
                         width=100))


def _selections(node: NodePlan, gpu_model: str) -> list[dict[str, Any]]:
    """Return the mig-parted device selections for the node: its GPUs grouped by advised layout,
    one selection per layout listing their indexes. A MIG selection names the model's PCI device
    id where it is on record (`device-filter`), so a config meant for one model is never applied
    to another with the same profile names."""
    pci_id = PCI_DEVICE_IDS.get(gpu_model)
    only = {"device-filter": f"0x{pci_id:08X}"} if pci_id is not None else {}
    groups: dict[tuple[str, tuple[str, ...]], list[int]] = {}
    for index, gpu in enumerate(node.advised):
        kind = MIG if gpu.kind == MIG else "off"
        groups.setdefault((kind, gpu.instances), []).append(index)
    out: list[dict[str, Any]] = []
    for (kind, instances), indexes in groups.items():
        if kind == MIG:
            counts = Counter(instances)
            out.append({**only, "devices": indexes, "mig-enabled": True,
                        "mig-devices": {name: counts[name] for name in dict.fromkeys(instances)}})
        else:
            out.append({"devices": indexes, "mig-enabled": False})
    return out


def mig_parted_text(advice: Advice) -> str:
    """Return the mig-parted config the GPU Operator's MIG Manager applies: one named config per
    distinct node layout, headed by the `kubectl label` lines that select each node's config."""
    configs: dict[str, list[dict[str, Any]]] = {}
    labels: list[str] = []
    for pool in advice.pools:
        if pool.model is None or not pool.model.mig_capable:
            continue
        for node in real_nodes(pool):
            if node.mig_config == DISABLED:
                configs.setdefault(DISABLED, [{"devices": "all", "mig-enabled": False}])
            else:
                configs.setdefault(node.mig_config, _selections(node, pool.gpu_model))
            labels.append(mig_label_line(node))
    head = [f"# MIG layouts advised by gpu-exporter advise for {utc(advice.start)} to "
            f"{utc(advice.end)}.",
            "# Put this file in the ConfigMap the GPU Operator's MIG Manager reads",
            "# (migManager.config.name), then label each node with its config:"]
    head += [f"#   {line}" for line in labels] or ["#   (no MIG-capable pool was advised)"]
    if not configs:
        configs[DISABLED] = [{"devices": "all", "mig-enabled": False}]
    return "\n".join(head) + "\n" + _yaml({"version": "v1", "mig-configs": configs})


def device_plugin_config(replicas: int) -> dict[str, Any]:
    """Return the device plugin's config that shares every full GPU of a node `replicas` ways by
    time-slicing."""
    return {"version": "v1", "sharing": {"timeSlicing": {
        "renameByDefault": False, "failRequestsGreaterThanOne": True,
        "resources": [{"name": GPU_RESOURCE, "replicas": replicas}]}}}


def device_plugin_text(advice: Advice) -> str:
    """Return the ConfigMap of device-plugin configs, one per replica count advised, headed by
    the `kubectl label` lines that select each sharing node's config."""
    data: dict[str, str] = {}
    labels: list[str] = []
    for pool in advice.pools:
        for node in real_nodes(pool):
            if node.sharing_config:
                replicas = next(g.replicas for g in node.advised if g.kind == TIME_SLICING)
                data.setdefault(node.sharing_config, _yaml(device_plugin_config(replicas)))
                labels.append(sharing_label_line(node))
    head = [f"# Time-slicing advised by gpu-exporter advise for {utc(advice.start)} to "
            f"{utc(advice.end)}.",
            "# Apply this ConfigMap, point the GPU Operator's devicePlugin.config.name at "
            f"{CONFIGMAP},", "# then label each node with its config:"]
    head += [f"#   {line}" for line in labels] or ["#   (no pool is advised to share)"]
    configmap = {"apiVersion": "v1", "kind": "ConfigMap",
                 "metadata": {"name": CONFIGMAP, "namespace": NAMESPACE},
                 "data": dict(sorted(data.items()))}
    return "\n".join(head) + "\n" + _yaml(configmap)

"""Label sets of device series, in dcgm-exporter's order."""

from __future__ import annotations

from exporter.devices.model import Entity
from exporter.k8s.types import PodRef
from exporter.sampling.snapshot import HostLabel
from exporter.series import Labels


def entity_labels(entity: Entity, host: HostLabel) -> Labels:
    """gpu, UUID, pci_bus_id, device, modelName[, GPU_I_PROFILE, GPU_I_ID][, host]."""
    labels: list[tuple[str, str]] = [
        ("gpu", str(entity.gpu)),
        ("UUID", entity.uuid),
        ("pci_bus_id", entity.pci_bus_id),
        ("device", entity.device),
        ("modelName", entity.model),
    ]
    if entity.gpu_instance_id is not None:
        labels.append(("GPU_I_PROFILE", entity.gpu_instance_profile or ""))
        labels.append(("GPU_I_ID", str(entity.gpu_instance_id)))
    if host.name:
        labels.append((host.name, host.value))
    return tuple(labels)


def link_labels(gpu: Entity, link: int, host: HostLabel) -> Labels:
    """nvlink, gpu, gpu_uuid, pci_bus_id, device, model_name[, hostname]: dcgm-exporter's
    labels for a GPU's NVLink entity, which differ from its GPU labels (snake case, and the
    host label is `hostname` in every release)."""
    labels: list[tuple[str, str]] = [
        ("nvlink", str(link)),
        ("gpu", str(gpu.gpu)),
        ("gpu_uuid", gpu.uuid),
        ("pci_bus_id", gpu.pci_bus_id),
        ("device", gpu.device),
        ("model_name", gpu.model),
    ]
    if host.name:
        labels.append(("hostname", host.value))
    return tuple(labels)


def pod_labels(owner: PodRef | None) -> Labels:
    """container, namespace, pod (dcgm's order) and enrichment; nothing when unowned."""
    if owner is None:
        return ()
    return (
        ("container", owner.container),
        ("namespace", owner.namespace),
        ("pod", owner.pod),
        *owner.extra,
    )


def escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def format_labels(labels: Labels) -> str:
    if not labels:
        return ""
    return "{" + ",".join(f'{k}="{escape(v)}"' for k, v in labels) + "}"

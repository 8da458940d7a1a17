"""Label sets of device series, in dcgm-exporter's order."""

from __future__ import annotations

from dataclasses import dataclass

from exporter.devices.model import Entity
from exporter.k8s.types import PodRef
from exporter.sampling.snapshot import HostLabel
from exporter.series import Labels


@dataclass(frozen=True, slots=True)
class LabelStyle:
    """dcgm-exporter's variants of the device labels' names and values."""

    old_namespace: bool = False
    """1.x names (`-o`): `uuid` for `UUID`; `container_name`, `pod_name`, `pod_namespace`."""
    model_name_without_blanks: bool = False
    """`NVIDIA-H200-NVL` for `NVIDIA H200 NVL` (`-rbmn`), as device-plugin node labels."""


DEFAULT_STYLE = LabelStyle()


def model_name(model: str, style: LabelStyle = DEFAULT_STYLE) -> str:
    # Runs of blanks become one dash, and none leads or trails, as dcgm-exporter does.
    return "-".join(model.split()) if style.model_name_without_blanks else model


def entity_labels(entity: Entity, host: HostLabel, style: LabelStyle = DEFAULT_STYLE
                  ) -> Labels:
    """gpu, UUID, pci_bus_id, device, modelName[, GPU_I_PROFILE, GPU_I_ID][, host]."""
    labels: list[tuple[str, str]] = [
        ("gpu", str(entity.gpu)),
        ("uuid" if style.old_namespace else "UUID", entity.uuid),
        ("pci_bus_id", entity.pci_bus_id),
        ("device", entity.device),
        ("modelName", model_name(entity.model, style)),
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


def pod_labels(owner: PodRef | None, style: LabelStyle = DEFAULT_STYLE) -> Labels:
    """container, namespace, pod (dcgm's order) and enrichment; nothing when unowned. With
    1.x names they come sorted by name, as dcgm-exporter prints them."""
    if owner is None:
        return ()
    if style.old_namespace:
        return (
            ("container_name", owner.container),
            ("pod_name", owner.pod),
            ("pod_namespace", owner.namespace),
            *owner.extra,
        )
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

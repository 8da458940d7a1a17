"""Label sets of device series, in dcgm-exporter's order."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from exporter import label_registry as names
from exporter.devices.model import Entity
from exporter.fields.xid_messages import xid_message
from exporter.k8s.types import PodRef
from exporter.sampling.snapshot import HostLabel
from exporter.series import Labels, Sample


@dataclass(frozen=True, slots=True)
class LabelStyle:
    """dcgm-exporter's variants of the device labels' names and values."""

    old_namespace: bool = False
    """1.x names (`-o`): `uuid` for `UUID`; `container_name`, `pod_name`, `pod_namespace`."""
    model_name_without_blanks: bool = False
    """`NVIDIA-H200-NVL` for `NVIDIA H200 NVL` (`-rbmn`), as device-plugin node labels."""


DEFAULT_STYLE = LabelStyle()


def model_name(model: str, style: LabelStyle = DEFAULT_STYLE) -> str:
    """Return the `modelName` label value, with each run of blanks turned into one dash when the
    label style asks for it."""
    # Runs of blanks become one dash, and none leads or trails, as dcgm-exporter does.
    return "-".join(model.split()) if style.model_name_without_blanks else model


def entity_labels(entity: Entity, host: HostLabel, style: LabelStyle = DEFAULT_STYLE
                  ) -> Labels:
    """Return an entity's labels in dcgm-exporter's order: gpu, UUID, pci_bus_id, device,
    modelName, then GPU_I_PROFILE and GPU_I_ID for a GPU instance, then the host label when there
    is one."""
    labels: list[tuple[str, str]] = [
        (names.GPU, str(entity.gpu)),
        (names.OLD_UUID if style.old_namespace else names.UUID, entity.uuid),
        (names.PCI_BUS_ID, entity.pci_bus_id),
        (names.DEVICE, entity.device),
        (names.MODEL_NAME, model_name(entity.model, style)),
    ]
    if entity.gpu_instance_id is not None:
        labels.append((names.GPU_I_PROFILE, entity.gpu_instance_profile or ""))
        labels.append((names.GPU_I_ID, str(entity.gpu_instance_id)))
    if host.name:
        labels.append((host.name, host.value))
    return tuple(labels)


def link_labels(gpu: Entity, link: int, host: HostLabel) -> Labels:
    """Return dcgm-exporter's labels of a GPU's NVLink entity: nvlink, gpu, gpu_uuid, pci_bus_id,
    device, model_name and, when there is a host label, hostname. They differ from its GPU labels
    (snake case, and the host label is `hostname` in every release)."""
    labels: list[tuple[str, str]] = [
        (names.NVLINK, str(link)),
        (names.GPU, str(gpu.gpu)),
        (names.GPU_UUID, gpu.uuid),
        (names.PCI_BUS_ID, gpu.pci_bus_id),
        (names.DEVICE, gpu.device),
        (names.LINK_MODEL_NAME, gpu.model),
    ]
    if host.name:
        labels.append((names.LINK_HOSTNAME, host.value))
    return tuple(labels)


def pod_labels(owner: PodRef | None, style: LabelStyle = DEFAULT_STYLE) -> Labels:
    """Return the pod labels of a series: container, namespace and pod (in dcgm-exporter's
    order), then the enrichment labels; nothing when no pod holds the device. With the 1.x names
    they come sorted by name, as dcgm-exporter prints them."""
    if owner is None:
        return ()
    if style.old_namespace:
        return (
            (names.OLD_CONTAINER, owner.container),
            (names.OLD_POD, owner.pod),
            (names.OLD_NAMESPACE, owner.namespace),
            *owner.extra,
        )
    return (
        (names.CONTAINER, owner.container),
        (names.NAMESPACE, owner.namespace),
        (names.POD, owner.pod),
        *owner.extra,
    )


def xid_attributes(value: float) -> Labels:
    """Return the `err_code` and `err_msg` labels of a last-XID value, as dcgm-exporter labels
    `DCGM_FI_DEV_XID_ERRORS` (0 is "No Error"); nothing for a value that is not a code."""
    if not math.isfinite(value):
        return ()
    code = int(value)
    return ((names.ERR_CODE, str(code)), (names.ERR_MSG, xid_message(code)))


def with_xid_attributes(samples: Iterable[Sample]) -> tuple[Sample, ...]:
    """Return the samples, each with its value's XID attributes added after its other labels,
    where dcgm-exporter renders its "attributes"."""
    by_value: dict[float, Labels] = {}
    out = []
    for s in samples:
        attributes = by_value.get(s.value)
        if attributes is None:
            attributes = by_value[s.value] = xid_attributes(s.value)
        out.append(Sample((*s.labels, *attributes), s.value))
    return tuple(out)


def escape(value: str) -> str:
    """Return a label value escaped for the text exposition format (backslash, newline and double
    quote)."""
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def format_labels(labels: Labels) -> str:
    """Return the label set as written in the text format, braces included, or an empty string when
    there are no labels."""
    if not labels:
        return ""
    return "{" + ",".join(f'{k}="{escape(v)}"' for k, v in labels) + "}"

"""Label-type fields read through plain NVML calls (`DCGM_FI_DEV_SERIAL, label`, ...):
strings that do not change while the device is there, so each is read once per enumeration
and then labels every series of its GPU (and of the GPU's MIG instances)."""

from __future__ import annotations

from collections.abc import Sequence

from exporter.devices.accounting import CallErrors
from exporter.devices.convert import LABEL_CONVERTERS
from exporter.devices.errors import is_nvml_error, nvml_code
from exporter.devices.model import Entity
from exporter.devices.nvml_api import UNSUPPORTED_CODES, Handle, NvmlLib
from exporter.devices.read_plan import bound_call
from exporter.fields.catalog import Call, Convert, FieldSpec, MetricType, Reader


def is_static_label(spec: FieldSpec) -> bool:
    """Return whether the field is a label read once per enumeration through a plain NVML call."""
    return spec.type is MetricType.LABEL and spec.reader is Reader.CALL


def read_labels(lib: NvmlLib, handle: Handle, specs: Sequence[FieldSpec],
                errors: CallErrors, uid: str = "") -> dict[str, str]:
    """Return the string of each spec that NVML answers, by field name. An error leaves its label
    out; "not supported" is logged once per device `uid` and call."""
    labels: dict[str, str] = {}
    for spec in specs:
        call = spec.part
        assert isinstance(call, Call)
        read = bound_call(lib, handle, call)
        if read is None:
            continue
        try:
            answer = read()
        except Exception as exc:
            if not is_nvml_error(exc):
                raise
            if nvml_code(exc) in UNSUPPORTED_CODES:
                errors.note_unsupported(uid, str(call), call.function, nvml_code(exc))
            else:
                errors.count(call.function, nvml_code(exc))
            continue
        if isinstance(call.pick, str):
            answer = getattr(answer, call.pick)
        text = LABEL_CONVERTERS.get(spec.convert, _text)(answer)
        if text is not None:  # None: NVML has no value to give (e.g. a serial of 0xFF)
            labels[spec.name] = text
    return labels


def entity_labels(labels: dict[str, str], specs: Sequence[FieldSpec], entity: Entity,
                  mig_on: bool) -> dict[str, str]:
    """Return the label fields of one entity of the GPU whose `labels` were read. They are the
    GPU's labels except DCGM_FI_CUDA_GPU_VISIBLE_DEVICES, which DCGM composes per entity from the
    GPU's UUID (with `MIG-` before it while MIG is enabled, and `/<GPU instance id>` after it on
    an instance)."""
    composed = [s.name for s in specs if s.convert is Convert.CUDA_VISIBLE_DEVICES
                and s.name in labels]
    if not composed:
        return labels
    own = dict(labels)
    for name in composed:
        uuid = labels[name]
        if entity.gpu_instance_id is not None:
            own[name] = f"MIG-{uuid}/{entity.gpu_instance_id}"
        elif mig_on:
            own[name] = f"MIG-{uuid}"
    return own


def _text(answer: object) -> str:
    return answer.decode() if isinstance(answer, bytes) else str(answer)

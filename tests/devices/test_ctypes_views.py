"""The plain ctypes views the backend reads NVML answers through must match pynvml's layout."""

from __future__ import annotations

import ctypes

import pynvml
import pytest

from exporter.devices.fabric import FABRIC_INFO_V3, FabricInfo
from exporter.devices.gpm import GpmMetric
from exporter.devices.read_plan import FieldValue


@pytest.mark.parametrize(("ours", "theirs"), [
    (FieldValue, pynvml.c_nvmlFieldValue_t),
    (GpmMetric, pynvml.c_nvmlGpmMetric_t),
    (FabricInfo, pynvml.c_nvmlGpuFabricInfo_v3_t),
])
def test_layout_matches_pynvml(ours: type[ctypes.Structure], theirs: type[ctypes.Structure]
                               ) -> None:
    assert ctypes.sizeof(ours) == ctypes.sizeof(theirs)
    for our_field, their_field in zip(ours._fields_, theirs._fields_, strict=False):
        name, their_name = our_field[0], their_field[0]
        if name == "info":
            continue
        assert getattr(ours, name).offset == getattr(theirs, their_name).offset, name


def test_field_value_view_reads_what_pynvml_wrote() -> None:
    array = (pynvml.c_nvmlFieldValue_t * 2)()
    array[0].fieldId, array[0].valueType, array[0].value.ullVal = 138, 3, 2**40 + 5
    array[1].fieldId, array[1].nvmlReturn = 82, 3
    view = (FieldValue * 2).from_buffer(array)
    assert (view[0].fieldId, view[0].valueType, view[0].value.ullVal) == (138, 3, 2**40 + 5)
    assert (view[1].fieldId, view[1].nvmlReturn) == (82, 3)


def test_fabric_info_version_is_nvmls() -> None:
    assert pynvml.nvmlGpuFabricInfo_v3 == FABRIC_INFO_V3

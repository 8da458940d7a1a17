"""NVLink port registers read through PRM, as DCGM reads them for its link fields 580-592
and 1509.

PPCNT counter groups (`nvmlDeviceReadWritePRM_v1`): DCGM packs the register access itself, an
operation TLV (query of register 0x5008) and a register TLV holding the PPCNT request (local
port = link index + 1, the counter group), all as big-endian 32-bit words; the reply comes
back in the same buffer, its counters big-endian from byte 28. One call reads a whole group,
so every field of a group is served by one read per link and poll.

Single counters (`nvmlDeviceReadPRMCounters_v1`): one counter id per call; the local port is
link index + 1, except for the InfiniBand port-counters group (PORT_XMIT_WAIT), which DCGM
addresses by the link index itself.
"""

from __future__ import annotations

import ctypes
import struct
from collections.abc import Callable, Mapping

from exporter.devices.nvml_api import Handle, NvmlLib, NvmlValue

PRM_DATA_MAX_SIZE = 496
PPCNT_REGISTER = 0x5008
_OP_TLV = 1
_REG_TLV = 3
_OP_TLV_DWORDS = 4
_CLASS_REGISTER = 1
_METHOD_QUERY = 1


class PrmTlv(ctypes.Structure):
    """NVML's `nvmlPRMTLV_v1_t` struct, which has no version; the reply overwrites the request."""

    _fields_ = [("dataSize", ctypes.c_uint32), ("status", ctypes.c_uint32),
                ("data", ctypes.c_uint8 * PRM_DATA_MAX_SIZE)]


# PPCNT groups: the register's size as DCGM packs it, and the counters DCGM reads, by the
# name of their member in the register layout: (byte offset in the reply, width in bytes).
PPCNT_GROUPS: Mapping[int, tuple[int, Mapping[str, tuple[int, int]]]] = {
    0x1A: (244, {  # recovery counters
        "total_successful_recovery_events": (28, 4),
        "time_since_last_recovery": (104, 4),
        "time_between_last_2_recoveries": (118, 2),  # a 16-bit member
    }),
    0x12: (248, {  # physical layer counters
        "link_down_events": (220, 4),
        "successful_recovery_events": (224, 4),
    }),
    0x22: (248, {  # physical layer retry (PLR) counters: each a high and a low word
        "plr_rcv_codes": (28, 8),
        "plr_rcv_code_err": (36, 8),
        "plr_rcv_uncorrectable_code": (44, 8),
        "plr_xmit_codes": (52, 8),
        "plr_xmit_retry_codes": (60, 8),
        "plr_xmit_retry_events": (68, 8),
        "plr_sync_events": (76, 8),
    }),
}


def ppcnt_request(link: int, group: int) -> PrmTlv:
    """Return the query DCGM sends for one PPCNT counter group of one link."""
    size, _ = PPCNT_GROUPS[group]
    tlv = PrmTlv(dataSize=16 + 4 + size)
    struct.pack_into(
        ">IIIIIII", tlv.data, 0,
        _OP_TLV << 27 | _OP_TLV_DWORDS << 16,
        PPCNT_REGISTER << 16 | _METHOD_QUERY << 8 | _CLASS_REGISTER,
        0, 0,  # transaction id
        _REG_TLV << 27 | (size // 4 + 1) << 16,
        (link + 1) << 16 | group,  # local port, counter group (pnat, swid 0)
        0)  # no clear, priority 0
    return tlv


class PpcntCounters:
    """One group's counters from a reply, as attributes named after the register members;
    every one None when the reply is not a good answer to the query (as DCGM, which then
    stores nothing)."""

    def __init__(self, data: bytes, group: int) -> None:
        _, members = PPCNT_GROUPS[group]
        good = reply_ok(data, group)
        for name, (offset, width) in members.items():
            value = int.from_bytes(data[offset:offset + width], "big") if good else None
            setattr(self, name, value)


def reply_ok(data: bytes, group: int) -> bool:
    """Return whether the reply passes the checks DCGM makes: an operation TLV with status 0,
    then a register TLV, for the group asked."""
    return (data[0] >> 3 == _OP_TLV and data[2] & 0x7F == 0 and data[16] >> 3 == _REG_TLV
            and data[23] & 0x3F == group)


def ppcnt_reader(lib: NvmlLib, handle: Handle, link: int, group: int
                 ) -> Callable[[], PpcntCounters]:
    """Return a function that reads one PPCNT counter group of one NVLink each time it is called."""
    call: Callable[[Handle, PrmTlv], None] = lib.nvmlDeviceReadWritePRM_v1

    def read() -> PpcntCounters:
        tlv = ppcnt_request(link, group)
        call(handle, tlv)  # pynvml passes it by reference
        return PpcntCounters(bytes(tlv.data), group)
    return read


# --- nvmlDeviceReadPRMCounters_v1 -------------------------------------------------------------

COUNTER_PORT_XMIT_WAIT = 201
"""NVML_PRM_COUNTER_ID_PPCNT_PORTCOUNTERS_PORT_XMIT_WAIT: addressed by the link index."""
_VALUE_MEMBERS = {1: "uiVal", 2: "ulVal", 3: "ullVal"}
"""The union member DCGM reads for each value type (nvmlValueType_t) of a counter's answer; any
other type gives no value."""


class PrmCounter(ctypes.Structure):
    """NVML's `nvmlPRMCounter_v1_t` struct."""

    _fields_ = [("counterId", ctypes.c_uint32), ("localPort", ctypes.c_uint32),
                ("status", ctypes.c_uint), ("outputType", ctypes.c_uint),
                ("outputValue", NvmlValue)]


class PrmCounterList(ctypes.Structure):
    """NVML's `nvmlPRMCounterList_v1_t` struct."""

    _fields_ = [("numCounters", ctypes.c_uint32),
                ("counters", ctypes.POINTER(PrmCounter))]


def local_port(link: int, counter_id: int) -> int:
    """Return the register's local port for this link: the port transmit-wait counter numbers links
    from 0, the others from 1, as DCGM reads them."""
    return link if counter_id == COUNTER_PORT_XMIT_WAIT else link + 1


def counter_reader(lib: NvmlLib, handle: Handle, link: int, counter_id: int
                   ) -> Callable[[], int | None]:
    """Return a function that reads one PRM counter of one NVLink each time it is called (None when
    the device gives no value)."""
    call: Callable[[Handle, PrmCounterList], None] = lib.nvmlDeviceReadPRMCounters_v1

    def read() -> int | None:
        counter = PrmCounter(counterId=counter_id, localPort=local_port(link, counter_id))
        listed = PrmCounterList(numCounters=1, counters=ctypes.pointer(counter))
        call(handle, listed)  # pynvml passes it by reference
        member = _VALUE_MEMBERS.get(counter.outputType)
        if counter.status or member is None:
            return None  # the counter's own error, or a type DCGM does not read: no value
        value: int = getattr(counter.outputValue, member)
        return value
    return read


"""NVLink port registers through PRM (`nvmlDeviceReadWritePRM_v1` PPCNT groups and
`nvmlDeviceReadPRMCounters_v1`), consistent with the link's other counters, and the NVLink
P2P status towards a peer GPU.

A healthy link has had no link-down events; its recoveries are the DL recovery count of
`nvmlDeviceGetNvLinkErrorCounter`, its PLR receive errors the CRC flit errors and its retried
codes the replays; codes flow with the link's share of the NVLink traffic (one 256-byte code
each). The recovery timers count from the simulated node's start. The PPCNT request is
checked as the firmware would: anything but a query of PPCNT for a group answered here gets
the BAD_TLV status.
"""

from __future__ import annotations

import struct
from typing import Any

import pynvml

from exporter.devices.prm import PPCNT_GROUPS, local_port
from exporter.simulated.node.core import GpuEntry, Handle, SimCore, fail

_BAD_TLV = 3
_CODES_PER_KIB = 4
_DL_RECOVERY, _DL_CRC_FLIT, _DL_REPLAY = 1, 2, 0
_PPRM_OPER_RECOVERY = 1001
_PORT_XMIT_WAIT = 201


def _is_ppcnt_query(words: tuple[int, ...], size: int, register_size: int) -> bool:
    """Tell whether the words are the access register interface's query of PPCNT: operation
    TLV (type 1, 4 words; class register, method query, register 0x5008; no transaction id),
    register TLV (type 3, the register's words + 1), PPCNT header with only port and group
    set."""
    return (size == 20 + register_size and words[0] == 0x08040000 and words[1] == 0x50080101
            and words[2] == words[3] == 0 and words[4] == (3 << 27 | (register_size // 4 + 1) << 16)
            and words[5] & ~(0xFF << 16 | 0x3F) == 0 and words[6] == 0)


class PrmCalls(SimCore):
    """The simulated node's answers to NVLink port register reads (PPCNT groups and PRM
    counters)."""

    def _ppcnt(self, gpu: GpuEntry, t: float, link: int) -> dict[str, int]:
        dyn = gpu.dyn
        links = gpu.spec.board.nvlink_links
        recoveries = dyn.nvlink_errors(t, link, _DL_RECOVERY)
        kib = (dyn.nvlink_kib(t, "rx") + dyn.nvlink_kib(t, "tx")) / links
        return {
            "total_successful_recovery_events": recoveries,
            "time_since_last_recovery": int(t),
            "time_between_last_2_recoveries": 0,
            "link_down_events": 0,
            "successful_recovery_events": recoveries,
            "plr_rcv_codes": int(kib * _CODES_PER_KIB / 2),
            "plr_rcv_code_err": dyn.nvlink_errors(t, link, _DL_CRC_FLIT),
            "plr_rcv_uncorrectable_code": 0,
            "plr_xmit_codes": int(kib * _CODES_PER_KIB / 2),
            "plr_xmit_retry_codes": dyn.nvlink_errors(t, link, _DL_REPLAY),
            "plr_xmit_retry_events": dyn.nvlink_errors(t, link, _DL_REPLAY),
            "plr_sync_events": 0,
        }

    def nvmlDeviceReadWritePRM_v1(self, handle: Handle, tlv: Any) -> None:
        """Answer a PPCNT register query in the TLV with the link's counters; a query that is not
        well formed answers as NVML does."""
        words = struct.unpack_from(">7I", bytes(tlv.data))
        group, port = words[5] & 0x3F, words[5] >> 16 & 0xFF  # PPCNT word 0
        well_formed = group in PPCNT_GROUPS and port >= 1 and _is_ppcnt_query(
            words, tlv.dataSize, PPCNT_GROUPS[group][0])
        with self._lock:
            if not well_formed:
                self._physical(handle, self._begin("nvmlDeviceReadWritePRM_v1"))
                tlv.data[2] = _BAD_TLV
                return
            t = self._begin("nvmlDeviceReadWritePRM_v1")
            gpu = self._link(handle, t, port - 1)
            values = self._ppcnt(gpu, t, port - 1)
            tlv.data[6] |= 0x80  # a response
            for name, (offset, width) in PPCNT_GROUPS[group][1].items():
                tlv.data[offset:offset + width] = values[name].to_bytes(width, "big")

    def nvmlDeviceReadPRMCounters_v1(self, handle: Handle, counters: Any) -> None:
        """Fill in each requested PRM counter of the GPU's links."""
        with self._lock:
            for i in range(counters.numCounters):
                counter = counters.counters[i]
                link = next((n for n in range(64)
                             if local_port(n, counter.counterId) == counter.localPort), -1)
                t = self._begin("nvmlDeviceReadPRMCounters_v1")
                gpu = self._link(handle, t, link)
                if counter.counterId not in (_PPRM_OPER_RECOVERY, _PORT_XMIT_WAIT):
                    counter.status = pynvml.NVML_ERROR_NOT_SUPPORTED
                    continue
                counter.status, counter.outputType = 0, pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG
                # No recovery under way; no transmit waits on an unloaded fabric.
                counter.outputValue.ullVal = 0 if counter.counterId == _PPRM_OPER_RECOVERY \
                    else int(gpu.dyn.activity_integral(0.0, t) * 1000)

    def nvmlDeviceGetP2PStatus(self, handle: Handle, peer: Handle, caps_index: int) -> int:
        """Answer that NVLink P2P is OK between two NVLink GPUs without MIG (the NVSwitch fabric
        joins every pair); a PCIe board or a MIG-enabled GPU has none (NOT_SUPPORTED, 5)."""
        with self._lock:
            t = self._begin("nvmlDeviceGetP2PStatus")
            gpus = (self._physical(handle, t), self._physical(peer, t))
            if gpus[0].index == gpus[1].index:
                fail(pynvml.NVML_ERROR_INVALID_ARGUMENT)
            if caps_index != pynvml.NVML_P2P_CAPS_INDEX_NVLINK:
                fail(pynvml.NVML_ERROR_NOT_SUPPORTED)  # only the NVLink index is simulated
            if all(g.spec.board.nvlink_links and not g.mig_on for g in gpus):
                return int(pynvml.NVML_P2P_STATUS_OK)
            return int(pynvml.NVML_P2P_STATUS_NOT_SUPPORTED)

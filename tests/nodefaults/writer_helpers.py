"""Snapshots with faults, and a writer pointed at the fake API server, for the writer
tests."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from exporter.devices.model import Inventory, Readings
from exporter.fields.csv import parse_collectors
from exporter.fields.faults import ClearedBy, GpuFault
from exporter.k8s.types import Attribution
from exporter.nodefaults.apihttp import ApiHttp, credentials
from exporter.nodefaults.config import NodeFaultsConfig
from exporter.nodefaults.writer import NodeFaultWriter
from exporter.sampling.snapshot import HostLabel, Snapshot

NODE = "gpu-node-1"
BOOT = "4f1c2d3e-0000-1111-2222-333344445555"
FELL_OFF = GpuFault(gpu=1, uuid="GPU-00000001", source="xid", code="79",
                    name="ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS", action="RESTART_BM",
                    fatal=True, cleared_by=ClearedBy.REBOOT, since=1796648371.25, boot_id=BOOT)
PAGE_FAULT = GpuFault(gpu=0, uuid="GPU-00000000", source="xid", code="31",
                      name="GPU_MEMORY_PAGE_FAULT", action="RESTART_APP", fatal=False,
                      cleared_by=ClearedBy.HOLDER_EXIT, since=1796648000.5, boot_id=BOOT)
COLLECTORS = parse_collectors("DCGM_FI_DEV_GPU_TEMP, gauge, t\n", "c.csv")


def snapshot(faults: tuple[GpuFault, ...] = (), events: tuple[GpuFault, ...] = (), *,
             taken_at: float = 1796648400.0,
             holders: Mapping[int, tuple[tuple[str, str], ...]] | None = None) -> Snapshot:
    """Return a poll's snapshot holding `faults`, raising `events`, with pods holding GPUs."""
    held = {(gpu, -1): tuple(sorted(pods)) for gpu, pods in (holders or {}).items()}
    return Snapshot(inventory=Inventory(), readings=Readings(), collectors=COLLECTORS,
                    host=HostLabel("Hostname", NODE), attribution=Attribution(holders=held),
                    taken_at=taken_at, faults=faults, fault_events=events)


def writer(kubeconfig: str, **settings: bool | str | float) -> NodeFaultWriter:
    """Return a writer (not started) for NODE with these settings, and a short backoff."""
    return writer_with_backoff(kubeconfig, (0.05, 0.4), settings)


def writer_with_backoff(kubeconfig: str, backoff_s: tuple[float, float],
                        settings: dict[str, bool | str | float]) -> NodeFaultWriter:
    """Return a writer (not started) for NODE with these settings and this backoff."""
    config = replace(NodeFaultsConfig(node_name=NODE), **settings)  # type: ignore[arg-type]
    return NodeFaultWriter(config, lambda: ApiHttp(credentials(kubeconfig), timeout_s=2.0),
                           backoff_s=backoff_s)

"""Serve's `--backend sim` wiring: the simulated NVML library, and with `--sim.kubelet` the
kubelet, the API server's pod metadata and the processes' /proc files around it, built from
the simulated node's settings. `exporter.serve` calls these and nothing else here."""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from exporter.config import ConfigError, SimSettings
from exporter.devices.nvml import NvmlBackend
from exporter.k8s.config import DEFAULT_POD_RESOURCES_SOCKET, KubernetesConfig
from exporter.simulated.node import SimNvml, parse_fault

if TYPE_CHECKING:
    from exporter.devices.nvml_api import NvmlLib
    from exporter.k8s.source import PodMetadata
    from exporter.simulated.kubelet import SimKubeletHandle

log = logging.getLogger("exporter")


def load_sim_nvml(sim: SimSettings) -> SimNvml:
    """Return the simulated NVML library the settings describe; a fault spec, profile or
    mig-parted config it cannot use is a ConfigError naming the option."""
    from exporter.partitions.migparted import MigPartedError

    faults = []
    for spec in sim.faults:
        try:
            faults.append(parse_fault(spec))
        except ValueError as exc:
            raise ConfigError(f"--sim.fault {spec!r}: {exc}") from None
    try:
        lib = SimNvml(sim.profile, seed=sim.seed, faults=faults, mig_config=sim.mig_config)
    except MigPartedError as exc:
        raise ConfigError(f"--sim.mig-config: {exc}") from None
    except ValueError as exc:
        raise ConfigError(f"simulated node (--sim.profile/--sim.fault): {exc}") from None
    if faults:
        # A fault's `at` counts from here; the log lets a reader (or a test) place each
        # fault on the wall clock without trusting when its effect was first seen.
        log.info("simulated node %s: --sim.fault times count from Unix time %.3f",
                 sim.profile, lib.started_at)
    return lib


@dataclass(frozen=True, slots=True)
class SimNode:
    """What `--sim.kubelet` adds around the simulated GPUs."""

    kubelet: SimKubeletHandle
    metadata: PodMetadata | None
    """The simulated API server's pod metadata, when pod labels or process reads ask for it."""
    proc_root: str
    """Where the simulated GPU processes' cgroup files are (`/proc` of a real node)."""

    def stop(self) -> None:
        """Stop serving pod allocations."""
        self.kubelet.stop()


def start_sim_node(k8s: KubernetesConfig, lib: NvmlLib, backend: NvmlBackend, tmp: Path
                   ) -> tuple[KubernetesConfig, SimNode]:
    """Return the Kubernetes settings pointing at a simulated kubelet just started, and the
    simulated node around it (its files under `tmp`)."""
    from exporter.simulated.kubelet import plan_allocations, start_sim_kubelet  # gRPC

    backend.poll()  # enumerate, so the simulated kubelet knows the devices to hand out
    socket_path = k8s.pod_resources_socket
    if socket_path == DEFAULT_POD_RESOURCES_SOCKET:
        socket_path = str(tmp / "kubelet.sock")
    # The simulated node says which GPUs pods share by time-slicing, and by how many.
    shared_by = lib.shared_by if isinstance(lib, SimNvml) else {}
    server = start_sim_kubelet(socket_path, backend.inventory, shared_by=shared_by)
    log.info("simulated kubelet serving pod allocations on %s", socket_path)
    k8s = replace(k8s, enabled=True, pod_resources_socket=socket_path)
    metadata: PodMetadata | None = None
    proc_root = tmp / "proc"
    if k8s.wants_pod_metadata or k8s.wants_process_reads:
        from exporter.simulated.pods import SimPodMetadata, write_demo_proc

        allocations = plan_allocations(backend.inventory, shared_by=shared_by)
        metadata = SimPodMetadata.for_node(allocations, k8s)
        log.info("simulated API server: labels of the %d simulated pods", len(allocations))
        if k8s.wants_process_reads and isinstance(lib, SimNvml):
            written = write_demo_proc(proc_root, allocations, lib.tenant_pids)
            log.info("simulated /proc: cgroup files of %d GPU processes in %s", written,
                     proc_root)
    return k8s, SimNode(server, metadata, str(proc_root))

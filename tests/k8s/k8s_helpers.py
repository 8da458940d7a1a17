"""Inventories built by hand for the Kubernetes attribution tests."""

from __future__ import annotations

from exporter.devices.model import Entity, Inventory, MigDevice


def gpu_uuid(index: int) -> str:
    return f"GPU-{index:08x}-1111-2222-3333-{index:012x}"


def mig_uuid(gpu: int, gi: int, ci: int) -> str:
    return f"MIG-{gpu:02x}{gi:02x}{ci:04x}-aaaa-bbbb-cccc-{gpu * 100 + gi * 10 + ci:012x}"


def whole_gpu(index: int) -> Entity:
    return Entity(
        gpu=index,
        uuid=gpu_uuid(index),
        pci_bus_id=f"00000000:{0x18 + index:02X}:00.0",
        device=f"nvidia{index}",
        model="NVIDIA H100 80GB HBM3",
    )


def mig_instance(gpu: int, gi: int, profile: str, cis: int = 1) -> Entity:
    parent = whole_gpu(gpu)
    return Entity(
        gpu=gpu,
        uuid=parent.uuid,
        pci_bus_id=parent.pci_bus_id,
        device=parent.device,
        model="NVIDIA H200",
        gpu_instance_id=gi,
        gpu_instance_profile=profile,
        mig_devices=tuple(
            MigDevice(
                uuid=mig_uuid(gpu, gi, ci),
                gpu_instance_id=gi,
                compute_instance_id=ci,
                name=f"NVIDIA H200 MIG {'' if cis == 1 else f'{ci + 1}c.'}{profile}",
            )
            for ci in range(cis)
        ),
    )


def plain_node(count: int = 4) -> Inventory:
    return Inventory(gpus=tuple(whole_gpu(i) for i in range(count)), driver_version="590.48.01")


def mig_node() -> Inventory:
    """GPU 0 whole; GPU 1 in MIG mode with GI 1 (2g.35gb), GI 2 (3g.71gb split into two compute
    instances) and GI 5 (1g.18gb)."""
    return Inventory(
        gpus=(whole_gpu(0), whole_gpu(1)),
        instances=(
            mig_instance(1, 1, "2g.35gb"),
            mig_instance(1, 2, "3g.71gb", cis=2),
            mig_instance(1, 5, "1g.18gb"),
        ),
        driver_version="590.48.01",
    )


# -- NVIDIA's DRA driver (gpu.nvidia.com): ResourceSlice devices ------------------------------


def slice_gpu(minor: int) -> dict[str, object]:
    """A full GPU as the driver publishes it: `gpu-<minor>`, its UUID among the attributes."""
    gpu = whole_gpu(minor)
    return {
        "name": f"gpu-{minor}",
        "attributes": {
            "type": {"string": "gpu"},
            "uuid": {"string": gpu.uuid},
            "productName": {"string": gpu.model},
            "brand": {"string": "Nvidia"},
            "architecture": {"string": "Hopper"},
            "cudaComputeCapability": {"version": "9.0.0"},
            "driverVersion": {"version": "590.48.1"},
            "resource.kubernetes.io/pciBusID": {"string": gpu.pci_bus_id.lower()[4:]},
        },
        "capacity": {"memory": {"value": "80Gi"}},
    }


def slice_mig(parent: int, gi: int, profile: str, profile_id: int, start: int,
              *, created: bool = True) -> dict[str, object]:
    """A MIG device: `gpu-<minor>-mig-<profile without dots>-<profile id>-<placement>`;
    only a MIG device that exists (static MIG) has a `uuid`."""
    attributes: dict[str, object] = {
        "type": {"string": "mig"},
        "parentUUID": {"string": gpu_uuid(parent)},
        "profile": {"string": profile},
        "productName": {"string": "NVIDIA H200"},
    }
    if created:
        attributes["uuid"] = {"string": mig_uuid(parent, gi, 0)}
    name = f"gpu-{parent}-mig-{profile.replace('.', '')}-{profile_id}-{start}"
    return {"name": name, "attributes": attributes}

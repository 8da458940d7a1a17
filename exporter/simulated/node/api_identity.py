"""Library life cycle, system queries, enumeration, identity and MIG layout."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pynvml

from exporter.simulated.node import profiles as P
from exporter.simulated.node.core import GpuEntry, Handle, MigEntry, SimCore, fail


class IdentityCalls(SimCore):
    """The simulated node's answers to initialisation and shutdown, system queries, enumeration
    and the MIG tree."""

    def nvmlInit(self) -> None:
        """Initialise the simulated library; it answers DRIVER_NOT_LOADED while an `nvml-down` fault
        holds."""
        self._init("nvmlInit")

    def nvmlInitWithFlags(self, flags: int) -> None:  # noqa: ARG002 (pynvml's signature)
        """Initialise the simulated library; the flags are accepted and ignored."""
        self._init("nvmlInitWithFlags")

    def _init(self, name: str) -> None:
        with self._lock:
            self.calls[name] += 1
            t = self.now()
            if any(w.active(t) for w in self._down):
                fail(pynvml.NVML_ERROR_DRIVER_NOT_LOADED)
            self._initialised(t)
            self._refcount += 1
            self._last_init = t

    def nvmlShutdown(self) -> None:
        """Release one initialisation of the simulated library."""
        with self._lock:
            self._begin("nvmlShutdown")
            self._refcount -= 1
            self._cond.notify_all()

    def nvmlSystemGetDriverVersion(self) -> str:
        """Return the simulated driver's version."""
        with self._lock:
            self._begin("nvmlSystemGetDriverVersion")
            return P.DRIVER_VERSION

    def nvmlSystemGetNVMLVersion(self) -> str:
        """Return the simulated NVML's version."""
        with self._lock:
            self._begin("nvmlSystemGetNVMLVersion")
            return P.NVML_VERSION

    # -- enumeration and identity -----------------------------------------------------------

    def nvmlDeviceGetCount(self) -> int:
        """Return how many GPUs the simulated node has."""
        with self._lock:
            self._begin("nvmlDeviceGetCount")
            return len(self._gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> Handle:
        """Return the handle of the GPU with this index; a lost GPU answers GPU_IS_LOST."""
        with self._lock:
            t = self._begin("nvmlDeviceGetHandleByIndex")
            if not 0 <= index < len(self._gpus):
                fail(pynvml.NVML_ERROR_INVALID_ARGUMENT)
            gpu = self._gpus[index]
            if any(w.active(t) for w in gpu.lost):
                fail(pynvml.NVML_ERROR_GPU_IS_LOST)
            return self._device_handle(gpu.address)

    def nvmlDeviceGetHandleByUUID(self, uuid: str | bytes) -> Handle:
        """Return the handle of the GPU or MIG device with this UUID."""
        with self._lock:
            t = self._begin("nvmlDeviceGetHandleByUUID")
            text = uuid.decode() if isinstance(uuid, bytes) else uuid
            for device in self._devices.values():
                if device.uuid == text:
                    handle = self._device_handle(device.address)
                    self._resolve(handle, t)
                    return handle
            fail(pynvml.NVML_ERROR_NOT_FOUND)

    def nvmlDeviceGetIndex(self, handle: Handle) -> int:
        """Return the GPU's index (a MIG device handle answers NOT_SUPPORTED)."""
        with self._lock:
            t = self._begin("nvmlDeviceGetIndex")
            return self._physical(handle, t).index

    def nvmlDeviceGetUUID(self, handle: Handle) -> str:
        """Return the UUID of the GPU or MIG device."""
        with self._lock:
            t = self._begin("nvmlDeviceGetUUID")
            return self._resolve(handle, t).uuid

    def nvmlDeviceGetName(self, handle: Handle) -> str:
        """Return the board's name for a GPU, or the MIG device's own name."""
        with self._lock:
            t = self._begin("nvmlDeviceGetName")
            device = self._resolve(handle, t)
            return device.name if isinstance(device, MigEntry) else device.spec.board.name

    def nvmlDeviceGetMinorNumber(self, handle: Handle) -> int:
        """Return the GPU's minor device number (the same as its index here)."""
        with self._lock:
            t = self._begin("nvmlDeviceGetMinorNumber")
            return self._physical(handle, t).index

    def nvmlDeviceGetPciInfo_v3(self, handle: Handle) -> Any:
        """Return the GPU's PCI information."""
        with self._lock:
            t = self._begin("nvmlDeviceGetPciInfo_v3")
            return _pci_info(self._physical(handle, t).spec)

    def nvmlDeviceGetPciInfo(self, handle: Handle) -> Any:
        """Return the PCI information of the GPU, or of the parent GPU for a MIG device."""
        with self._lock:
            t = self._begin("nvmlDeviceGetPciInfo")
            device = self._resolve(handle, t)
            return _pci_info((device if isinstance(device, GpuEntry) else device.gpu).spec)

    # -- MIG --------------------------------------------------------------------------------

    def _mig_capable_gpu(self, handle: Handle, t: float) -> GpuEntry:
        device = self._resolve(handle, t)
        if isinstance(device, MigEntry):
            fail(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        if not device.spec.board.mig_capable:
            fail(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return device

    def nvmlDeviceGetMigMode(self, handle: Handle) -> list[int]:
        """Return the current and pending MIG modes of the GPU, which are always the same here."""
        with self._lock:
            t = self._begin("nvmlDeviceGetMigMode")
            mode = int(self._mig_capable_gpu(handle, t).mig_on)
            return [mode, mode]

    def nvmlDeviceGetMaxMigDeviceCount(self, handle: Handle) -> int:
        """Return how many MIG device slots a MIG-capable GPU has."""
        with self._lock:
            t = self._begin("nvmlDeviceGetMaxMigDeviceCount")
            self._mig_capable_gpu(handle, t)
            return P.MAX_MIG_DEVICES

    def nvmlDeviceGetMigDeviceHandleByIndex(self, handle: Handle, index: int) -> Handle:
        """Return the handle of the MIG device in this slot of the GPU; an empty slot answers
        NOT_FOUND."""
        with self._lock:
            t = self._begin("nvmlDeviceGetMigDeviceHandleByIndex")
            gpu = self._mig_capable_gpu(handle, t)
            if not 0 <= index < P.MAX_MIG_DEVICES:
                fail(pynvml.NVML_ERROR_INVALID_ARGUMENT)
            mig = self._migs[gpu.index].get(index)
            if mig is None:
                fail(pynvml.NVML_ERROR_NOT_FOUND)
            return self._device_handle(mig.address)

    def nvmlDeviceIsMigDeviceHandle(self, handle: Handle) -> bool:
        """Return whether the handle is one of a MIG device."""
        with self._lock:
            t = self._begin("nvmlDeviceIsMigDeviceHandle")
            return isinstance(self._resolve(handle, t), MigEntry)

    def nvmlDeviceGetGpuInstanceId(self, mig_handle: Handle) -> int:
        """Return the id of the GPU instance that holds this MIG device."""
        with self._lock:
            t = self._begin("nvmlDeviceGetGpuInstanceId")
            return self._mig_handle(mig_handle, t).gi.gi_id

    def nvmlDeviceGetComputeInstanceId(self, mig_handle: Handle) -> int:
        """Return the id of this MIG device's compute instance."""
        with self._lock:
            t = self._begin("nvmlDeviceGetComputeInstanceId")
            return self._mig_handle(mig_handle, t).ci.ci_id

    def nvmlDeviceGetDeviceHandleFromMigDeviceHandle(self, mig_handle: Handle) -> Handle:
        """Return the handle of the GPU that holds this MIG device."""
        with self._lock:
            t = self._begin("nvmlDeviceGetDeviceHandleFromMigDeviceHandle")
            return self._device_handle(self._mig_handle(mig_handle, t).gpu.address)

    def nvmlDeviceGetGpuInstanceById(self, handle: Handle, gi_id: int) -> Handle:
        """Return the handle of the GPU instance with this id; a GPU with MIG off answers
        INVALID_STATE and a missing instance NOT_FOUND."""
        with self._lock:
            t = self._begin("nvmlDeviceGetGpuInstanceById")
            gpu = self._mig_capable_gpu(handle, t)
            if not gpu.mig_on:
                fail(pynvml.NVML_ERROR_INVALID_STATE)
            if _gpu_instance(gpu, gi_id) is None:
                fail(pynvml.NVML_ERROR_NOT_FOUND)
            return GpuInstanceHandle(gpu.address, gi_id)

    def nvmlGpuInstanceGetInfo(self, gi_handle: Handle) -> Any:
        """Return the GPU instance's information, its profile id included."""
        with self._lock:
            t = self._begin("nvmlGpuInstanceGetInfo")
            if not isinstance(gi_handle, GpuInstanceHandle):
                fail(pynvml.NVML_ERROR_INVALID_ARGUMENT)
            gpu = self._resolve(self._device_handle(gi_handle.gpu_address), t)
            gi = _gpu_instance(gpu, gi_handle.gi_id) if isinstance(gpu, GpuEntry) else None
            if gi is None:
                fail(pynvml.NVML_ERROR_INVALID_ARGUMENT)
            info = pynvml.c_nvmlGpuInstanceInfo_t()
            info.id, info.profileId = gi.gi_id, gpu_instance_profile_id(gi)
            return info

    def nvmlDeviceGetGpuInstanceProfileInfoByIdV(self, handle: Handle, profile_id: int) -> Any:
        """Return the profile's version 2 information, with its name as nvidia-smi prints it
        (`MIG 3g.71gb`), for the profiles this GPU's layout uses; the others answer
        NOT_SUPPORTED."""
        with self._lock:
            t = self._begin("nvmlDeviceGetGpuInstanceProfileInfoByIdV")
            gpu = self._mig_capable_gpu(handle, t)
            gi = next((g for g in gpu.spec.mig or ()
                       if gpu_instance_profile_id(g) == profile_id), None)
            if gi is None:
                fail(pynvml.NVML_ERROR_NOT_SUPPORTED)
            info = pynvml.c_nvmlGpuInstanceProfileInfo_v2_t()
            info.id, info.sliceCount, info.memorySizeMB = profile_id, gi.slices, gi.memory_mib
            info.name = f"MIG {gi.profile}".encode()
            return info

    def nvmlDeviceGetAttributes_v2(self, handle: Handle) -> Any:
        """Return the device's attributes: multiprocessor count and slice counts, which differ for a
        MIG device."""
        with self._lock:
            t = self._begin("nvmlDeviceGetAttributes_v2")
            device = self._resolve(handle, t)
            attrs = pynvml.c_nvmlDeviceAttributes()
            if isinstance(device, MigEntry):
                attrs.multiprocessorCount = device.ci.multiprocessors
                attrs.gpuInstanceSliceCount = device.gi.slices
                attrs.computeInstanceSliceCount = device.ci.slices
                attrs.memorySizeMB = device.gi.memory_mib
            else:
                attrs.multiprocessorCount = device.spec.board.multiprocessors
                attrs.gpuInstanceSliceCount = 7 if device.spec.board.mig_capable else 0
                attrs.computeInstanceSliceCount = attrs.gpuInstanceSliceCount
                attrs.memorySizeMB = device.spec.board.memory_total_mib
            return attrs


@dataclass(frozen=True, slots=True)
class GpuInstanceHandle:
    """A GPU instance handle (nvmlGpuInstance_t) of the simulated node."""

    gpu_address: int
    gi_id: int


_PROFILE_IDS = {1: 19, 2: 14, 3: 9, 4: 5, 7: 0}
"""NVML's GPU instance profile ids (`nvidia-smi mig -lgip`'s ID column) by slice count."""


def gpu_instance_profile_id(gi: P.GpuInstanceSpec) -> int:
    """Return NVML's profile id of a simulated GPU instance (1g: 19, 2g: 14, 3g: 9, 4g: 5, 7g:
    0)."""
    return _PROFILE_IDS[gi.slices]


def _gpu_instance(gpu: GpuEntry, gi_id: int) -> P.GpuInstanceSpec | None:
    return next((g for g in gpu.spec.mig or () if g.gi_id == gi_id), None)


def _pci_info(spec: P.GpuSpec) -> Any:
    info = pynvml.nvmlPciInfo_t()
    info.busIdLegacy = spec.bus_id_legacy.encode()
    info.busId = spec.bus_id.encode()
    info.domain = 0
    info.bus = spec.bus
    info.device = spec.pci_device
    info.pciDeviceId = spec.board.pci_device_id
    info.pciSubSystemId = spec.board.pci_subsystem_id
    return info

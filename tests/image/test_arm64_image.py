"""The same Dockerfile for linux/arm64 (GH200 and GB200 nodes), built on this amd64 machine.

The build runs nothing on arm64: its builder runs on the host and installs aarch64 wheels
fetched on the host; its final stages only copy. Running the image needs qemu-user
emulation (qemu-user-static + binfmt-support, registered by scripts/test.sh), and the
simulated NVML library is built for this machine, so the container runs the exporter's own
simulated node (`--backend sim`).
"""

from __future__ import annotations

import re
import struct
from collections.abc import Iterator
from pathlib import Path

import pytest

from scripts.podman import inspect_format, mounted_image
from tests.support.container import ContainerSpec, run_once, running
from tests.support.image import checkout_image
from tests.support.requirements import missing, require_tool

pytestmark = pytest.mark.timeout(1800)  # building may take minutes on a fresh machine

AARCH64 = 183
"""ELF e_machine of aarch64 (EM_AARCH64)."""
BINFMT = Path("/proc/sys/fs/binfmt_misc/qemu-aarch64")


@pytest.fixture(scope="module")
def arm64_image() -> str:
    return checkout_image("arm64")


def elf_machine(path: Path) -> int:
    header = path.read_bytes()[:20]
    assert header[:4] == b"\x7fELF", path
    machine: int = struct.unpack("<H", header[18:20])[0]
    return machine


@pytest.fixture(scope="module")
def rootfs(arm64_image: str) -> Iterator[Path]:
    with mounted_image(arm64_image) as path:
        yield path


def test_the_image_is_arm64_through_and_through(arm64_image: str, rootfs: Path) -> None:
    assert inspect_format(arm64_image, "{{.Architecture}}") == "arm64"
    assert elf_machine(rootfs / "usr/bin/python3.11") == AARCH64
    site = rootfs / "usr/local/lib/python3.11/dist-packages"
    extensions = [*site.glob("grpc/_cython/*.so"), *site.glob("aiohttp/*.so"),
                  *site.glob("yaml/*.so")]
    assert extensions
    assert {elf_machine(p) for p in extensions} == {AARCH64}
    sbom = (rootfs / "usr/share/doc/gpu-exporter/sbom.cdx.json").read_text()
    assert set(re.findall(r"arch=(\w+)", sbom)) <= {"arm64", "all"}


def test_it_serves_metrics_under_emulation(arm64_image: str) -> None:
    require_tool("qemu-aarch64-static", "qemu-user-static")
    if not BINFMT.is_file() or "enabled" not in BINFMT.read_text():
        missing(f"{BINFMT}: qemu-aarch64 is not registered with binfmt_misc")
    spec = ContainerSpec(image=arm64_image, arch="arm64", read_only=True, cap_drop_all=True,
                         args=("--backend", "sim", "-c", "2000"))
    with running(spec) as container:
        # Emulated: each instruction translated, so slower than native.
        container.answered("/health", budget_s=120, timeout_s=5)
        status, text = container.get("/metrics", timeout=30)
        assert status == 200
        assert re.search(r'^DCGM_FI_DEV_GPU_TEMP\{gpu="0",UUID="GPU-', text, re.MULTILINE), \
            text[:2000]
        assert "backend sim" in container.logs()
    code, machine = run_once(ContainerSpec(
        image=arm64_image, arch="arm64", port=None, entrypoint=("/usr/bin/python3.11", "-c"),
        args=("import platform; print(platform.machine())",)))
    assert (code, machine.strip()) == (0, "aarch64")

"""What the built image holds and how it starts, read from the image itself.

Its configuration (entrypoint with no CMD, the NVIDIA runtime's env), its files (the
dcgm-exporter CSVs in a real directory, Debian's python3.11 with the application, and no
shell, pip or package manager), and its SBOM: every Python distribution and every Debian
package in the image listed with its version, and nothing else.
"""

from __future__ import annotations

import email.parser
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from scripts.image import SBOM_PATH, version
from scripts.podman import inspect_format, mounted_image
from tests.support.paths import ROOT

pytestmark = pytest.mark.timeout(1800)  # the first test may build the image

SITE = "usr/local/lib/python3.11/dist-packages"


@pytest.fixture(scope="module")
def rootfs(built_image: str) -> Iterator[Path]:
    with mounted_image(built_image) as path:
        yield path


@pytest.fixture(scope="module")
def config(built_image: str) -> dict[str, Any]:
    value: dict[str, Any] = json.loads(inspect_format(built_image, "{{json .Config}}"))
    return value


def test_entrypoint_without_cmd_and_the_nvidia_env(config: dict[str, Any]) -> None:
    assert config["Entrypoint"] == ["/usr/local/bin/gpu-exporter"]
    assert not config.get("Cmd")
    env = dict(item.split("=", 1) for item in config["Env"])
    assert {k: v for k, v in env.items() if k.startswith("NVIDIA_")} == {
        "NVIDIA_VISIBLE_DEVICES": "all",
        "NVIDIA_DRIVER_CAPABILITIES": "compute,utility,compat32",
        "NVIDIA_DISABLE_REQUIRE": "true",
    }
    assert env["PATH"].split(":")[:2] == ["/usr/local/sbin", "/usr/local/bin"]
    assert "9400/tcp" in config["ExposedPorts"]
    assert config.get("User", "") in ("", "0")


def test_the_csvs_sit_in_a_real_directory(rootfs: Path) -> None:
    etc = rootfs / "etc" / "dcgm-exporter"
    assert etc.is_dir()
    assert not etc.is_symlink()
    shipped = ROOT / "exporter" / "fields" / "dcgm-exporter"
    assert sorted(p.name for p in etc.iterdir()) == sorted(p.name for p in shipped.iterdir())
    for path in etc.iterdir():
        assert path.read_bytes() == (shipped / path.name).read_bytes()


def test_python_and_the_application_and_nothing_to_install_with(rootfs: Path) -> None:
    script = rootfs / "usr" / "local" / "bin" / "gpu-exporter"
    assert script.read_text().splitlines()[0] == "#!/usr/bin/python3.11"
    assert (rootfs / "usr" / "bin" / "python3.11").is_file()
    assert (rootfs / SITE / "exporter" / "cli.py").is_file()
    # Bytecode compiled at build time: the read-only root cannot take it at run time.
    assert list((rootfs / SITE / "exporter" / "__pycache__").glob("cli.cpython-311.pyc"))
    for absent in ("bin/sh", "bin/bash", "bin/dash", "bin/busybox", "busybox",
                   "usr/bin/pip", "usr/bin/pip3", "usr/local/bin/pip", "usr/bin/dpkg",
                   "usr/bin/apt", "usr/bin/apt-get", "usr/bin/perl"):
        assert not (rootfs / absent).exists(), absent
    assert not list((rootfs / SITE).glob("pip")), "pip is not installed in the image"


# ----------------------------------------------------------------------------- the SBOM


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def installed_distributions(rootfs: Path) -> set[tuple[str, str]]:
    """(name, version) of every Python distribution anywhere in the image."""
    found = set()
    for metadata in [*rootfs.glob("usr/**/*.dist-info/METADATA"),
                     *rootfs.glob("usr/**/*.egg-info/PKG-INFO")]:
        headers = email.parser.Parser().parsestr(metadata.read_text(errors="replace"),
                                                 headersonly=True)
        found.add((_normal(headers["Name"]), headers["Version"]))
    return found


def installed_debs(rootfs: Path) -> set[tuple[str, str, str]]:
    """(package, version, architecture) of each record under /var/lib/dpkg/status.d."""
    found = set()
    for record in (rootfs / "var" / "lib" / "dpkg" / "status.d").iterdir():
        fields = email.parser.Parser().parsestr(record.read_text(), headersonly=True)
        found.add((fields["Package"], fields["Version"], fields["Architecture"]))
    return found


def sbom_components(rootfs: Path) -> list[dict[str, Any]]:
    sbom = json.loads((rootfs / SBOM_PATH.lstrip("/")).read_text())
    assert sbom["bomFormat"] == "CycloneDX"
    assert [t["name"] for t in sbom["metadata"]["tools"]["components"]] == ["syft"]
    assert sbom["metadata"]["component"]["name"] == "gpu-exporter"
    components: list[dict[str, Any]] = sbom["components"]
    return components


def test_the_sbom_lists_every_python_distribution(rootfs: Path) -> None:
    listed = {(_normal(c["name"]), c["version"]) for c in sbom_components(rootfs)
              if c.get("purl", "").startswith("pkg:pypi/")}
    installed = installed_distributions(rootfs)
    assert ("gpu-exporter", version()) in installed
    assert {"aiohttp", "grpcio", "nvidia-ml-py"} <= {name for name, _ in installed}
    assert listed == installed


def test_the_sbom_lists_every_debian_package(rootfs: Path) -> None:
    listed = set()
    for component in sbom_components(rootfs):
        purl = component.get("purl", "")
        if purl.startswith("pkg:deb/"):
            arch = re.search(r"[?&]arch=([^&]+)", purl)
            listed.add((component["name"], component["version"], arch.group(1) if arch else ""))
    installed = installed_debs(rootfs)
    assert {"libc6", "libpython3.11-stdlib", "python3.11-minimal", "ca-certificates"} <= \
        {name for name, _, _ in installed}
    assert listed == installed


def test_the_sbom_lists_nothing_else(rootfs: Path) -> None:
    kinds = {c.get("purl", "").split("/")[0] for c in sbom_components(rootfs)}
    # pkg:generic: the python3.11 binary, identified by its build-in version string.
    assert kinds <= {"pkg:pypi", "pkg:deb", "pkg:generic", ""}

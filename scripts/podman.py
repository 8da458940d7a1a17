"""Podman as the image scripts and tests call it: the flags this project's machines need.

Rootful podman on a host with hybrid cgroups and a hard `nofile` limit of 20000 (Debian 12
here and in CI): crun refuses hybrid cgroups, so runc with the cgroupfs manager; podman's
default ulimits exceed the hard limit, so both are lowered for `build` and `run`. The flags
do no harm on an ordinary host with runc installed.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

GLOBAL_FLAGS = ("--runtime", "runc", "--cgroup-manager", "cgroupfs")
ULIMIT_FLAGS = ("--ulimit", "nofile=20000:20000", "--ulimit", "nproc=32768:32768")
"""For `podman build` and `podman run`."""


class PodmanError(RuntimeError):
    """A podman command failed; the message holds the command and its output."""


def podman_argv(*args: str) -> list[str]:
    executable = shutil.which("podman")
    if executable is None:
        raise PodmanError("podman is not installed (Debian: apt-get install podman runc)")
    return [executable, *GLOBAL_FLAGS, *args]


def podman(*args: str, timeout: float = 600, check: bool = True,
           input_text: str | None = None) -> subprocess.CompletedProcess[str]:
    """Run `podman ARGS`; on failure (check) raise PodmanError with its output."""
    argv = podman_argv(*args)
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout,
                          input=input_text, check=False)
    if check and proc.returncode != 0:
        raise PodmanError(f"$ {' '.join(argv)}\nexit {proc.returncode}\n"
                          f"{proc.stdout[-4000:]}{proc.stderr[-4000:]}")
    return proc


def image_exists(ref: str) -> bool:
    return podman("image", "exists", ref, check=False).returncode == 0


def inspect_format(ref: str, template: str) -> str:
    return podman("image", "inspect", "--format", template, ref).stdout.strip()


def run_flags(extra: Sequence[str] = ()) -> list[str]:
    """Return `podman run` flags every container here gets (ulimits), then `extra`."""
    return [*ULIMIT_FLAGS, *extra]


@contextmanager
def mounted_image(ref: str) -> Iterator[Path]:
    """Return the image's file system, mounted read-only on the host (rootful podman)."""
    path = Path(podman("image", "mount", ref).stdout.strip())
    try:
        yield path
    finally:
        podman("image", "unmount", ref, check=False)

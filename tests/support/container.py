"""A container started from an image with podman, as a test (or a chart's test) describes it.

`ContainerSpec` holds what a pod spec says about one container (image, entrypoint override,
args, env, mounts, user, read-only root, capabilities); `start` runs it detached on its own
network namespace with its port published on a free loopback port, and returns a
`RunningContainer`: its URL, logs, exit code, signals, and what the host sees of its main
process (PID, memory, environment, mounts, credentials, files through its root). `run_once`
runs a container to its end (a command such as `doctor`) and returns its exit code and
output. tests/support/pod_container.py turns a Kubernetes pod spec into a `ContainerSpec`.

A container's own network is podman's bridge, from which the host's loopback cannot be
reached. One that must reach a server of the test (the fake API server listens on loopback
only) gets slirp4netns's user-mode network instead, where the host's loopback answers at
HOST_LOOPBACK, as a cluster's Service address would.
"""

from __future__ import annotations

import itertools
import os
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from scripts.podman import ULIMIT_FLAGS, PodmanError, podman
from tests.support.exporter_process import free_port
from tests.support.requirements import require_tool
from tests.support.wait import first_200, wait_until

_names = itertools.count()

HOST_LOOPBACK = "10.0.2.2"
"""The host's 127.0.0.1 as a container with `reaches_host_loopback` sees it (slirp4netns's
gateway with allow_host_loopback)."""
LOOPBACK_NETWORK = "slirp4netns:allow_host_loopback=true"


@dataclass(frozen=True)
class Bind:
    """A host file or directory bind-mounted into the container."""

    source: Path
    target: str
    read_only: bool = True


@dataclass(frozen=True)
class ContainerSpec:
    image: str
    args: tuple[str, ...] = ()
    entrypoint: tuple[str, ...] | None = None
    """Replaces the image's ENTRYPOINT (a pod's `command`); None keeps it."""
    env: Mapping[str, str] = field(default_factory=dict)
    binds: tuple[Bind, ...] = ()
    tmpfs: Mapping[str, str] = field(default_factory=dict)
    """Container path -> tmpfs options (`size=16m`): an emptyDir of medium Memory."""
    user: str | None = None
    """`uid[:gid]`; None: the image's USER."""
    read_only: bool = False
    cap_drop_all: bool = False
    cap_add: tuple[str, ...] = ()
    no_new_privileges: bool = False
    privileged: bool = False
    port: int | None = 9400
    """Container port published on a free 127.0.0.1 port; None: no network at all."""
    reaches_host_loopback: bool = False
    """The container's network reaches the host's loopback at HOST_LOOPBACK."""
    hostname: str | None = None
    """None: podman's (the container's ID)."""
    arch: str | None = None
    """Run an image of another architecture (under qemu-user emulation)."""

    def run_argv(self, name: str, host_port: int | None) -> list[str]:
        """`podman run` flags, before the image and its arguments."""
        argv = [*ULIMIT_FLAGS, "--name", name]
        if self.reaches_host_loopback:
            argv += ["--network", LOOPBACK_NETWORK]
        elif self.port is None:
            argv += ["--network", "none"]
        if self.port is not None and host_port is not None:
            argv += ["--publish", f"127.0.0.1:{host_port}:{self.port}"]
        if self.hostname is not None:
            argv += ["--hostname", self.hostname]
        if self.entrypoint is not None:
            argv += ["--entrypoint", self.entrypoint[0]]
        for key, value in self.env.items():
            argv += ["--env", f"{key}={value}"]
        for bind in self.binds:
            options = "ro" if bind.read_only else "rw"
            argv += ["--volume", f"{bind.source}:{bind.target}:{options}"]
        for target, options in self.tmpfs.items():
            argv += ["--tmpfs", f"{target}:{options}" if options else target]
        if self.user is not None:
            argv += ["--user", self.user]
        if self.read_only:
            argv += ["--read-only"]
        if self.cap_drop_all:
            argv += ["--cap-drop", "ALL"]
        for cap in self.cap_add:
            argv += ["--cap-add", cap]
        if self.no_new_privileges:
            argv += ["--security-opt", "no-new-privileges"]
        if self.privileged:
            argv += ["--privileged"]
        if self.arch is not None:
            argv += ["--arch", self.arch]
        return argv

    def command_tail(self) -> list[str]:
        """The image, then what follows it on the command line."""
        rest = list(self.entrypoint[1:]) if self.entrypoint is not None else []
        return [self.image, *rest, *self.args]


@dataclass
class RunningContainer:
    spec: ContainerSpec
    name: str
    host_port: int | None
    started: float
    """time.monotonic() just before `podman run`."""

    @property
    def url(self) -> str:
        if self.host_port is None:
            raise AssertionError("this container publishes no port")
        return f"http://127.0.0.1:{self.host_port}"

    def get(self, path: str, timeout: float = 5.0) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(self.url + path, timeout=timeout) as response:
                return response.status, response.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode()

    def logs(self) -> str:
        proc = podman("logs", self.name, check=False)
        return proc.stdout + proc.stderr

    def state(self) -> tuple[str, int]:
        """(podman's status, exit code) — `running`/`exited`, the code once exited."""
        out = podman("inspect", "--format", "{{.State.Status}} {{.State.ExitCode}}",
                     self.name).stdout.split()
        return out[0], int(out[1])

    def exit_code(self) -> int | None:
        status, code = self.state()
        return None if status in ("running", "created", "configured") else code

    def wait_exit(self, timeout: float) -> int:
        """The exit code once the container stopped; fails after `timeout` seconds."""
        def exited() -> list[int]:
            code = self.exit_code()
            return [] if code is None else [code]

        return wait_until(exited, timeout=timeout, interval=0.1,
                          what=f"container {self.name} exiting")[0]

    def host_pid(self) -> int:
        return int(podman("inspect", "--format", "{{.State.Pid}}", self.name).stdout)

    def rss_kib(self) -> int:
        """Resident memory of the container's main process, read on the host."""
        return int(self.status()["VmRSS"].split()[0])

    def status(self) -> dict[str, str]:
        """/proc/PID/status of the container's main process: `Uid`, `CapEff`, `NoNewPrivs`,
        `Seccomp`, ... as the kernel holds them."""
        lines = Path(f"/proc/{self.host_pid()}/status").read_text().splitlines()
        return {key: value.strip() for key, _, value in (line.partition(":") for line in lines)}

    def environ(self) -> dict[str, str]:
        """The environment the container's main process was started with."""
        raw = Path(f"/proc/{self.host_pid()}/environ").read_bytes().decode()
        return {name: value for name, eq, value in
                (item.partition("=") for item in raw.split("\0")) if eq}

    def mounts(self) -> dict[str, str]:
        """Mount point -> mount options, as the container's main process sees them."""
        found = {}
        for line in Path(f"/proc/{self.host_pid()}/mountinfo").read_text().splitlines():
            fields = line.split()
            found[fields[4].replace("\\040", " ")] = fields[5]
        return found

    def path(self, container_path: str) -> Path:
        """A path inside the container, seen through its main process's root: its image,
        mounts included (the host reads it as root)."""
        return Path(f"/proc/{self.host_pid()}/root") / container_path.lstrip("/")

    def signal(self, name: str = "TERM") -> None:
        podman("kill", "--signal", name, self.name)

    def answered(self, path: str, budget_s: float, timeout_s: float = 1.0) -> float:
        """Seconds from `podman run` until `path` first answered 200 within `timeout_s` (a
        kubelet HTTP probe); fails when the container exits or the budget is spent."""
        def exited() -> str | None:
            code = self.exit_code()
            return None if code is None else f"{self.name} exited with {code}:\n{self.logs()}"

        return first_200(self.get, exited, self.started, path, budget_s, timeout_s)

    def remove(self) -> None:
        podman("rm", "--force", "--time", "0", self.name, check=False)


def _name() -> str:
    return f"gpu-exporter-test-{os.getpid()}-{next(_names)}"


def start(spec: ContainerSpec) -> RunningContainer:
    """The container, started detached (`podman run -d`)."""
    if spec.reaches_host_loopback:
        require_tool("slirp4netns", "slirp4netns")
    name = _name()
    host_port = free_port() if spec.port is not None else None
    started = time.monotonic()
    try:
        podman("run", "--detach", *spec.run_argv(name, host_port), *spec.command_tail(),
               timeout=300)
    except (PodmanError, subprocess.TimeoutExpired):
        podman("rm", "--force", "--time", "0", name, check=False)  # created, not started
        raise
    return RunningContainer(spec, name, host_port, started)


@contextmanager
def running(spec: ContainerSpec) -> Iterator[RunningContainer]:
    """`start`, and the container removed afterwards whatever happened."""
    container = start(spec)
    try:
        yield container
    finally:
        container.remove()


def run_once(spec: ContainerSpec, timeout: float = 300) -> tuple[int, str]:
    """Runs the container to its end: (exit code, stdout then stderr)."""
    name = _name()
    try:
        proc = podman("run", "--rm", *spec.run_argv(name, None), *spec.command_tail(),
                      timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        podman("rm", "--force", "--time", "0", name, check=False)
        raise
    return proc.returncode, proc.stdout + proc.stderr

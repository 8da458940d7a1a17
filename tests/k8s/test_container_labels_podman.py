"""`--container-labels` against a real runtime: `podman system service` on a Unix socket,
containers started by the test with `NVIDIA_VISIBLE_DEVICES`, and the exporter on the
simulated node reading them. Each GPU a container holds gets a copy of each of its series
with `container`, the original kept; a container that stops takes its copies with it; a
runtime that goes away leaves the last labels. (Run under `flock /tmp/podman.lock`.)

The containers run a static binary that only sleeps, in an image of that one file
(`podman import`): nothing is pulled."""

from __future__ import annotations

import os
import re
import subprocess
import tarfile
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from scripts.podman import ULIMIT_FLAGS, image_exists, podman, podman_argv
from tests.support.exporter_process import ExporterProcess
from tests.support.promtool import promtool_problems
from tests.support.requirements import require_tool
from tests.support.wait import wait_until

IMAGE = "localhost/gpu-exporter-test-sleeper:1"
SLEEPER_C = "#include <unistd.h>\nint main(void) { for (;;) pause(); }\n"
FAMILY = "DCGM_FI_DEV_GPU_TEMP"


def _sleeper_image(work: Path) -> str:
    if image_exists(IMAGE):
        return IMAGE
    gcc = require_tool("gcc", "gcc")
    source, binary = work / "sleeper.c", work / "sleeper"
    source.write_text(SLEEPER_C)
    subprocess.run([gcc, "-static", "-Os", "-o", str(binary), str(source)], check=True,
                   capture_output=True, timeout=120)
    archive = work / "sleeper.tar"
    with tarfile.open(archive, "w") as tar:
        tar.add(binary, arcname="sleeper")
    podman("import", "--change", 'CMD ["/sleeper"]', str(archive), IMAGE)
    return IMAGE


@pytest.fixture
def runtime_socket(tmp_path: Path) -> Iterator[tuple[Path, subprocess.Popen[bytes]]]:
    """`podman system service` on a fresh socket; the service process, to stop it."""
    require_tool("podman", "podman")
    _sleeper_image(tmp_path)
    socket_path = Path(tempfile.mkdtemp(prefix="pdm-", dir="/tmp")) / "podman.sock"
    service = subprocess.Popen(podman_argv("system", "service", "--time=0",
                                           f"unix://{socket_path}"),
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_until(socket_path.exists, 30.0, what="the podman service's socket")
        yield socket_path, service
    finally:
        service.terminate()
        service.wait(30)


class _Containers:
    def __init__(self) -> None:
        self.names: list[str] = []

    def start(self, role: str, visible: str) -> str:
        name = f"gx{os.getpid()}-{role}"
        podman("run", "-d", *ULIMIT_FLAGS, "--network", "none", "--name", name,
               "--env", f"NVIDIA_VISIBLE_DEVICES={visible}", IMAGE)
        self.names.append(name)
        return name

    def remove(self, name: str) -> None:
        podman("rm", "-f", "-t", "0", name, check=False)


@pytest.fixture
def containers() -> Iterator[_Containers]:
    started = _Containers()
    yield started
    for name in started.names:
        started.remove(name)


def _series(text: str) -> list[tuple[dict[str, str], float]]:
    for family in text_string_to_metric_families(text):
        if family.name == FAMILY:
            return [(dict(s.labels), float(s.value)) for s in family.samples]
    raise AssertionError(f"no {FAMILY} in the exposition")


def _last_poll(text: str) -> float:
    """When the last poll that read the devices finished (Unix time), as /metrics says."""
    found = re.search(r"^gpu_exporter_last_poll_success_timestamp_seconds (\S+)$", text,
                      re.MULTILINE)
    assert found is not None, "no gpu_exporter_last_poll_success_timestamp_seconds"
    return float(found.group(1))


def _holders(text: str) -> dict[str, set[str]]:
    """gpu -> the containers its copies name."""
    found: dict[str, set[str]] = {}
    for labels, _ in _series(text):
        if "container" in labels:
            found.setdefault(labels["gpu"], set()).add(labels["container"])
    return found


@pytest.mark.timeout(600)
def test_copies_per_container_from_a_real_podman(
        runtime_socket: tuple[Path, subprocess.Popen[bytes]], containers: _Containers,
        exporter: type[ExporterProcess]) -> None:
    socket_path, service = runtime_socket
    proc = exporter(["--backend", "sim", "--sim.profile", "a100-timesliced", "-c", "300ms",
                     "--container-labels", "--container-runtime-socket", str(socket_path)])
    proc.wait_ready()
    uuids = {labels["gpu"]: labels["UUID"] for labels, _ in _series(proc.metrics())}
    assert sorted(uuids) == ["0", "1", "2", "3"]

    trainer = containers.start("trainer", "0")
    pinned = containers.start("pinned", f"nvidia1,{uuids['2']}")
    everything = containers.start("everything", "all")
    nothing = containers.start("nothing", "none")

    def labelled() -> str | None:
        text = proc.metrics()
        held = _holders(text)
        return text if trainer in held.get("0", set()) and pinned in held.get("2", set()) \
            and everything in held.get("3", set()) else None

    text = wait_until(labelled, 30.0, what="the containers' copies")
    held = _holders(text)
    ours = {gpu: {c for c in names if c.startswith(f"gx{os.getpid()}-")}
            for gpu, names in held.items()}
    assert ours == {"0": {trainer, everything}, "1": {pinned, everything},
                    "2": {pinned, everything}, "3": {everything}}
    assert all(nothing not in names for names in held.values())
    series = _series(text)
    originals = {labels["gpu"]: (labels, value) for labels, value in series
                 if "container" not in labels}
    assert sorted(originals) == ["0", "1", "2", "3"]  # every original kept
    for labels, value in series:
        if "container" in labels:
            copy = {k: v for k, v in labels.items() if k != "container"}
            assert (copy, value) == originals[labels["gpu"]]
    # `container` comes after the series' other labels (dcgm-exporter appends it).
    line = next(x for x in text.splitlines() if x.startswith(FAMILY + "{")
                and f'container="{trainer}"' in x)
    assert re.search(rf',container="{trainer}"\}} ', line), line
    assert promtool_problems(text) == []

    # A container that stops takes its copies with it, at the next refresh.
    containers.remove(trainer)
    wait_until(lambda: trainer not in _holders(proc.metrics()).get("0", set()), 30.0,
               what="the stopped container's copies gone")

    # The runtime goes away: the last answer stays.
    service.terminate()
    service.wait(30)
    wait_until(lambda: "container runtime API" in proc.output(), 30.0,
               what="the exporter's warning that the runtime went away")
    # A poll that finished after the warning: the labels it serves were made without it.
    warned = _last_poll(proc.metrics())

    def polled_since() -> str | None:
        text = proc.metrics()
        return text if _last_poll(text) > warned else None
    after = _holders(wait_until(polled_since, 30.0, what="a poll after the runtime went away"))
    assert everything in after.get("3", set())
    assert "container runtime API" in proc.output()

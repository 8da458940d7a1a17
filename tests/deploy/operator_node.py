"""One simulated GPU node running the exporter container the GPU Operator rendered.

`start_container` starts the exporter the way the container runtime would: the image's
ENTRYPOINT (resolved to this checkout's console script) with the container's args, the image
ENV overlaid by the container's env, the working directory of the image, and the image's
files and the pod's volumes laid out under a temporary directory standing in for the
container's root. What stands in for the node:

- GPUs: the simulated `libnvidia-ml.so.1` (tests/nvmlsim), found through LD_LIBRARY_PATH as
  the NVIDIA runtime would inject it, with the node's GPUs in NVMLSIM_SCENARIO;
- the kubelet: a real pod-resources gRPC server on the socket in the pod's hostPath mount;
- the API server (only when the pod gets a service-account token): the fake one of
  tests/support/apiserver.py, reached through KUBECONFIG instead of the token file and
  KUBERNETES_SERVICE_* variables;
- the installed package: this checkout on PYTHONPATH, for the image's `COPY --from=build`.

The liberties the harness takes with the rendered spec, and only these: every absolute
container path in an env value or an argument (`/etc/...`, `--flag=/...`) is re-rooted
under the temporary root, and the kubelet socket's default path is passed the same way
(DCGM_POD_RESOURCES_KUBELET_SOCKET, rooted) when the spec leaves it to the default; the
container port 9400 is published on a free host port, as `docker run -p` would, by
rewriting the port of the listen address (DCGM_EXPORTER_LISTEN or -a/--address). PATH and
LANG come from this machine rather than the base image: the interpreter is named by path.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from exporter.k8s.proto import PodResources, pb
from exporter.simulated.kubelet import SimKubeletHandle, pod_resources, serve_pod_resources
from tests.support.apiserver import FakeApiServer, pod, resource_slice
from tests.support.exporter_process import free_port
from tests.support.pod_container import container_env
from tests.support.wait import first_200

from .operator_render import (
    REPO_ROOT,
    ImageSpec,
    Obj,
    RenderError,
    container_argv,
    lay_out_image,
    under,
)

NODE_NAME = "gpu-node-1"
POD_NAME = "nvidia-dcgm-exporter-x7k2p"
POD_NAMESPACE = "gpu-operator"
KUBELET_SOCKET = "/var/lib/kubelet/pod-resources/kubelet.sock"
"""dcgm-exporter's default for --pod-resources-kubelet-socket, inside the container."""
LISTEN_FLAGS = ("-a", "--address", "--web.listen-address")

GPU_UUIDS = tuple(f"GPU-5e1a0000-0000-4000-8000-00000000000{i}" for i in range(3))
SCENARIO = {"devices": [{"uuid": uuid} for uuid in GPU_UUIDS]}
"""Three H200s (the simulator's default part): GPU 0 held by one pod through the device
plugin, GPU 1 time-sliced between two pods, GPU 2 claimed through DRA."""

EXCLUSIVE_POD = ("inference", "llm-0", "server")
SHARED_PODS = (("research", "notebook-a", "notebook"), ("research", "notebook-b", "notebook"))
DRA_POD = ("training", "trainer-0", "trainer")
DRA_CLAIM = "trainer-0-gpu"
DRA_DEVICE = "gpu-2"

POD_METADATA: dict[tuple[str, str], dict[str, str]] = {
    ("inference", "llm-0"): {"app": "llm", "llm-d.ai/role": "prefill",
                             "pod-template-hash": "7d9c5b8f4"},
    ("research", "notebook-a"): {"app": "notebook", "team": "research"},
    ("research", "notebook-b"): {"app": "notebook"},
    ("training", "trainer-0"): {"app": "trainer", "llm-d.ai/role": "train"},
}
"""Pod labels on the API server, by (namespace, pod)."""


def pod_uid(namespace: str, name: str) -> str:
    return f"uid-{namespace}-{name}"


def kubelet_allocations() -> list[PodResources]:
    namespace, name, container = EXCLUSIVE_POD
    pods = [pod_resources(namespace, name, {container: [("nvidia.com/gpu", [GPU_UUIDS[0]])]})]
    for replica, (namespace, name, container) in enumerate(SHARED_PODS):
        pods.append(pod_resources(
            namespace, name, {container: [("nvidia.com/gpu", [f"{GPU_UUIDS[1]}::{replica}"])]}))
    namespace, name, container = DRA_POD
    pods.append(pb.PodResources(name=name, namespace=namespace, containers=[
        pb.ContainerResources(name=container, dynamic_resources=[pb.DynamicResource(
            claim_name=DRA_CLAIM, claim_namespace=namespace,
            claim_resources=[pb.ClaimResource(
                driver_name=DRA_DRIVER, pool_name=NODE_NAME, device_name=DRA_DEVICE,
                cdi_devices=[pb.CDIDevice(name=f"k8s.{DRA_DRIVER}/device={DRA_DEVICE}")])],
        )])]))
    return pods


DRA_DRIVER = "gpu.nvidia.com"


def pod_object(namespace: str, name: str, uid: str, labels: dict[str, str], node: str,
               container: str) -> dict[str, Any]:
    """A running pod as the API server lists it."""
    obj = pod(namespace, name, uid, labels, node=node)
    obj["spec"]["containers"] = [{"name": container, "image": "app:1"}]
    obj["status"] = {"phase": "Running"}
    return obj


def gpu_resource_slice(node: str, devices: dict[str, str]) -> dict[str, Any]:
    """The NVIDIA DRA driver's slice for a node's whole GPUs: device name -> GPU UUID."""
    return resource_slice(f"{node}-{DRA_DRIVER}-gpus", node, [
        {"name": name, "attributes": {"type": {"string": "gpu"}, "uuid": {"string": uuid}}}
        for name, uuid in devices.items()], driver=DRA_DRIVER)


def start_cluster(*, tls: tuple[Path, Path] | None = None, token: str | None = None
                  ) -> FakeApiServer:
    """The fake API server with the pods and the DRA slice above (`tls` and `token` as
    FakeApiServer takes them)."""
    cluster = FakeApiServer(tls=tls, token=token).start()
    containers = {(ns, name): c for ns, name, c in (EXCLUSIVE_POD, *SHARED_PODS, DRA_POD)}
    cluster.state.pods = [
        pod_object(ns, name, pod_uid(ns, name), labels, NODE_NAME, containers[ns, name])
        for (ns, name), labels in POD_METADATA.items()]
    cluster.state.slices = [gpu_resource_slice(NODE_NAME, {DRA_DEVICE: GPU_UUIDS[2]})]
    return cluster


# ----------------------------------------------------------------------------- the container


def reroot(value: str, root: Path) -> str:
    if value.startswith("/"):
        return f"{root}{value}"
    flag, eq, rest = value.partition("=")
    if eq and flag.startswith("-") and rest.startswith("/"):
        return f"{flag}={root}{rest}"
    return value


def _publish_port(address: str, container_port: int, host_port: int) -> str:
    host, _, port = address.rpartition(":")
    return f"{host}:{host_port}" if port == str(container_port) else address


def _env_of(container: Obj) -> dict[str, str]:
    return container_env(container, {"spec.nodeName": NODE_NAME, "metadata.name": POD_NAME,
                                     "metadata.namespace": POD_NAMESPACE})


def _volume_files(source: Obj, data: Mapping[str, str]) -> dict[str, str]:
    """File name -> text of a ConfigMap volume (its `items`, else every key)."""
    paths = {i["key"]: i["path"] for i in source.get("items") or []}
    return {paths.get(k, k): v for k, v in data.items() if not paths or k in paths}


def mount_volumes(pod: Obj, container: Obj, root: Path,
                  configmaps: Mapping[str, Mapping[str, str]]) -> None:
    volumes = {v["name"]: v for v in pod.get("volumes") or []}
    for mount in container.get("volumeMounts") or []:
        volume = volumes[mount["name"]]
        target = under(root, mount["mountPath"])
        if "hostPath" in volume:
            host_dir = under(root, volume["hostPath"]["path"])
            host_dir.mkdir(parents=True, exist_ok=True)
            if host_dir != target:
                target.parent.mkdir(parents=True, exist_ok=True)
                target.symlink_to(host_dir)
            continue
        if "emptyDir" in volume:
            target.mkdir(parents=True, exist_ok=True)
            continue
        if "configMap" not in volume:
            raise RenderError(f"volume {mount['name']}: only hostPath, emptyDir and configMap "
                              "here")
        source = volume["configMap"]
        data = configmaps.get(source["name"])
        if data is None:
            raise RenderError(f"ConfigMap {source['name']} does not exist")
        files = _volume_files(source, data)
        if "subPath" in mount:
            # A file mounted into a directory of the image: the directory must be there
            # as a real one (not a link into a read-only package tree).
            if not target.parent.is_dir() or target.parent.is_symlink():
                raise RenderError(f"the image has no directory {target.parent.name} to "
                                  f"subPath-mount {mount['mountPath']} into")
            target.write_text(files[mount["subPath"]])
            target.chmod(0o444)
        else:
            target.mkdir(parents=True, exist_ok=True)
            for file_name, text in files.items():
                (target / file_name).write_text(text)


@dataclass
class ContainerProcess:
    args: list[str]
    """The arguments the exporter got (re-rooted, port published)."""
    env: dict[str, str]
    root: Path
    port: int
    proc: subprocess.Popen[str]
    started: float
    log: IO[str]
    probe_paths: list[str] = field(default_factory=list)

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def get(self, path: str, timeout: float = 5.0) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(self.base + path, timeout=timeout) as response:
                return response.status, response.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode()

    def output(self) -> str:
        self.log.seek(0)
        return self.log.read()

    def first_probe_success(self, path: str, budget_s: float, timeout_s: float) -> float:
        """Seconds from process start until `path` answered 200 within `timeout_s`, as the
        kubelet's HTTP probe counts it; fails once the budget is spent or the process exits."""
        def exited() -> str | None:
            code = self.proc.poll()
            return None if code is None else f"the exporter exited with {code}:\n{self.output()}"

        return first_200(self.get, exited, self.started, path, budget_s, timeout_s)

    def terminate(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


def start_container(daemonset: Obj, image: ImageSpec, root: Path, *, lib_dir: Path,
                    scenario: Path, cluster: FakeApiServer | None,
                    configmaps: Mapping[str, Mapping[str, str]]) -> ContainerProcess:
    """The image laid out under `root`, the pod's volumes mounted, and container 0 started."""
    pod = daemonset["spec"]["template"]["spec"]
    container = pod["containers"][0]
    lay_out_image(image, REPO_ROOT, root)
    mount_volumes(pod, container, root, configmaps)
    host_port = free_port()
    container_port = int(container["ports"][0]["containerPort"])

    program, argv = container_argv(image, container)
    args = [reroot(a, root) for a in argv]
    for i, arg in enumerate(args):
        flag, eq, value = arg.partition("=")
        if eq and flag in LISTEN_FLAGS:
            args[i] = f"{flag}={_publish_port(value, container_port, host_port)}"
        elif i > 0 and args[i - 1] in LISTEN_FLAGS:
            args[i] = _publish_port(arg, container_port, host_port)
    env = {"LANG": "C.UTF-8", **image.env, **_env_of(container)}
    env = {name: reroot(value, root) for name, value in env.items()}
    env.setdefault("PATH", os.environ.get("PATH", "/usr/bin:/bin"))
    env["DCGM_EXPORTER_LISTEN"] = _publish_port(env.get("DCGM_EXPORTER_LISTEN", ":9400"),
                                                container_port, host_port)
    env.setdefault("DCGM_POD_RESOURCES_KUBELET_SOCKET", reroot(KUBELET_SOCKET, root))
    env["PYTHONPATH"] = str(REPO_ROOT)
    env["LD_LIBRARY_PATH"] = str(lib_dir)
    env["NVMLSIM_SCENARIO"] = str(scenario)
    if pod.get("automountServiceAccountToken") and cluster is not None:
        env["KUBECONFIG"] = cluster.write_kubeconfig(root / "kubeconfig")

    log = tempfile.TemporaryFile(mode="w+")  # noqa: SIM115 - closed by stop()
    started = time.monotonic()
    proc = subprocess.Popen([*program, *args], env=env, cwd=under(root, image.workdir),
                            stdout=log, stderr=subprocess.STDOUT, text=True)
    probes = [container.get(k, {}).get("httpGet", {}).get("path")
              for k in ("readinessProbe", "livenessProbe", "startupProbe")]
    return ContainerProcess(args, env, root, host_port, proc, started, log,
                            [p for p in probes if p])


@dataclass
class SimNode:
    """A node's kubelet serving the allocations above on the pod's hostPath socket."""

    root: Path
    kubelet: SimKubeletHandle

    @classmethod
    def start(cls, root: Path) -> SimNode:
        socket = under(root, KUBELET_SOCKET)
        socket.parent.mkdir(parents=True, exist_ok=True)
        kubelet = serve_pod_resources(str(socket))
        kubelet.servicer.set_pods(kubelet_allocations())
        return cls(root, kubelet)

    def stop(self) -> None:
        self.kubelet.stop()


def write_scenario(directory: Path) -> Path:
    path = directory / "gpus.json"
    path.write_text(json.dumps(SCENARIO))
    return path

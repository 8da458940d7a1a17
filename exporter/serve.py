"""`gpu-exporter serve`: wire the settings, the device backend, the sampler and the web server
together, and run until SIGTERM."""

from __future__ import annotations

import asyncio
import gc
import logging
import signal
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from exporter.config import ConfigError, ServeConfig, parse_serve_args
from exporter.devices.errors import BackendUnavailable
from exporter.devices.nvml import NvmlBackend
from exporter.devices.nvml_api import NvmlLib, load_pynvml
from exporter.devices.process_reads import ProcessReader, gpu_process_ids
from exporter.exposition.publisher import Publisher
from exporter.exposition.render import Rendered
from exporter.fields.csv import (
    Collectors,
    CollectorsError,
    default_collectors_path,
    load_collectors,
    require_servable,
)
from exporter.k8s.socket_check import unusable_socket
from exporter.k8s.types import AttributionSource
from exporter.logs import setup_logging
from exporter.sampling.fault_tracker import FaultTracker
from exporter.sampling.sampler import Publisher as SamplerPublisher
from exporter.sampling.sampler import Sampler
from exporter.sampling.worker import LOOP_SWITCH_INTERVAL_S, DaemonExecutor
from exporter.web.server import WebServer

if TYPE_CHECKING:
    from exporter.k8s.configmap import ConfigMapCollectors
    from exporter.nodefaults.writer import NodeFaultWriter
    from exporter.simulated.wiring import SimNode
    from exporter.web.reload import LiveWebConfig

log = logging.getLogger("exporter")

RESTORE_BUDGET_S = 3.0
"""Longest the start waits to read held faults back from the node's condition before the
first poll; later, the writer's thread reads them back before it writes anything."""

SHUTDOWN_BUDGET_S = 4.0
"""SIGTERM to exit stays under the 5 s a kubelet grace period commonly allows here."""


def _fail(message: str, code: int = 2) -> int:
    """Print `message` as serve's one line on standard error and return the exit status `code`."""
    print(f"gpu-exporter: {message}", file=sys.stderr)
    return code


def _load_nvml_lib(cfg: ServeConfig) -> NvmlLib:
    """Return pynvml, or the simulated node's library with --backend sim."""
    if cfg.backend == "sim":
        from exporter.simulated.wiring import load_sim_nvml

        return load_sim_nvml(cfg.sim)
    return load_pynvml()


def _follow_configmap(cfg: ServeConfig, fallback: Path) -> ConfigMapCollectors | None:
    """Return the follower of the collectors ConfigMap that `-m <ns>:<name>` names; None
    without `-m`, or where the ConfigMap cannot be followed (`fallback`, the collectors file,
    is then served)."""
    if cfg.kubernetes.configmap is None:
        return None
    from exporter.k8s.configmap import ConfigMapCollectors

    return ConfigMapCollectors.open(cfg.kubernetes.configmap, fallback)


def _node_fault_writer(cfg: ServeConfig) -> NodeFaultWriter | None:
    """Return the writer of the node's condition, Events and taint when any of them is
    enabled, else None."""
    if not cfg.faults.enabled:
        return None
    from exporter.nodefaults.apihttp import ApiHttp, credentials
    from exporter.nodefaults.writer import NodeFaultWriter

    return NodeFaultWriter(cfg.faults, lambda: ApiHttp(credentials()))


async def _restore_faults(writer: NodeFaultWriter) -> None:
    """Read held faults back from the node before the first poll, for a bounded time; when
    the API server does not answer in time the writer's thread does it later."""
    from exporter.nodefaults.apihttp import ApiError

    try:
        await asyncio.wait_for(asyncio.to_thread(writer.restore_now), RESTORE_BUDGET_S)
    except (ApiError, TimeoutError) as exc:
        log.warning("node faults: could not read the node's condition at start (%s); "
                    "held faults are read back once the API server answers", exc or "timeout")
    except Exception as exc:  # credentials missing or unreadable
        log.warning("node faults: no API server client (%s); run in a pod with a "
                    "ServiceAccount token or set KUBECONFIG", exc)


def _attribution(cfg: ServeConfig, lib: NvmlLib, poll_worker: DaemonExecutor,
                 sim: SimNode | None) -> AttributionSource | None:
    """Return what says who holds each GPU: the kubelet's pods (`-k`), a container runtime's
    containers (`--container-labels`), or None when neither is asked for."""
    if cfg.kubernetes.enabled:
        from exporter.k8s.source import build_source

        return build_source(cfg.kubernetes,
                            process_reads=ProcessReader(lib).on_thread(poll_worker),
                            metadata=None if sim is None else sim.metadata,
                            proc_root="/proc" if sim is None else sim.proc_root)
    if cfg.container_labels:
        assert cfg.container_runtime_socket is not None  # the config's checks say so
        from exporter.k8s.container_runtime import ContainerRuntimeSource

        return ContainerRuntimeSource(cfg.container_runtime_socket, cfg.sampler.interval_s)
    return None


def _publisher(cfg: ServeConfig, server: WebServer,
               writer: NodeFaultWriter | None) -> SamplerPublisher[Rendered]:
    """Return what renders each poll for scrapes: the exposition with the web server's
    self-metrics, which also feeds the node fault writer when there is one."""
    publish = server.publishing(Publisher(cfg.backend, cfg.exposition))
    if writer is None:
        return publish
    from exporter.nodefaults.feed import FeedingPublisher

    return FeedingPublisher(publish, writer)


def _fault_tracker(cfg: ServeConfig, lib: NvmlLib) -> FaultTracker:
    """Return the tracker of held faults, stamped with this boot's id (the simulated node's
    with --backend sim)."""
    sim_boot_id = cfg.sim.boot_id if cfg.backend == "sim" else None
    return FaultTracker(process_ids=gpu_process_ids(lib),
                        boot_id=None if sim_boot_id is None else lambda: sim_boot_id)


async def _until_signalled(sampler: Sampler[Rendered]) -> None:
    """Poll until SIGTERM or SIGINT; SIGHUP re-reads the collectors."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    loop.add_signal_handler(signal.SIGINT, stop.set)
    loop.add_signal_handler(signal.SIGHUP, sampler.request_reload)
    await sampler.run(stop)


async def _shut_down(cfg: ServeConfig, server: WebServer, sampler: Sampler[Rendered],
                     writer: NodeFaultWriter | None, sim: SimNode | None) -> None:
    """Stop serving, polling, writing and simulating, within the shutdown budget."""
    log.info("shutting down")
    try:
        # Responses being written get up to the write timeout (which cuts them anyway).
        await asyncio.wait_for(server.stop(),
                               max(SHUTDOWN_BUDGET_S / 2, cfg.web.write_timeout_s + 0.5))
    except TimeoutError:
        log.warning("HTTP shutdown did not finish in time")
    await sampler.close(SHUTDOWN_BUDGET_S / 2)
    if writer is not None:
        writer.close()
    if sim is not None:
        sim.stop()


async def _run(cfg: ServeConfig, lib: NvmlLib, backend: NvmlBackend, collectors: Collectors,
               web_config: LiveWebConfig | None, tmp: Path | None) -> int:
    """Poll once, then serve scrapes until SIGTERM or SIGINT, and shut down; return the exit
    status (1 when the address cannot be listened on). `tmp` holds the simulated kubelet's
    files with --sim.kubelet."""
    sim: SimNode | None = None
    if cfg.sim.kubelet:
        from exporter.simulated.wiring import start_sim_node

        assert tmp is not None
        k8s, sim = start_sim_node(cfg.kubernetes, lib, backend, tmp)
        cfg = replace(cfg, kubernetes=k8s)
    # The one thread that calls NVML while serving: the backend's polls and the per-process
    # reads of process attribution take turns on it.
    poll_worker = DaemonExecutor("poll")
    server = WebServer(cfg.web, web_config)
    writer = _node_fault_writer(cfg)
    sampler = Sampler(backend, collectors, cfg.sampler, _publisher(cfg, server, writer),
                      _attribution(cfg, lib, poll_worker, sim), poll_worker=poll_worker,
                      faults=_fault_tracker(cfg, lib))
    if writer is not None:
        writer.restore_to(sampler.restore_faults)
        await _restore_faults(writer)
        writer.start()
    # One poll before listening, so the first scrape after a restart has data (bounded by
    # the poll deadline; on failure the exporter still serves its self-metrics).
    await sampler.poll_once()
    # What exists now lives as long as the process: keep it out of the collector's
    # generations so scrapes don't pay for re-scanning it.
    gc.freeze()
    # The poll and render threads hand the interpreter lock back to the event loop sooner.
    sys.setswitchinterval(LOOP_SWITCH_INTERVAL_S)
    host, port = cfg.web.listen_host, cfg.web.listen_port
    try:
        await server.start(sampler)
    except OSError as exc:
        return _fail(f"--web.listen-address: cannot listen on {host or ''}:{port}: "
                     f"{exc.strerror}", 1)
    log.info("serving on %s://%s:%d/metrics (backend %s, %d fields, every %.3gs)",
             server.scheme, host or "*", port, cfg.backend, len(collectors.fields),
             cfg.sampler.interval_s)
    try:
        await _until_signalled(sampler)
    finally:
        await _shut_down(cfg, server, sampler, writer, sim)
    return 0


def _load_start_files(cfg: ServeConfig) -> tuple[LiveWebConfig | None,
                                                  ConfigMapCollectors | None, Collectors]:
    """Return the web config, the ConfigMap follower and the collectors, loaded before NVML
    so that a file that cannot be used stops the start with a ConfigError naming the file and
    key."""
    web_config = None
    if cfg.web.config_file is not None:
        # TLS and basic auth code loads only when a web config is given.
        from exporter.web.reload import LiveWebConfig
        from exporter.web.webconfig import WebConfigError

        try:
            web_config = LiveWebConfig.load(cfg.web.config_file)
        except WebConfigError as exc:
            raise ConfigError(f"--web.config.file: {exc}") from None
    collectors_path = cfg.collectors or default_collectors_path()
    configmap = _follow_configmap(cfg, collectors_path)
    try:
        if configmap is not None:
            collectors = configmap.load_initial()
        elif cfg.inline_collectors is not None:  # the config file's metrics.fields
            collectors = cfg.inline_collectors
        else:
            collectors = load_collectors(collectors_path)
        require_servable(collectors)
    except CollectorsError as exc:
        if configmap is not None:
            configmap.close()
        raise ConfigError(str(exc)) from None
    if cfg.config_file is not None and cfg.watch_groups:
        _check_watch_groups(cfg, configmap, collectors)
    return web_config, configmap, collectors


def _check_watch_groups(cfg: ServeConfig, configmap: ConfigMapCollectors | None,
                        collectors: Collectors) -> None:
    """Check the config file's watch groups against the collectors this start serves, once,
    since the file is read only at start-up; ConfigError names the group at fault."""
    from exporter.options.watch_groups import check_watch_groups
    from exporter.yamlfiles import YamlError

    assert cfg.config_file is not None
    try:
        check_watch_groups(cfg.config_file, cfg.watch_groups, collectors)
    except YamlError as exc:
        if configmap is not None:
            configmap.close()
        raise ConfigError(f"--config-file: {exc}") from None


def main(argv: Sequence[str]) -> int:
    """Run `gpu-exporter serve` with `argv` until SIGTERM or SIGINT and return its exit
    status: 0 after a clean shutdown, 2 for a setting or file that cannot be used, 1 when NVML
    cannot start or the address cannot be listened on."""
    try:
        cfg = parse_serve_args(argv)
    except ConfigError as exc:
        return _fail(str(exc))
    setup_logging(cfg.log_format, cfg.log_level)
    for warning in cfg.startup_warnings:
        log.warning("%s", warning)
    if cfg.kubernetes.enabled and not cfg.sim.kubelet:
        problem = unusable_socket(cfg.kubernetes.pod_resources_socket)
        if problem is not None:
            return _fail(problem)
    try:
        web_config, configmap, collectors = _load_start_files(cfg)
    except ConfigError as exc:
        return _fail(str(exc))
    try:
        return _serve(cfg, web_config, configmap, collectors)
    finally:
        if configmap is not None:
            configmap.close()


def _serve(cfg: ServeConfig, web_config: LiveWebConfig | None,
           configmap: ConfigMapCollectors | None, collectors: Collectors) -> int:
    """Start NVML with the loaded collectors and serve until a signal ends it; return the exit
    status (see main)."""
    if configmap is not None:  # the sampler follows the ConfigMap through this path
        cfg = replace(cfg, sampler=replace(cfg.sampler, collectors_path=configmap.path))
    for warning in collectors.warnings:
        log.warning("%s", warning)
    if cfg.sim.kubelet and cfg.backend != "sim":
        return _fail("--sim.kubelet works only with --backend sim")
    try:
        lib = _load_nvml_lib(cfg)
    except ConfigError as exc:
        return _fail(str(exc))
    backend = NvmlBackend(lib, collectors.specs, cfg.devices, fault_reads=True)
    try:
        backend.start()
    except BackendUnavailable as exc:
        return _fail(str(exc), 1)
    try:
        if not cfg.sim.kubelet:
            return asyncio.run(_run(cfg, lib, backend, collectors, web_config, None))
        with tempfile.TemporaryDirectory(prefix="gpu-exporter-") as tmp:
            return asyncio.run(_run(cfg, lib, backend, collectors, web_config, Path(tmp)))
    except KeyboardInterrupt:
        return 130

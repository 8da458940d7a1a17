"""The exporter's own gpu_exporter_* families, and the publisher the sampler calls."""

from __future__ import annotations

import platform

from exporter import __version__
from exporter.exposition.config import DEFAULT_EXPOSITION_SETTINGS, ExpositionSettings
from exporter.exposition.label_limit import LabelLimit
from exporter.exposition.labels import LabelStyle
from exporter.exposition.render import Rendered, device_families, render, visible_entities
from exporter.k8s.hpc_jobs import NO_JOBS, HpcJobMapping
from exporter.sampling.snapshot import Snapshot
from exporter.sampling.stats import PollStats
from exporter.selfmetrics import (
    BUILD_INFO,
    COLLECT_INTERVAL,
    CONFIG_LAST_RELOAD_SUCCESS,
    CONFIG_RELOADS,
    DEVICES,
    GPM_SUPPORTED,
    LABEL_LIMIT_TRIMMED_SERIES,
    LAST_POLL_SUCCESS,
    POLL_DURATION,
    POLL_ERRORS,
    SCRAPES,
    SelfMetric,
)
from exporter.series import Family


def _if_known(metric: SelfMetric, value: float | None) -> list[Family]:
    """Return the family with its one sample, or no family while the value is not known yet."""
    return [] if value is None else [metric.single(value)]


def self_families(stats: PollStats, snapshot: Snapshot | None, backend: str) -> list[Family]:
    """Return the exporter's own metric families for this poll: build information, poll timings and
    errors, and what the snapshot says about the devices."""
    families = [
        BUILD_INFO.single(1.0, version=__version__,
                          python_version=platform.python_version(), backend=backend),
        *_if_known(COLLECT_INTERVAL, stats.collect_interval_s),
        *_if_known(POLL_DURATION, stats.last_duration_s),
        *_if_known(LAST_POLL_SUCCESS, stats.last_success),
        POLL_ERRORS.family(POLL_ERRORS.sample(float(n), reason=r)
                           for r, n in sorted(stats.errors.items())),
        SCRAPES.single(float(stats.scrapes)),
        CONFIG_RELOADS.family(CONFIG_RELOADS.sample(float(n), result=r)
                              for r, n in sorted(stats.reloads.items())),
        *_if_known(CONFIG_LAST_RELOAD_SUCCESS, stats.last_reload_success),
    ]
    if snapshot is not None:
        families.extend(_device_self_families(snapshot))
    return families


def _device_self_families(snapshot: Snapshot) -> list[Family]:
    entities = visible_entities(snapshot)
    gpus = [e for e in entities if not e.is_mig]
    families = [DEVICES.family((
        DEVICES.sample(float(len(gpus)), kind="gpu"),
        DEVICES.sample(float(len(entities) - len(gpus)), kind="mig"),
    ))]
    gpm = snapshot.readings.gpm_support
    gpm_samples = [
        GPM_SUPPORTED.sample(1.0 if gpm[g.gpu] == "supported" else 0.0, gpu=str(g.gpu),
                             UUID=g.uuid, reason="" if gpm[g.gpu] == "supported" else gpm[g.gpu])
        for g in gpus if g.gpu in gpm
    ]
    if gpm_samples:
        families.append(GPM_SUPPORTED.family(gpm_samples))
    return families


class Publisher:
    """Builds the full exposition of a poll: device families, then self-metrics."""

    def __init__(self, backend: str,
                 settings: ExpositionSettings = DEFAULT_EXPOSITION_SETTINGS) -> None:
        """Publish the polls of `backend` (named in `gpu_exporter_build_info`) as `settings`
        say: label names, HPC jobs, label limit and the bodies rendered."""
        self.backend = backend
        self.settings = settings
        self.style = LabelStyle(settings.use_old_namespace,
                                settings.replace_blanks_in_model_name)
        self.hpc_jobs = (HpcJobMapping(settings.hpc_job_mapping_dir)
                         if settings.hpc_job_mapping_dir is not None else None)
        """Read here, once per poll on the render thread, so the event loop never waits on it."""
        self.label_limit = LabelLimit(settings.label_limit)
        """Counts the series it trimmed, from poll to poll."""

    def __call__(self, snapshot: Snapshot | None, stats: PollStats,
                 extra: list[Family]) -> Rendered:
        """Render the snapshot's device families, the exporter's own families and the extra ones
        into the bodies served on `/metrics`."""
        families: list[Family] = []
        if snapshot is not None:
            jobs = self.hpc_jobs.read() if self.hpc_jobs is not None else NO_JOBS
            families = device_families(snapshot, self.style, jobs)
        families += self_families(stats, snapshot, self.backend)
        families += extra
        if self.label_limit.limit > 0:
            families = self.label_limit.apply(families)
            families.append(LABEL_LIMIT_TRIMMED_SERIES.single(
                float(self.label_limit.trimmed_series)))
        return render(families, self.settings.openmetrics, self.settings.appendable)

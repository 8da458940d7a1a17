"""The exporter's own gpu_exporter_* families, and the publisher the sampler calls."""

from __future__ import annotations

import platform
from dataclasses import dataclass

from exporter import __version__
from exporter.exposition.labels import entity_labels
from exporter.exposition.render import Rendered, device_families, render, visible_entities
from exporter.sampling.snapshot import Snapshot
from exporter.sampling.stats import PollStats
from exporter.series import Family, Labels, Sample


def _one(name: str, kind: str, help_text: str, value: float | None,
         labels: Labels = ()) -> list[Family]:
    if value is None:
        return []
    return [Family(name, kind, help_text, (Sample(labels, value),))]


def self_families(stats: PollStats, snapshot: Snapshot | None, backend: str) -> list[Family]:
    families = [
        Family("gpu_exporter_build_info", "gauge", "Build information; always 1.",
               (Sample((("version", __version__),
                        ("python_version", platform.python_version()),
                        ("backend", backend)), 1.0),)),
        *_one("gpu_exporter_collect_interval_seconds", "gauge",
              "Configured time between device polls.", stats.collect_interval_s),
        *_one("gpu_exporter_poll_duration_seconds", "gauge",
              "Duration of the last completed poll (devices, attribution).",
              stats.last_duration_s),
        *_one("gpu_exporter_last_poll_success_timestamp_seconds", "gauge",
              "Unix time of the last poll that read the devices.", stats.last_success),
        Family("gpu_exporter_poll_errors", "counter", "Polls that failed, by reason.",
               tuple(Sample((("reason", r),), float(n)) for r, n in sorted(stats.errors.items()))),
        *_one("gpu_exporter_scrapes", "counter",
              "Scrapes of /metrics served (as of the last poll).", float(stats.scrapes)),
        Family("gpu_exporter_config_reloads", "counter",
               "Collectors reloads (SIGHUP or file change), by result.",
               tuple(Sample((("result", r),), float(n))
                     for r, n in sorted(stats.reloads.items()))),
        *_one("gpu_exporter_config_last_reload_success_timestamp_seconds", "gauge",
              "Unix time of the last successful collectors reload.", stats.last_reload_success),
    ]
    if snapshot is not None:
        families.extend(_device_self_families(snapshot))
    return families


def _device_self_families(snapshot: Snapshot) -> list[Family]:
    entities = visible_entities(snapshot)
    gpus = [e for e in entities if not e.is_mig]
    counts = (
        Sample((("kind", "gpu"),), float(len(gpus))),
        Sample((("kind", "mig"),), float(len(entities) - len(gpus))),
    )
    families = [Family("gpu_exporter_devices", "gauge",
                       "Devices currently visible: GPUs and MIG GPU instances.", counts)]
    gpm = snapshot.readings.gpm_supported
    gpm_samples = tuple(
        Sample(entity_labels(g, snapshot.host)[:2], 1.0 if gpm[g.gpu] else 0.0)
        for g in gpus if g.gpu in gpm
    )
    if gpm_samples:
        families.append(Family(
            "gpu_exporter_gpm_supported", "gauge",
            "1 when the GPU supports NVML GPM, the source of DCGM_FI_PROF_* fields.",
            gpm_samples))
    return families


@dataclass(frozen=True, slots=True)
class Publisher:
    """Builds the full exposition of a poll: device families, then self-metrics."""

    backend: str

    def __call__(self, snapshot: Snapshot | None, stats: PollStats,
                 extra: list[Family]) -> Rendered:
        families = device_families(snapshot) if snapshot is not None else []
        families += self_families(stats, snapshot, self.backend)
        families += extra
        return render(families)

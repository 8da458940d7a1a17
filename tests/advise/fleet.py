"""Holders built by hand for the advisor's tests and benchmark."""

from __future__ import annotations

from exporter.advise.demand import Holder

H100 = "NVIDIA H100 80GB HBM3"


def holder(pod: str, peak_mib: float, compute: float | None, *, model: str = H100,
           now: str = "whole", node: str = "node-a", uuid: str | None = None,
           gpu_instance: str = "", samples: int = 1000, hours: float = 24.0,
           namespace: str = "team") -> Holder:
    return Holder(namespace, pod, node, model, uuid or f"GPU-{pod}", gpu_instance, now,
                  samples, hours, peak_mib, compute, "profiling")

"""gpu-exporter: GPU metrics for Prometheus, compatible with dcgm-exporter."""

__version__ = "0.1.0"

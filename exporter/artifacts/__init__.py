"""The files generated from the field catalog for the monitoring around the exporter: Grafana
dashboards, Prometheus alert and usage recording rules, and KEDA ScaledObjects."""

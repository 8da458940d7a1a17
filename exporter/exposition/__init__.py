"""The exposition layer: it turns a poll's snapshot into the Prometheus and OpenMetrics bodies
served on `/metrics`, with dcgm-exporter's metric names, labels and label order."""

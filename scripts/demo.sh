#!/usr/bin/env bash
# The demo in one command: the exporter on the simulated node (8x H200 with MIG and simulated
# pod allocations) and Debian's Prometheus scraping it every 5 s with the generated alert and
# usage rules. Ctrl-C stops both. Then, in another terminal:
#
#   .venv/bin/gpu-exporter report --prometheus http://127.0.0.1:9090 --last 1h
#
# Ports: DEMO_EXPORTER_PORT (9400), DEMO_PROMETHEUS_PORT (9090); PYTHON: the interpreter with
# the package installed (.venv/bin/python, as scripts/test.sh makes it).
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-.venv/bin/python}"
[ -x "$PY" ] || PY=python3
if ! command -v prometheus >/dev/null 2>&1; then
  echo "demo: needs Prometheus (Debian: apt-get install prometheus; scripts/test.sh installs it)" >&2
  exit 1
fi
EXPORTER_PORT="${DEMO_EXPORTER_PORT:-9400}"
PROMETHEUS_PORT="${DEMO_PROMETHEUS_PORT:-9090}"
DIR="$(mktemp -d)"
cleanup() {
  for pid in $(jobs -p); do kill "$pid" 2>/dev/null || true; done
  wait || true
  rm -rf "$DIR"
}
trap cleanup EXIT
trap 'exit 0' INT TERM
cat > "$DIR/prometheus.yml" <<EOF
global: {scrape_interval: 5s, evaluation_interval: 5s}
rule_files: ["$PWD/alerts/gpu-exporter.rules.yml", "$PWD/alerts/gpu-exporter.usage-rules.yml"]
scrape_configs:
  - job_name: gpu-exporter
    static_configs: [{targets: ["127.0.0.1:$EXPORTER_PORT"]}]
EOF
"$PY" -m exporter serve --backend sim --sim.kubelet --kubernetes.pod-labels inference -c 5s \
  -a "127.0.0.1:$EXPORTER_PORT" &
prometheus --config.file="$DIR/prometheus.yml" --storage.tsdb.path="$DIR/data" \
  --web.listen-address="127.0.0.1:$PROMETHEUS_PORT" --log.level=warn &
echo "demo: exporter on :$EXPORTER_PORT, Prometheus on http://127.0.0.1:$PROMETHEUS_PORT" >&2
wait -n

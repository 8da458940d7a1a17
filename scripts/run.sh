#!/usr/bin/env bash
# Installs gpu-exporter into .venv and serves :9400/metrics: from the GPUs through NVML when
# this machine has an NVIDIA driver, else from the built-in simulated node (an 8x H200 node
# with MIG, with simulated pod allocations so the pod labels show too, and the inference
# preset so the simulated pods' Dynamo, llm-d and KAI labels - role, model, queue - do).
# Arguments are passed on; a later --kubernetes.pod-labels replaces the preset.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -e .
if .venv/bin/python -c 'import ctypes; ctypes.CDLL("libnvidia-ml.so.1")' 2>/dev/null; then
  exec .venv/bin/gpu-exporter serve --backend nvml "$@"
fi
echo "no NVIDIA driver here: serving the simulated h200-mig node" >&2
exec .venv/bin/gpu-exporter serve --backend sim --sim.profile h200-mig --sim.kubelet \
  --kubernetes.pod-labels inference "$@"

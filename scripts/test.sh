#!/usr/bin/env bash
# Installs everything the test suite needs on a fresh Debian machine with Python 3.11, then
# runs lint, type checks and the whole suite. Safe to run again: each step skips what is there.
# `--quick` runs the same lint and type checks and the tests not marked slow (tests/conftest.py
# says which are: image builds, arm64 under qemu, stress runs, the packaged wheel, the
# end-to-end runs against real Prometheus, VictoriaMetrics and Chromium). Other arguments go
# to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
TIER=()
if [ "${1:-}" = "--quick" ]; then
  shift
  TIER=(-m "not slow")
fi

# prometheus/promtool: e2e and rule tests; victoria-metrics (the server, vmalert): the same
# report, dashboards, KEDA queries and rules against VictoriaMetrics; gcc: the simulated NVML
# library; kubectl: the kustomize renderings (tests/deploy); chromium: the HTML report opened
# in a real browser (tests/report); strace: the fault matrix's full-disk case proves from the
# system calls that nothing is written. In CI a missing one fails its tests, never skips them.
if ! command -v promtool >/dev/null 2>&1 || ! command -v prometheus >/dev/null 2>&1 \
    || ! command -v victoria-metrics >/dev/null 2>&1 || ! command -v vmalert >/dev/null 2>&1 \
    || ! command -v gcc >/dev/null 2>&1 || ! command -v kubectl >/dev/null 2>&1 \
    || ! command -v chromium >/dev/null 2>&1 || ! command -v strace >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ]; then SUDO=""; else SUDO="sudo"; fi
  $SUDO apt-get update -qq
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    prometheus victoria-metrics gcc libc6-dev kubectl chromium strace >/dev/null
fi

# podman (with runc), mmdebstrap: tests/image builds the container image from local stand-ins
# of its Debian 12 bases and runs it; qemu-user-static + binfmt-support: the arm64 image runs
# under emulation; slirp4netns: a container of tests/chart reaches the test's API server on
# the host's loopback. The flags podman needs here are in scripts/podman.py.
if ! command -v podman >/dev/null 2>&1 || ! command -v runc >/dev/null 2>&1 \
    || ! command -v mmdebstrap >/dev/null 2>&1 || ! command -v qemu-aarch64-static >/dev/null 2>&1 \
    || ! command -v update-binfmts >/dev/null 2>&1 || ! command -v slirp4netns >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ]; then SUDO=""; else SUDO="sudo"; fi
  $SUDO apt-get update -qq
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    podman runc mmdebstrap qemu-user-static binfmt-support slirp4netns >/dev/null
fi
# The kernel runs aarch64 binaries through qemu once binfmt_misc is mounted and the
# interpreter enabled (a container's own mount namespace then finds it too).
if [ "$(id -u)" = 0 ]; then
  [ -e /proc/sys/fs/binfmt_misc/register ] \
    || mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc || true
  update-binfmts --enable qemu-aarch64 >/dev/null 2>&1 || true
fi

PY="${PYTHON:-python3}"
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
# The test extras include helm-python-sdk: Helm's own engine for tests/chart and
# scripts/chart.py (no helm binary needed).
.venv/bin/python -m pip install -q -e '.[test]'
# nvml.h for the simulated NVML library is fetched here, never committed (NVIDIA's licence).
.venv/bin/python -m pip install -q 'nvidia-nvml-dev>=13.5.37'  # PRM, platform-info structs

.venv/bin/ruff check exporter tests benchmarks scripts tools
.venv/bin/lint-imports
.venv/bin/mypy exporter tests tools
# Three workers, one test file each at a time (module fixtures such as a Prometheus with its
# recorded history are set up once): much of the suite waits on processes it started, so on
# 2 cores a third worker fills the time the other two wait (two workers left a core idle
# about 40% of the run). The files go out in the order tests/conftest.py collects them, the
# longest first (--no-loadscope-reorder keeps it). PYTEST_WORKERS=0 runs everything in this
# process.
.venv/bin/python -m pytest -q -p no:cacheprovider -n "${PYTEST_WORKERS:-3}" --dist loadfile \
  --no-loadscope-reorder \
  ${TIER[@]+"${TIER[@]}"} "$@"
# The Helm chart as an installable archive, dist/gpu-exporter-<version>.tgz (tests/chart
# checks its name, version and contents).
.venv/bin/python scripts/chart.py package dist

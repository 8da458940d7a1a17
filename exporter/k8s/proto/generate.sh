#!/bin/sh
# Regenerates api_pb2.py and api_pb2_grpc.py from api.proto.
#
# Pinned to grpcio-tools 1.66.2: stubs from 1.85.x refuse to import on protobuf older than
# 7.35.1, while 1.66.x stubs import on every protobuf from 5.27 up to the current one.
# Usage: exporter/k8s/proto/generate.sh [PYTHON]   (PYTHON must have grpcio-tools==1.66.2;
# by default a throwaway venv is made under ${TMPDIR:-/tmp}).
set -eu
GRPC_TOOLS_VERSION=1.66.2
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
python=${1:-}
if [ -z "$python" ]; then
    venv="${TMPDIR:-/tmp}/gpu-exporter-protogen-$GRPC_TOOLS_VERSION"
    if [ ! -x "$venv/bin/python" ]; then
        python3 -m venv "$venv"
        "$venv/bin/pip" install --quiet "grpcio-tools==$GRPC_TOOLS_VERSION"
    fi
    python="$venv/bin/python"
fi
have=$("$python" -c 'from importlib.metadata import version; print(version("grpcio-tools"))')
if [ "$have" != "$GRPC_TOOLS_VERSION" ]; then
    echo "generate.sh: $python has grpcio-tools $have, need $GRPC_TOOLS_VERSION" >&2
    exit 1
fi
cd "$root"
"$python" -m grpc_tools.protoc -I. --python_out=. --grpc_python_out=. exporter/k8s/proto/api.proto

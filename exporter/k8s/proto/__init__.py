"""Generated stubs of the kubelet pod-resources API v1 (regenerate with generate.sh).

The generated modules carry no type information; they are loaded by name and re-exported as
`Any` so that the type checker neither follows them nor needs an exception for them.
"""

import importlib
from typing import Any

pb: Any = importlib.import_module("exporter.k8s.proto.api_pb2")
pb_grpc: Any = importlib.import_module("exporter.k8s.proto.api_pb2_grpc")

PodResources = Any
"""`v1.PodResources` message."""
ContainerDevices = Any
"""`v1.ContainerDevices` message."""

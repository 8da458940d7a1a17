"""The committed stubs must match api.proto and import on the installed grpcio/protobuf."""

from __future__ import annotations

import re
from pathlib import Path

from google.protobuf import descriptor_pb2

from exporter.k8s.proto import pb, pb_grpc
from tests.support.paths import ROOT
from tests.support.requirements import require_module

PROTO = "exporter/k8s/proto/api.proto"


def _without_derived(fd: descriptor_pb2.FileDescriptorProto) -> descriptor_pb2.FileDescriptorProto:
    """json_name is derived from the field name and only some generators embed it."""
    out = descriptor_pb2.FileDescriptorProto()
    out.CopyFrom(fd)
    out.ClearField("source_code_info")
    stack = list(out.message_type)
    while stack:
        msg = stack.pop()
        for f in msg.field:
            f.ClearField("json_name")
        stack.extend(msg.nested_type)
    return out


def _compiled_from_source(tmp_path: Path) -> descriptor_pb2.FileDescriptorProto:
    protoc = require_module("grpc_tools.protoc")
    out = tmp_path / "set.pb"
    rc = protoc.main(["protoc", f"-I{ROOT}", f"--descriptor_set_out={out}", str(ROOT / PROTO)])
    assert rc == 0, "protoc failed on api.proto"
    fds = descriptor_pb2.FileDescriptorSet.FromString(out.read_bytes())
    (fd,) = fds.file
    return fd


def test_committed_descriptor_matches_proto(tmp_path: Path) -> None:
    committed = descriptor_pb2.FileDescriptorProto.FromString(pb.DESCRIPTOR.serialized_pb)
    fresh = _compiled_from_source(tmp_path)
    assert _without_derived(committed) == _without_derived(fresh), (
        "exporter/k8s/proto/api_pb2.py is out of date: run exporter/k8s/proto/generate.sh"
    )


def test_grpc_stub_serves_every_method_of_the_proto(tmp_path: Path) -> None:
    fresh = _compiled_from_source(tmp_path)
    (service,) = fresh.service
    source = (ROOT / "exporter/k8s/proto/api_pb2_grpc.py").read_text()
    generated = set(re.findall(r"'/v1\.PodResourcesLister/(\w+)'", source))
    assert generated == {m.name for m in service.method}


def test_stub_generator_is_pinned() -> None:
    source = (ROOT / "exporter/k8s/proto/api_pb2_grpc.py").read_text()
    assert "GRPC_GENERATED_VERSION = '1.66.2'" in source
    assert "GRPC_TOOLS_VERSION=1.66.2" in (ROOT / "exporter/k8s/proto/generate.sh").read_text()


def test_wire_names_are_the_kubelets() -> None:
    assert pb.DESCRIPTOR.package == "v1"
    service = pb.DESCRIPTOR.services_by_name["PodResourcesLister"]
    assert service.full_name == "v1.PodResourcesLister"
    assert pb_grpc.PodResourcesListerStub is not None
    msg = pb.ListPodResourcesResponse(
        pod_resources=[pb.PodResources(name="p", namespace="n")]
    ).SerializeToString()
    # field 1, length-delimited, holding PodResources{1: "p", 2: "n"}
    assert msg == b"\x0a\x06\x0a\x01p\x12\x01n"

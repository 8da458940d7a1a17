"""The label names dcgm-exporter's own code writes, read from its Go sources, against ours.

Upstream's files are read from `tests/fixtures/dcgm-exporter-go/<commit>/<upstream path>`
(byte-for-byte copies; `tests/fixtures/dcgm-exporter-go/SOURCE.md` names each commit and
checksum). What is read:

- `gpu_collector.go` (4.8.2 d5e5f510, 4.8.3 7ad58324): the attributes `toMetric` adds to
  `DCGM_FI_DEV_XID_ERRORS` (`err_code`, `err_msg`) and its `unknownErr` text;
- `xid_errors.go` (4.8.2 d5e5f510): the XID message table, against the one we ship;
- `transformation/kubernetes.go` (4.8.4 fafd1511) and `transformation/const.go` (4.8.3
  7ad58324): the renderer-reserved names per entity group, the `pod_label_` prefix and the
  `_conflict<N>` suffix of `copyPodLabels`, and `pod_uid` in `addPodIdentityAttributes`;
- `rendermetrics/render_metrics.go` (4.8.3 7ad58324): the labels the renderer writes for
  GPU and link entities, in order.

A newer upstream file dropped in place shows its delta here. A file not copied in is
skipped, saying which.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import pytest

from exporter import label_registry as names
from exporter.devices.model import Entity
from exporter.exposition.labels import entity_labels, link_labels, xid_attributes
from exporter.fields.xid_messages import UNKNOWN_ERROR, xid_messages
from exporter.k8s.config import KubernetesConfig
from exporter.k8s.pod_labels import PodLabelRules, is_reserved
from exporter.sampling.snapshot import HostLabel
from tests.support import go_source as go

FOLDER = Path(__file__).parents[1] / "fixtures" / "dcgm-exporter-go"
COLLECTOR = "internal/pkg/collector/gpu_collector.go"
XID_TABLE = "internal/pkg/collector/xid_errors.go"
KUBERNETES = "internal/pkg/transformation/kubernetes.go"
CONSTANTS = "internal/pkg/transformation/const.go"
RENDERER = "internal/pkg/rendermetrics/render_metrics.go"
V482, V483, V484 = ("d5e5f510a1b6b393f39a43293ccd9dc985defc79",
                    "7ad58324b4447b64dc3dedf946b889b648b7f476",
                    "fafd151148052628061a80450b4ee037a5fa0c3c")
GPU = Entity(0, "GPU-aaa", "00000000:83:00.0", "nvidia0", "NVIDIA H200", 2, "3g.71gb")


def upstream(commit: str, path: str) -> str:
    """The upstream file at `commit`, checked against SOURCE.md's checksum."""
    copy = FOLDER / commit[:8] / path
    if not copy.is_file():
        pytest.skip(f"dcgm-exporter's {path} at {commit[:8]} is not in {FOLDER.name}/")
    data = copy.read_bytes()
    listed = re.search(rf"\| {re.escape(path)} \| {commit} \| [^|]* \| ([0-9a-f]{{64}}) \|",
                       (FOLDER / "SOURCE.md").read_text())
    assert listed is not None, f"{path} at {commit[:8]} has no row in SOURCE.md"
    assert hashlib.sha256(data).hexdigest() == listed.group(1), f"{copy} is not the copy"
    return data.decode()


@pytest.mark.parametrize("commit", [V482, V483])
def test_the_xid_attributes_are_upstreams(commit: str) -> None:
    source = go.function_body(upstream(commit, COLLECTOR), "toMetric")
    xid_branch = go.block_after(source, "counter.FieldID == dcgm.DCGM_FI_DEV_XID_ERRORS")
    written = go.map_keys_assigned(xid_branch, "attrs")
    assert sorted(set(written)) == [names.ERR_CODE, names.ERR_MSG]
    assert go.string_constant(upstream(commit, COLLECTOR), "unknownErr") == UNKNOWN_ERROR
    # Ours writes them, and they are reserved against pod labels.
    assert [n for n, _ in xid_attributes(13.0)] == [names.ERR_CODE, names.ERR_MSG]
    assert all(is_reserved(n) for n in written)


def test_the_xid_message_table_is_upstreams() -> None:
    table = go.indexed_string_table(upstream(V482, XID_TABLE), "xidErrCodeToText")
    assert list(xid_messages()) == table


def test_pod_label_renaming_uses_upstreams_prefix_suffix_and_reserved_names() -> None:
    kubernetes = upstream(V484, KUBERNETES)
    constants = upstream(V483, CONSTANTS)
    assert go.string_constant(constants, "podLabelPrefix") == names.POD_LABEL_PREFIX
    available = go.function_body(kubernetes, "availablePodLabelName")
    (suffix,) = re.findall(r'"%s(_\w+)%d"', available)
    assert suffix == names.CONFLICT_SUFFIX
    reserved = go.group_name_sets(kubernetes, "rendererReservedLabels")
    assert {"dcgm.FE_GPU", "dcgm.FE_LINK", "dcgm.FE_SWITCH", "dcgm.FE_CPU",
            "dcgm.FE_CPU_CORE"} <= set(reserved)
    every = set().union(*reserved.values())
    # The GPU group also reserves the UUID label's name (`UUID`, `uuid` with -o).
    every |= {names.UUID, names.OLD_UUID}
    assert sorted(n for n in every if not is_reserved(n)) == []
    # And a pod label of each such name is renamed, never copied over the series' own.
    rules = PodLabelRules.from_config(KubernetesConfig(enable_pod_labels=True))
    copied, _ = rules.apply("u", dict.fromkeys(sorted(every), "x"))
    assert {n for n, _ in copied} == {names.POD_LABEL_PREFIX + n for n in every}


def test_pod_uid_is_an_identity_attribute_on_every_path() -> None:
    kubernetes = upstream(V484, KUBERNETES)
    constants = upstream(V483, CONSTANTS)
    assert go.string_constant(constants, "uidAttribute") == names.POD_UID
    identity = go.function_body(kubernetes, "addPodIdentityAttributes")
    assert "metric.Attributes[uidAttribute]" in go.block_after(
        identity, "if p.Config.KubernetesEnablePodUID")
    process = go.function_body(kubernetes, "Process")
    # The virtual-GPU, device-plugin and DRA paths all go through it.
    assert process.count("p.addPodIdentityAttributes(") >= 3
    for constant in ("podAttribute", "namespaceAttribute", "containerAttribute",
                     "vgpuAttribute", "oldPodAttribute", "oldNamespaceAttribute",
                     "oldContainerAttribute", "draClaimName", "draClaimNamespace",
                     "draDriverName", "draPoolName", "draDeviceName", "draMigProfile",
                     "draMigDeviceUUID", "hpcJobAttribute"):
        assert go.string_constant(constants, constant) in names.DECLARED, constant


def test_the_renderers_gpu_and_link_labels_are_ours_in_order() -> None:
    switch = go.block_after(go.function_body(upstream(V483, RENDERER), "metricLabels"),
                            "switch group")
    cases = go.case_blocks(switch)
    gpu = go.builder_adds(cases["dcgm.FE_GPU"])
    # builder.add(metric.UUID, ...) names the UUID label by a variable: after `gpu`.
    assert "builder.add(metric.UUID," in cases["dcgm.FE_GPU"]
    ours = [n for n, _ in entity_labels(GPU, HostLabel("hostname", "node-a"))]
    assert ours == [gpu[0], names.UUID, *gpu[1:]]
    link = go.builder_adds(cases["dcgm.FE_LINK"])
    ours_link = [n for n, _ in link_labels(GPU, 1, HostLabel("hostname", "node-a"))]
    # Ours writes a subset (no NVSwitch, no MIG labels on links), in upstream's order.
    assert [n for n in link if n in ours_link] == ours_link
    assert set(link) - set(ours_link) <= {names.NVSWITCH, names.GPU_I_PROFILE, names.GPU_I_ID}
    for group in ("dcgm.FE_SWITCH", "dcgm.FE_CPU", "dcgm.FE_CPU_CORE"):
        assert all(is_reserved(n) for n in go.builder_adds(cases[group])), group


SHAPES = '''
package sample

const (
	prefixName = "pfx_"
)

var table = []string{
	0: "zero",
	1: "one, with a comma",
	2: "two \\"quoted\\"",
}

var groups = map[dcgm.Field_Entity_Group]map[string]struct{}{
	dcgm.FE_A: {
		"a1": {},
		"a2": {},
	},
	dcgm.FE_B: {
		"b1": {},
	},
}

func (r *Thing) fill(m map[string]string, v int) (string, error) {
	if v == 1 {
		m["first"] = "{" // a brace in a string and in a comment: }
		m["second"] = fmt.Sprintf("%s_n%d", "x", v)
	}
	switch v {
	case dcgm.FE_A:
		builder.add("x", 1)
		builder.add(name, 2)
	case dcgm.FE_B:
		builder.add("y", 3)
	default:
	}
	return "", nil
}
'''


def test_the_go_scanner_reads_the_shapes_it_claims() -> None:
    """On a Go sample written for this test: what each helper returns, and the error that
    names a construct that is gone."""
    assert go.string_constant(SHAPES, "prefixName") == "pfx_"
    assert go.indexed_string_table(SHAPES, "table") == ["zero", "one, with a comma",
                                                        'two "quoted"']
    assert go.group_name_sets(SHAPES, "groups") == {"dcgm.FE_A": {"a1", "a2"},
                                                    "dcgm.FE_B": {"b1"}}
    body = go.function_body(SHAPES, "fill")
    assert go.map_keys_assigned(go.block_after(body, "if v == 1"), "m") == ["first", "second"]
    cases = go.case_blocks(go.block_after(body, "switch v"))
    assert set(cases) == {"dcgm.FE_A", "dcgm.FE_B"}
    assert go.builder_adds(cases["dcgm.FE_A"]) == ["x"]
    assert go.builder_adds(cases["dcgm.FE_B"]) == ["y"]
    with pytest.raises(go.GoShapeError, match="no func gone"):
        go.function_body(SHAPES, "gone")
    with pytest.raises(go.GoShapeError, match="no string constant missing"):
        go.string_constant(SHAPES, "missing")

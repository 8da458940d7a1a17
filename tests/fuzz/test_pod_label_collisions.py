"""No pod label can make a scraper reject the node.

Any pod label keys and values, copied under every label-copying option (ours, dcgm-exporter's
pod labels with and without an allow-list, a preset, `pod_uid`, virtual GPUs, 1.x names, HPC
jobs, the label budget), on every simulated node and with a field of every scope (GPU, MIG
instance, NVLink, GPU pair, XID and clock-event windows, the last XID's `err_code` and
`err_msg`, `label`-type fields, allocation rows): every line of the body keeps unique label
names, every name is either one the exporter declares (`exporter.label_registry`) or a
copied pod label, and Prometheus' own parser (promtool) and prometheus_client accept the
body. A pod label whose name is taken is renamed as dcgm-exporter 4.8.3 renames it
(`pod_label_<name>`, then `_conflict<N>`), never lost, and the names depend only on the
pod's labels, never on the order they come in.

The devices are read once per node through the real NVML backend over the simulated node;
each example attributes them to hostile pods and renders, as a poll does.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import example, given
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

from exporter import label_registry
from exporter.devices.model import Inventory, Readings
from exporter.devices.nvml import NvmlBackend
from exporter.exposition.config import ExpositionSettings
from exporter.exposition.publisher import Publisher
from exporter.fields.csv import Collectors, parse_collectors
from exporter.k8s.attribution import Allocation, DeviceResolver, attribute
from exporter.k8s.config import DRA_GPU_DRIVER, KubernetesConfig
from exporter.k8s.dra import claim_labels
from exporter.k8s.pod_labels import RENAMED, PodLabelRules
from exporter.k8s.resourceslices import SliceDevice
from exporter.sampling.snapshot import HostLabel, Snapshot
from exporter.sampling.stats import PollStats
from exporter.selfmetrics import POD_GPU_ALLOCATION
from exporter.series import Sample
from exporter.simulated.node import PROFILES, SimNvml, parse_fault
from tests.support.clock import FakeClock
from tests.support.promtool import promtool_problems
from tests.support.wait import wait_until

CSV = """\
DCGM_FI_DEV_GPU_TEMP, gauge, temperature
DCGM_FI_DEV_GPU_UTIL, gauge, utilisation
DCGM_FI_DEV_FB_USED, gauge, framebuffer used
DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_PER_LINK_TOTAL, counter, per-link CRC flit errors
DCGM_EXP_P2P_STATUS, gauge, P2P status per GPU pair
DCGM_EXP_XID_ERRORS_COUNT, gauge, XIDs in the window
DCGM_FI_DEV_XID_ERRORS, gauge, last XID
DCGM_EXP_CLOCK_EVENTS_COUNT, counter, clock events in the window
DCGM_FI_DRIVER_VERSION, label, driver version
DCGM_FI_DEV_SERIAL, label, serial
DCGM_FI_DEV_POWER_USAGE, untyped, power untyped
"""
COLLECTORS: Collectors = parse_collectors(CSV, "every-scope.csv")
PROMTOOL_EVERY = 4
_examples = itertools.count()


@dataclass(frozen=True)
class Node:
    profile: str
    inventory: Inventory
    readings: Readings


def _read(profile: str) -> Node:
    clock = FakeClock(start=1_000_000.0)
    lib = SimNvml(profile, seed=5, clock=clock,
                  faults=[parse_fault("xid,code=13,gpu=0,at=1s"),
                          parse_fault("thermal,gpu=0,at=0s,for=10m")])
    backend = NvmlBackend(lib, COLLECTORS.specs, clock=clock, wall_clock=clock)
    backend.start()
    try:
        readings = backend.poll()
        for _ in range(4):
            clock.advance(1.5)
            readings = backend.poll()
        # The XID arrives on the event watcher's thread: poll until the window shows it.
        def with_the_xid() -> Readings | None:
            polled = backend.poll()
            return polled if polled.xid_window else None

        readings = wait_until(with_the_xid, timeout=15, what=f"the XID on {profile}")
        return Node(profile, backend.inventory, readings)
    finally:
        backend.close()


@pytest.fixture(scope="module")
def nodes() -> dict[str, Node]:
    return {name: _read(name) for name in sorted(PROFILES)}


@pytest.fixture(scope="module")
def job_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """HPC job files for GPUs 0 and 1: two jobs each, so their series are repeated."""
    directory = tmp_path_factory.mktemp("jobs")
    for gpu in ("0", "1"):
        (directory / gpu).write_text("job-1\njob-2\n")
    return directory


def test_the_nodes_have_a_series_of_every_scope(nodes: dict[str, Node]) -> None:
    # Otherwise the property below would not be trying what it claims to.
    assert any(n.readings.links for n in nodes.values())
    assert any(n.readings.peers for n in nodes.values())
    assert any(n.readings.xid_window for n in nodes.values())
    assert any(n.readings.clock_events for n in nodes.values())
    assert any(n.inventory.instances for n in nodes.values())
    assert any(n.readings.labels for n in nodes.values())


# Every name the exporter writes, as a pod label key would spell it (the key sanitises to
# it), and the hostile case of the issue: `model-name` on a node with NVLink series.
_declared = sorted(label_registry.DECLARED)
hostile_key = st.one_of(
    st.sampled_from(_declared),
    st.sampled_from(_declared).map(lambda n: n.replace("_", "-")),
    st.sampled_from(_declared).map(lambda n: "example.com/" + n),
    st.sampled_from(["model-name", "link-status", "peer.gpu", "nvlink", "GPU_I_ID",
                     "DCGM_FI_DRIVER_VERSION", "dra_claim_name", "__name__", "le", "",
                     "label_app", "3scale.net/tier", "a.b", "a-b", "app", "err_code",
                     "err-msg", "pod_label_pod", "pod_label_pod_conflict1", "pod-label-gpu",
                     "pod_label_err_code", "pod_label_label_app", "version", "kind"]),
    st.text(max_size=12),
)
any_value = st.one_of(st.text(max_size=16), st.sampled_from(["", "llama-3-8b", '"\\\n{}']))
pod_labels = st.dictionaries(hostile_key, any_value, max_size=8)


@dataclass(frozen=True)
class Copying:
    name: str
    config: KubernetesConfig
    virtual_gpus: bool = False
    old_names: bool = False
    jobs: bool = False
    limit: int = 0


COPYING = [
    Copying("ours", KubernetesConfig(pod_labels=".*")),
    Copying("dcgm", KubernetesConfig(enable_pod_labels=True)),
    Copying("dcgm-allowlist", KubernetesConfig(enable_pod_labels=True,
                                               pod_label_allowlist=("name", "gpu", "^l"))),
    Copying("preset", KubernetesConfig(pod_label_presets=("dynamo", "llm-d", "kai"))),
    Copying("uid", KubernetesConfig(enable_pod_uid=True)),
    Copying("both+virtual", KubernetesConfig(pod_labels=".*", enable_pod_labels=True,
                                             enable_pod_uid=True), virtual_gpus=True),
    Copying("dcgm+1.x+jobs", KubernetesConfig(enable_pod_labels=True, enable_pod_uid=True),
            old_names=True, jobs=True),
    Copying("budget", KubernetesConfig(pod_labels=".*", enable_pod_labels=True), limit=16),
]


def _allocations(node: Node) -> Iterator[Allocation]:
    """Every device held: whole GPUs by one pod, the first GPU time-sliced by two, MIG
    instances through their compute instances, the last GPU through DRA."""
    gpus = [g for g in node.inventory.gpus if not any(
        i.gpu == g.gpu for i in node.inventory.instances)]
    for n, gpu in enumerate(gpus):
        if n == 0:
            for replica, pod in enumerate(("shared-a", "shared-b")):
                yield Allocation("team", pod, "main", "nvidia.com/gpu", f"{gpu.uuid}::{replica}")
        elif n == len(gpus) - 1:
            labels = claim_labels("claim", "team", "pool", f"gpu-{gpu.gpu}",
                                  SliceDevice("gpu", gpu.uuid))
            yield Allocation("team", f"dra-{n}", "main", DRA_GPU_DRIVER, gpu.uuid,
                             claim_labels=labels)
        else:
            yield Allocation("team", f"whole-{n}", "main", "nvidia.com/gpu", gpu.uuid)
    for n, inst in enumerate(node.inventory.instances):
        for mig in inst.mig_devices:
            yield Allocation("team", f"mig-{n}-{mig.compute_instance_id}", "main",
                             "nvidia.com/mig-1g.18gb", mig.uuid)


_LINE = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*\{(.*)\} \S+$")
_NAME = re.compile(r'(?:^|,)([a-zA-Z_][a-zA-Z0-9_]*)="')


def _label_names(line: str) -> list[str]:
    match = _LINE.match(line)
    if match is None:
        return []
    # Values are escaped (\" and \\), so a name is what precedes =" outside a value.
    body, names, i = match.group(1), [], 0
    while i < len(body):
        m = _NAME.match(body, i)
        assert m is not None, line
        names.append(m.group(1))
        i = m.end()
        while body[i] != '"':
            i += 2 if body[i] == "\\" else 1
        i += 1
    return names


@given(profile=st.sampled_from(sorted(PROFILES)), copying=st.sampled_from(COPYING),
       labels=pod_labels, host=st.sampled_from(["Hostname", "hostname"]))
@example(profile="h100-8", copying=COPYING[1], labels={"model-name": "llama-3-8b"},
         host="Hostname")
@example(profile="h100-8", copying=COPYING[1],
         labels={"link_status": "x", "peer_gpu": "1", "nvlink": "0", "clock_event": "c",
                 "window_size_in_ms": "1", "xid": "1", "gpu_uuid": "u"}, host="hostname")
def test_no_pod_label_repeats_a_name_or_breaks_the_body(
        nodes: dict[str, Node], job_dir: Path, profile: str, copying: Copying,
        labels: dict[str, str], host: str) -> None:
    node = nodes[profile]
    rules = PodLabelRules.from_config(copying.config)
    result = attribute(_allocations(node), node.inventory, DeviceResolver(),
                       extra_labels=lambda _ns, _pod: rules.apply("uid-1", labels)[0],
                       virtual_gpus=copying.virtual_gpus)
    snapshot = Snapshot(node.inventory, node.readings, COLLECTORS, HostLabel(host, "node-a"),
                        result.attribution)
    publisher = Publisher("sim", ExpositionSettings(
        use_old_namespace=copying.old_names, label_limit=copying.limit,
        hpc_job_mapping_dir=job_dir if copying.jobs else None))
    rows = POD_GPU_ALLOCATION.family(Sample(row, 1.0) for row in result.allocation_rows)
    text = publisher(snapshot, PollStats(1.0), [rows]).text.decode()

    applied, notes = rules.apply("uid-1", labels)
    copied = {name for name, _ in applied}
    # Deterministic: the same labels in reverse order get the same names.
    assert rules.apply("uid-1", dict(reversed(labels.items()))) == (applied, notes)
    # A renamed label is copied under dcgm-exporter's name for it, never lost.
    for note in notes:
        if note.reason == RENAMED:
            assert re.fullmatch(re.escape("pod_label_" + note.name) + r"(_conflict[1-9]\d*)?",
                                note.renamed_to), note
            assert note.renamed_to in copied or labels[note.key] == "", note
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        names = _label_names(line)
        assert len(names) == len(set(names)), line
        undeclared = [n for n in names if not label_registry.is_declared(n)]
        assert set(undeclared) <= copied, (undeclared, line)
        if copying.limit:
            assert len(names) + 1 <= copying.limit or not undeclared, line
    seen = set()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            key = (sample.name, tuple(sorted(sample.labels.items())))
            assert key not in seen, key
            seen.add(key)
    if next(_examples) % PROMTOOL_EVERY == 0:
        assert not promtool_problems(text)
